//! Wiring: a validated `Config` in, a running proxy out. The only module
//! that knows every stage; `handle` walks one request through them, and
//! `websocket` one upgraded session.

mod request;
pub mod websocket;

pub use request::ProxyBody;

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;

use arc_swap::ArcSwap;
use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::admin::{self, Admin, AdminState, ConfigView, Readiness};
use crate::config::{Config, ConfigError, RESTART_ONLY, UpstreamConfig};
use crate::meter::drain::Drains;
use crate::meter::ledger::Ledger;
use crate::meter::shutdown::{Cut, Shutdown};
use crate::meter::tokenize::Tokenizer;
use crate::meter::ws_sessions::WsSessions;
use crate::pricing::{Day, PriceBook, PriceError, When};
use crate::providers::{ProviderKind, ServiceTier};
use crate::route::Router;
use crate::server::Shards;
use crate::server::tls::Tls;
use crate::state::{StateFile, Store};
use crate::telemetry::Telemetry;
use crate::upstream::{Client, Egress, Shard};

/// How long stopped drains get to record before telemetry is flushed.
const DRAIN_STOP_WAIT: std::time::Duration = std::time::Duration::from_secs(1);

/// WebSocket sessions still open this long before the grace period ends
/// (at most half of it) are stopped then: a session over HTTP/2 rides on a
/// connection the server's drain cuts when the grace period ends, and its
/// close frame 1001 has to be out before that.
const WS_SESSION_CLOSE_WINDOW: std::time::Duration = std::time::Duration::from_millis(100);

/// How often a drain logs what it still waits for.
const DRAIN_PROGRESS_EVERY: std::time::Duration = std::time::Duration::from_secs(10);

/// Everything a request needs for one configuration: built at start-up and
/// again by each reload. A request keeps the snapshot it started with.
#[derive(Debug)]
struct State {
    config: Config,
    router: Router,
    client: Client,
    telemetry: Arc<Telemetry>,
    tokenizer: Arc<Tokenizer>,
    /// Usage already counted, by response id (kept across reloads).
    ledger: Arc<Ledger>,
    /// Upstream bodies read on after their client left (drain routes).
    drains: Arc<Drains>,
    /// WebSocket sessions being relayed.
    ws_sessions: Arc<WsSessions>,
    /// Open streams and the drain's cut (kept across reloads).
    shutdown: Arc<Shutdown>,
}

/// A running tokentap instance.
#[derive(Debug)]
pub struct Running {
    /// The proxy's bound address (useful when configured with port 0).
    pub addr: SocketAddr,
    /// The admin listener's bound address; `None` when admin is off (or
    /// its default address was taken).
    pub admin_addr: Option<SocketAddr>,
    stop: watch::Sender<bool>,
    server: Shards,
    admin: Option<Admin>,
    readiness: Readiness,
    telemetry: Arc<Telemetry>,
    tokenizer: Arc<Tokenizer>,
    /// The snapshot new requests load (lock-free); `reload` swaps it whole.
    state: Arc<ArcSwap<State>>,
    /// What `/config` shows.
    config_view: ConfigView,
    drains: Arc<Drains>,
    ws_sessions: Arc<WsSessions>,
    shutdown: Arc<Shutdown>,
    shutdown_grace: std::time::Duration,
    /// The shared state store (`[state] url`).
    store: Option<Arc<Store>>,
    /// The single instance's state file (`[state] path`).
    state_file: Option<StateFile>,
    /// The proxy listener's TLS, reloaded with the configuration.
    tls: Option<Arc<Tls>>,
    /// The admin listener's TLS, reloaded with the configuration.
    admin_tls: Option<Arc<Tls>>,
}

impl Running {
    /// Report not-ready on `/readyz`, stop accepting, let in-flight requests
    /// finish within the configured grace period, stop the admin listener
    /// (it answers throughout the drain), then flush telemetry.
    pub async fn shutdown(self) {
        self.shutdown_or_cut(std::future::pending()).await;
    }

    /// As [`Running::shutdown`], but when `cut_now` resolves first (a
    /// second signal) what is still open is cut at once. What the cut ends
    /// is recorded as tokentap's (outcome `shutdown`), never the client's
    /// or the upstream's; WebSocket sessions get a close frame 1001 each
    /// way just before it.
    pub async fn shutdown_or_cut(mut self, cut_now: impl Future<Output = ()>) {
        #[allow(
            clippy::disallowed_methods,
            reason = "shutdown grace deadline, not a measurement"
        )]
        let grace_ends = tokio::time::Instant::now() + self.shutdown_grace;
        self.readiness.set_draining();
        let _ = self.stop.send(true);
        let (ws_sessions, shutdown) = (self.ws_sessions.clone(), self.shutdown.clone());
        let close_at = grace_ends - WS_SESSION_CLOSE_WINDOW.min(self.shutdown_grace / 2);
        let deadline = cut_at(close_at, grace_ends, cut_now, &ws_sessions, &shutdown);
        let all_done = async {
            self.server.served().await;
            ws_sessions.wait_idle().await;
        };
        let progress = report_progress(&ws_sessions, &shutdown);
        let cut = tokio::select! {
            () = all_done => None,
            cut = deadline => Some(cut),
            () = progress => None,
        };
        if let Some(cut) = cut {
            let open = shutdown.open();
            tracing::warn!(
                streams = open.streams,
                error_type = cut.error_type(),
                "drain cut: the streams still open are closed and recorded as cut by tokentap"
            );
            self.server.served().await;
        }
        // Drains (clients already gone) get what is left of the grace
        // period, unless the drain was cut, then stop and record what they
        // have.
        if shutdown.is_cut().is_none() {
            let _ = tokio::time::timeout_at(grace_ends, self.drains.wait_idle()).await;
        }
        if self.drains.active() > 0 {
            tracing::warn!(
                drains = self.drains.active(),
                "shutdown grace expired; stopping drains"
            );
        }
        self.drains.stop();
        let _ = tokio::time::timeout(DRAIN_STOP_WAIT, self.drains.wait_idle()).await;
        let _ = tokio::time::timeout(DRAIN_STOP_WAIT, self.ws_sessions.wait_idle()).await;
        if let Some(admin) = self.admin {
            admin.shutdown().await;
        }
        if let Some(store) = &self.store {
            // Claims and session adds still queued reach the store first.
            store.flush(DRAIN_STOP_WAIT).await;
        }
        let saved = (self.state_file.take()).map(|f| (f, self.state.load().ledger.clone()));
        let (telemetry, tokenizer) = (self.telemetry, self.tokenizer);
        let _ = tokio::task::spawn_blocking(move || {
            // Measurements still being counted are recorded before the flush.
            tokenizer.flush(std::time::Duration::from_secs(5));
            if let Some((file, ledger)) = saved {
                crate::state::save(&file, &ledger, telemetry.sessions());
            }
            telemetry.shutdown();
        })
        .await;
        self.server.exit().await;
    }

    /// The instance's telemetry (live statistics, Prometheus scrape).
    pub fn telemetry(&self) -> &Telemetry {
        &self.telemetry
    }

    /// Upstream bodies being read on after their client left.
    pub fn drains_active(&self) -> usize {
        self.drains.active()
    }

    /// WebSocket sessions being relayed.
    pub fn ws_sessions_active(&self) -> usize {
        self.ws_sessions.active()
    }

    /// Whether the active configuration asks for the config file to be watched.
    pub fn watch_config(&self) -> bool {
        self.state.load().config.watch_config
    }

    /// Swap in a newly loaded configuration: new requests use it, requests
    /// in flight finish on the snapshot they started with, and no
    /// connection is touched. Refused, with the old configuration kept,
    /// when `loaded` failed, a restart-only key changed, or the upstream
    /// client cannot be rebuilt. Counted in `tokentap.config.reloads` and
    /// shown on `/config` either way. Call it from one task at a time (the
    /// swap is a load then a store, not a compare-and-swap).
    pub fn reload(&self, loaded: Result<Config, ConfigError>) -> Result<(), ReloadError> {
        let result = loaded
            .map_err(ReloadError::from)
            .and_then(|config| self.swap(config));
        self.telemetry.record_config_reload(result.is_ok());
        let active = self.state.load();
        match &result {
            Ok(()) => self.config_view.set(&active.config),
            Err(e) => self.config_view.failed(&active.config, &e.summary()),
        }
        result
    }

    fn swap(&self, config: Config) -> Result<(), ReloadError> {
        let current = self.state.load_full();
        if let Some(key) = current.config.restart_required(&config) {
            return Err(ReloadError::RestartRequired { key });
        }
        let client = if client_changed(&current.config.upstream, &config.upstream) {
            Client::new(&config.upstream, Egress::from_env(&config.proxy_env))
                .map_err(|e| ReloadError::Upstream(e.to_string()))?
        } else {
            current.client.clone()
        };
        // Certificates are read again on every reload (a rotated file keeps
        // its path); both listeners' files must load before either changes.
        let staged = [
            (&self.tls, config.tls.as_ref()),
            (&self.admin_tls, config.admin.tls.as_ref()),
        ]
        .into_iter()
        .filter_map(|(tls, cfg)| Some((tls.as_ref()?, cfg?)))
        .map(|(tls, cfg)| {
            Tls::prepare(cfg)
                .map(|s| (tls, s))
                .map_err(|e| ReloadError::Tls(format!("{} listener: {e}", tls.listener)))
        })
        .collect::<Result<Vec<_>, _>>()?;
        // The --prices file is read again on every reload, like certificates.
        let prices = price_book(&config).map_err(|e| ReloadError::Prices(e.to_string()))?;
        for (tls, s) in staged {
            tls.install(s);
        }
        current.telemetry.set_prices(Arc::new(prices));
        self.state.store(Arc::new(State {
            router: Router::new(&config.routes, config.upstream.drain_timeout),
            client,
            telemetry: current.telemetry.clone(),
            tokenizer: current.tokenizer.clone(),
            ledger: current.ledger.clone(),
            drains: current.drains.clone(),
            ws_sessions: current.ws_sessions.clone(),
            shutdown: current.shutdown.clone(),
            config,
        }));
        Ok(())
    }
}

/// The drain's end: WebSocket sessions still open at `close_at` (or at
/// `cut_now`) are stopped with close frames 1001, then everything still
/// open is cut at `grace_ends` (or at once after `cut_now`).
async fn cut_at(
    close_at: tokio::time::Instant,
    grace_ends: tokio::time::Instant,
    cut_now: impl Future<Output = ()>,
    ws_sessions: &WsSessions,
    shutdown: &Shutdown,
) -> Cut {
    let mut cut_now = std::pin::pin!(cut_now);
    let forced = tokio::select! {
        () = tokio::time::sleep_until(close_at) => false,
        () = cut_now.as_mut() => true,
    };
    // Sessions on an HTTP/2 connection ride on what the cut closes: their
    // close frames go out first.
    ws_sessions.stop();
    let why = if forced {
        let _ = tokio::time::timeout(WS_SESSION_CLOSE_WINDOW, ws_sessions.wait_idle()).await;
        Cut::Forced
    } else {
        tokio::select! {
            () = tokio::time::sleep_until(grace_ends) => Cut::GraceExpired,
            () = cut_now => Cut::Forced,
        }
    };
    shutdown.cut(why);
    why
}

/// Every `DRAIN_PROGRESS_EVERY`, log the streams the drain still waits for
/// and the oldest one's age. Never ends.
async fn report_progress(ws_sessions: &WsSessions, shutdown: &Shutdown) {
    let mut tick = tokio::time::interval(DRAIN_PROGRESS_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tick.tick().await;
    loop {
        tick.tick().await;
        let open = shutdown.open();
        let oldest = open.oldest.unwrap_or_default();
        tracing::info!(
            streams = open.streams,
            oldest = %humantime::format_duration(oldest),
            websocket_sessions = ws_sessions.active(),
            "draining: streams still open"
        );
    }
}

/// Why a reload was refused. The running configuration keeps serving.
#[derive(Debug, thiserror::Error)]
pub enum ReloadError {
    /// The new configuration does not load (bad key, value or file).
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// A key bound at start-up differs.
    #[error(
        "`{key}` cannot change without a restart (restart-only: {})",
        RESTART_ONLY.join(", ")
    )]
    RestartRequired {
        /// The config key whose change needs a restart.
        key: String,
    },
    /// The upstream client could not be rebuilt (e.g. a bad CA file).
    #[error("{0}")]
    Upstream(String),
    /// A listener's new certificate, key or client CA bundle is unusable;
    /// the certificates in use keep serving.
    #[error("{0}")]
    Tls(String),
    /// A price override (or the `--prices` file) is unusable; the prices
    /// in use stay.
    #[error("{0}")]
    Prices(String),
}

impl ReloadError {
    /// One line naming the key and source but no values, fit for `/config`.
    pub fn summary(&self) -> String {
        match self {
            ReloadError::Config(ConfigError::UnknownKey { key, origin, .. }) => {
                format!("unknown key `{key}` in {origin}")
            }
            ReloadError::Config(ConfigError::Invalid { key, origin, .. }) => {
                format!("invalid `{key}` (from {origin})")
            }
            ReloadError::Config(ConfigError::File { path, .. }) => {
                format!("config file {} cannot be read or parsed", path.display())
            }
            ReloadError::Config(e @ ConfigError::NoRoutes) => e.to_string(),
            ReloadError::Config(_) => "the new configuration is invalid (see the log)".into(),
            ReloadError::RestartRequired { key } => {
                format!("`{key}` cannot change without a restart")
            }
            ReloadError::Upstream(m) | ReloadError::Tls(m) | ReloadError::Prices(m) => m.clone(),
        }
    }
}

/// A new pooled client is built when a setting changed, and whenever a CA
/// file is configured (a reload is how a rotated bundle is picked up).
fn client_changed(old: &UpstreamConfig, new: &UpstreamConfig) -> bool {
    new.ca_file.is_some() || old != new
}

/// What start-up reads from disk besides the configuration itself: the
/// upstream client (its CA file), the listeners' certificates and keys
/// (checked to fit), the price overrides and export's TLS files. Start-up
/// and `tokentap check` both read them here, so they refuse the same files.
struct Loaded {
    client: Client,
    tls: Option<Arc<Tls>>,
    admin_tls: Option<Arc<Tls>>,
    prices: PriceBook,
}

impl Loaded {
    /// Read every file `config` names. Must run inside a tokio runtime.
    fn read(config: &Config) -> anyhow::Result<Loaded> {
        let client = Client::new(&config.upstream, Egress::from_env(&config.proxy_env))?;
        let tls = config
            .tls
            .as_ref()
            .map(|t| Tls::load("proxy", t))
            .transpose()?;
        let admin_tls = match (&config.admin_listen, &config.admin.tls) {
            (Some(_), Some(t)) => Some(Tls::load("admin", t)?),
            _ => None,
        };
        let prices = price_book(config)?;
        Telemetry::check_files(&config.telemetry)?;
        Ok(Loaded {
            client,
            tls,
            admin_tls,
            prices,
        })
    }
}

/// Everything start-up reads (see [`Loaded`]), checked without binding
/// anything or starting exporters: `tokentap check`.
pub fn check(config: &Config) -> anyhow::Result<()> {
    Loaded::read(config).map(drop)
}

/// The prices a configuration defines: the embedded table under its
/// `[[prices]]`, `--prices` file and routes' `[[routes.prices]]`.
pub fn price_book(config: &Config) -> Result<PriceBook, PriceError> {
    PriceBook::new(
        &config.prices,
        config.prices_file.as_deref(),
        config
            .routes
            .iter()
            .map(|r| (r.name.as_str(), r.prices.as_slice())),
    )
}

/// What `tokentap price` asks (its flags, as plain values).
#[derive(Debug, Clone, Copy, Default)]
pub struct PriceQuery<'a> {
    /// Provider config name.
    pub provider: &'a str,
    /// Model name.
    pub model: &'a str,
    /// `--at`: a day or an RFC 3339 time; now when `None`.
    pub at: Option<&'a str>,
    /// `--service-tier`.
    pub service_tier: Option<&'a str>,
    /// `--route`: whose overrides apply (needs `config`).
    pub route: Option<&'a str>,
    /// `--config`.
    pub config: Option<&'a std::path::Path>,
    /// `--prices`.
    pub prices: Option<&'a std::path::Path>,
}

/// `tokentap price`: the account `PriceBook::explain` gives for the
/// provider and model in `args`, under the overrides of `--config` and
/// `--prices` when given.
pub fn price_report(args: &PriceQuery<'_>) -> anyhow::Result<String> {
    let provider = ProviderKind::ALL
        .into_iter()
        .find(|k| k.config_name() == args.provider)
        .ok_or_else(|| {
            let names: Vec<&str> = ProviderKind::ALL.iter().map(|k| k.config_name()).collect();
            anyhow::anyhow!(
                "unknown provider `{}`; expected one of: {}",
                args.provider,
                names.join(", ")
            )
        })?;
    let at = match args.at {
        None => When::of(std::time::SystemTime::now()),
        Some(s) => match Day::parse(s) {
            Some(day) => When::midnight(day),
            None => When::of(humantime::parse_rfc3339_weak(s).map_err(|_| {
                anyhow::anyhow!("--at `{s}` is neither a date (YYYY-MM-DD) nor an RFC 3339 time")
            })?),
        },
    };
    let tier = match args.service_tier {
        None => None,
        Some(s) => Some(ServiceTier::parse(s).ok_or_else(|| {
            anyhow::anyhow!("--service-tier `{s}`: expected default, flex, priority or batch")
        })?),
    };
    let book = match args.config {
        Some(path) => {
            let flags = crate::config::Overrides {
                config: Some(path.to_owned()),
                prices: args.prices.map(ToOwned::to_owned),
                ..Default::default()
            };
            let config = crate::config::load(&flags)?;
            if let Some(route) = args.route {
                if !config.routes.iter().any(|r| r.name == route) {
                    anyhow::bail!("--route `{route}` is not a route of {}", path.display());
                }
            }
            price_book(&config)?
        }
        None if args.route.is_some() => anyhow::bail!("--route needs --config"),
        None => PriceBook::new(&[], args.prices, std::iter::empty())?,
    };
    let route = args.route.unwrap_or("");
    Ok(book.explain(&crate::pricing::Query {
        route,
        provider,
        model: args.model,
        at,
        tier,
    }))
}

/// Bind the listener and start serving. Must run inside a tokio runtime.
pub async fn start(config: Config) -> anyhow::Result<Running> {
    let Loaded {
        client,
        tls,
        admin_tls,
        prices,
    } = Loaded::read(&config)?;
    let listener = TcpListener::bind(config.listen)
        .await
        .map_err(|e| anyhow::anyhow!("listen {}: {e}", config.listen))?;
    let addr = listener.local_addr()?;
    // After the proxy's bind, so a clash costs the admin port, not the proxy.
    let admin_listener = admin::bind(&config).await?;
    // After both binds: a start that fails there leaves no exporter behind
    // to log its own shutdown.
    let telemetry = Arc::new(match config.admin_listen {
        Some(_) => Telemetry::init_with_prometheus(&config.telemetry)?,
        None => Telemetry::init(&config.telemetry)?,
    });
    telemetry.observe_certificates(tls.iter().chain(admin_tls.iter()).cloned().collect());
    telemetry.set_prices(Arc::new(prices));
    let readiness = Readiness::new();
    let config_view = ConfigView::new(&config);
    let shutdown = Shutdown::new();
    let ws_sessions = WsSessions::new(shutdown.clone());
    let admin = admin_listener.map(|l| {
        let state = AdminState {
            telemetry: telemetry.clone(),
            readiness: readiness.clone(),
            config: config_view.clone(),
            ws_sessions: ws_sessions.clone(),
        };
        Admin::spawn(l, state, &config.server, admin_tls.clone(), &config.admin)
    });
    let tokenizer = Tokenizer::start(config.meter.tokenizer);
    let Shared {
        ledger,
        store,
        state_file,
    } = Shared::start(&config, &telemetry)?;
    let server_cfg = config.server.clone();
    let drains = Drains::new(config.upstream.max_drains);
    let observed = drains.clone();
    telemetry.observe_drains(move || observed.active() as u64);
    let observed = ws_sessions.clone();
    telemetry.observe_ws_sessions(move || observed.active() as u64);
    let shutdown_grace = config.server.shutdown_grace;
    let state: Arc<ArcSwap<State>> = Arc::new(ArcSwap::from_pointee(State {
        drains: drains.clone(),
        ws_sessions: ws_sessions.clone(),
        shutdown: shutdown.clone(),
        router: Router::new(&config.routes, config.upstream.drain_timeout),
        client,
        telemetry: telemetry.clone(),
        tokenizer: tokenizer.clone(),
        ledger,
        config,
    }));
    let pools = Arc::downgrade(&state);
    telemetry.observe_upstream_pool(move || {
        let Some(state) = pools.upgrade() else {
            return Vec::new();
        };
        let figures = state.load().client.pool_figures();
        figures
            .into_iter()
            .map(|f| (f.host, f.connections, f.streams, f.queued))
            .collect()
    });
    let (stop, stopped) = watch::channel(false);
    let snapshots = state.clone();
    // Each request takes the snapshot current when it arrives, and goes
    // upstream on its serving thread's connections.
    let handler = move |thread| {
        let snapshots = snapshots.clone();
        move |req| request::handle(snapshots.load_full(), req, Shard(thread))
    };
    let cut = shutdown.clone();
    let server = Shards::start(listener, &server_cfg, tls.clone(), handler, stopped, cut)
        .map_err(|e| anyhow::anyhow!("cannot start the serving threads: {e}"))?;
    Ok(Running {
        addr,
        admin_addr: admin.as_ref().map(|a| a.addr),
        stop,
        server,
        admin,
        readiness,
        telemetry,
        tokenizer,
        state,
        config_view,
        drains,
        ws_sessions,
        shutdown,
        shutdown_grace,
        store,
        state_file,
        tls,
        admin_tls,
    })
}

/// What outlives a request: the ledger, the state store, the state file.
struct Shared {
    ledger: Arc<Ledger>,
    store: Option<Arc<Store>>,
    state_file: Option<StateFile>,
}

impl Shared {
    /// The ledger, deciding through the state store when one is configured
    /// (whose errors telemetry counts and whose sessions it adds to), and
    /// the state file of a single instance, read back now.
    fn start(config: &Config, telemetry: &Telemetry) -> anyhow::Result<Shared> {
        let mut ledger = Ledger::new(config.meter.max_counted_ids);
        let store = Store::connect(
            &config.state,
            config.upstream.ca_file.as_deref(),
            config.sessions.limits(),
        )?;
        if let Some(store) = &store {
            ledger = ledger.with_shared(crate::state::as_ledger(store));
            telemetry.sessions().share(crate::state::as_sessions(store));
            let observed = store.clone();
            telemetry.observe_state_errors(move || observed.errors());
        }
        let state_file = config.state.path.as_deref().map(StateFile::new);
        if let Some(file) = &state_file {
            crate::state::load(file, &ledger, telemetry.sessions());
        }
        Ok(Shared {
            ledger: Arc::new(ledger),
            store,
            state_file,
        })
    }
}

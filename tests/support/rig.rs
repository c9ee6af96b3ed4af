//! A ready test rig: scripted upstream + OTLP receiver + in-process proxy +
//! client, wired together.

use super::client::{self, HttpClient, Req};
use super::otlp::{Collector, SpanRec};
use super::proxy::{InProc, Toml};
use super::upstream::{Exchange, Reply, Upstream};

/// Everything one test needs.
pub(crate) struct Rig {
    pub up: Upstream,
    pub col: Collector,
    pub proxy: InProc,
    pub client: HttpClient,
}

impl Rig {
    /// Upstream serving `handler`, proxy configured by `config` (given a
    /// base with OTLP/gRPC export, or `TOKENTAP_TEST_OTLP_PROTOCOL`'s, to the rig's receiver and the upstream URL).
    pub(crate) async fn start(
        handler: impl Fn(&Exchange) -> Reply + Send + Sync + 'static,
        config: impl FnOnce(Toml, &str) -> Toml,
    ) -> Rig {
        // TOKENTAP_TEST_OTLP_PROTOCOL=http/protobuf runs the same checks
        // over the other exporter.
        let protocol = std::env::var("TOKENTAP_TEST_OTLP_PROTOCOL");
        let protocol = protocol.as_deref().unwrap_or("grpc");
        Rig::start_with(handler, protocol, config).await
    }

    /// Same as `start`, with the OTLP protocol named.
    pub(crate) async fn start_with(
        handler: impl Fn(&Exchange) -> Reply + Send + Sync + 'static,
        protocol: &str,
        config: impl FnOnce(Toml, &str) -> Toml,
    ) -> Rig {
        let up = Upstream::start(handler).await;
        let col = Collector::start().await;
        let toml = config(Toml::new().otlp(&col.endpoint(), protocol), &up.url());
        let proxy = InProc::start(&toml).await;
        Rig {
            up,
            col,
            proxy,
            client: client::http1(),
        }
    }

    /// One route `/` named after `provider`, for it, to a fixed reply.
    pub(crate) async fn provider(provider: &str, reply: Reply) -> Rig {
        Rig::start(
            move |_| reply.clone(),
            |t, up| t.route(provider, "/", up, provider),
        )
        .await
    }

    /// One OpenAI route `/` to a fixed reply.
    pub(crate) async fn openai(reply: Reply) -> Rig {
        Rig::provider("openai", reply).await
    }

    /// One OpenAI route `/` to a fixed reply, with extra route lines
    /// (`route_extra`, TOML) and `[section] key = value` settings (value is TOML).
    pub(crate) async fn openai_with(
        reply: Reply,
        route_extra: &str,
        settings: &[(&str, &str, &str)],
    ) -> Rig {
        let extra = route_extra.to_owned();
        let settings: Vec<(String, String, String)> = settings
            .iter()
            .map(|(s, k, v)| ((*s).to_owned(), (*k).to_owned(), (*v).to_owned()))
            .collect();
        Rig::start(
            move |_| reply.clone(),
            move |t: Toml, up: &str| {
                let mut t = t.route_with("openai", "/", up, "openai", &extra);
                for (s, k, v) in &settings {
                    t = t.set(s, k, v);
                }
                t
            },
        )
        .await
    }

    /// One Anthropic route `/` to a fixed reply.
    pub(crate) async fn anthropic(reply: Reply) -> Rig {
        Rig::provider("anthropic", reply).await
    }

    /// Shut the proxy down (which flushes telemetry), then return the one
    /// span named `name`, failing when there is none or more than one:
    /// every request yields exactly one measurement.
    pub(crate) async fn finish(&mut self, name: &str) -> SpanRec {
        self.proxy.stop().await;
        let span = self.col.wait_span_named(name).await;
        let n = self.col.spans().iter().filter(|s| s.name == name).count();
        assert_eq!(
            n, 1,
            "exactly one span per request: {n} spans named {name:?}"
        );
        span
    }

    /// Shut the proxy down (which flushes telemetry), then return the `n`
    /// spans exported, in the order their requests started, failing unless
    /// there are exactly `n`: one measurement per request.
    pub(crate) async fn finish_n(&mut self, n: usize) -> Vec<SpanRec> {
        self.proxy.stop().await;
        let deadline = tokio::time::Instant::now() + super::STEP_TIMEOUT;
        let mut spans = loop {
            let spans = self.col.spans();
            if spans.len() >= n || tokio::time::Instant::now() >= deadline {
                break spans;
            }
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        };
        assert_eq!(spans.len(), n, "one span per request");
        spans.sort_by_key(|s| s.start_ns);
        spans
    }

    /// Shut the proxy down (which flushes telemetry), then return the
    /// first span exported, whatever its name.
    pub(crate) async fn stop_first_span(&mut self) -> SpanRec {
        self.proxy.stop().await;
        self.col
            .wait_span(super::STEP_TIMEOUT, "for the request", |_| true)
            .await
    }

    /// `stop_first_span`, failing unless it is the only span exported: a
    /// test that sent one request gets exactly one measurement.
    pub(crate) async fn finish_only(&mut self) -> SpanRec {
        let span = self.stop_first_span().await;
        assert_eq!(self.col.spans().len(), 1, "exactly one span per request");
        span
    }

    /// After `finish`: the `tokentap.streams.active` up-down counter is back
    /// to zero (no request leaked its recorder).
    pub(crate) fn assert_no_active_streams(&self) {
        let pts = self.col.latest("tokentap.streams.active");
        assert!(!pts.is_empty(), "tokentap.streams.active was exported");
        let total: f64 = pts.iter().map(|p| p.number()).sum();
        assert_eq!(
            total, 0.0,
            "tokentap.streams.active should be back to 0 after every request ended: {pts:#?}"
        );
    }

    /// `GET path` on the admin listener (the config must set
    /// `admin_listen`), read to its end.
    pub(crate) async fn admin_get(&self, path: &str) -> client::Streamed {
        let admin = self.proxy.running().unwrap().admin_addr.unwrap();
        let req = Req {
            method: http::Method::GET,
            url: format!("http://{admin}{path}"),
            headers: Vec::new(),
            body: bytes::Bytes::new(),
        };
        client::fetch(&client::http1(), &req).await
    }

    /// A JSON POST to the proxy.
    pub(crate) fn post(&self, path: &str, body: Vec<u8>) -> Req {
        Req::post_json(self.proxy.addr, path, body)
    }

    /// An OpenAI chat request for `model` (streamed or not) sent to
    /// `/v1/chat/completions`, read to its end.
    pub(crate) async fn chat(&self, model: &str, stream: bool) -> client::Streamed {
        let body = super::script::openai_request(model, stream, None);
        client::fetch(&self.client, &self.post("/v1/chat/completions", body)).await
    }

    /// An Anthropic messages request for `model` (streamed or not) sent to
    /// `/v1/messages`, read to its end.
    pub(crate) async fn messages(&self, model: &str, stream: bool) -> client::Streamed {
        let body = super::script::anthropic_request(model, stream, None);
        client::fetch(&self.client, &self.post("/v1/messages", body)).await
    }
}

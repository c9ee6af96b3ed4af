//! TLS for scripted upstreams: a throwaway CA made fresh in each test
//! (rcgen), leaf certificates for any names, and a TLS listener on
//! 127.0.0.1 that records what each client offered (SNI, ALPN) and hands
//! every completed handshake to a server the test supplies.

use std::future::Future;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinSet;
use tokio_rustls::LazyConfigAcceptor;
use tokio_rustls::server::TlsStream;

/// A self-signed CA that exists only for one test.
pub(crate) struct TestCa {
    issuer: Issuer<'static, KeyPair>,
    pem: String,
}

impl TestCa {
    pub(crate) fn new() -> TestCa {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(DnType::CommonName, "tokentap test CA");
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let key = KeyPair::generate().unwrap();
        let cert = params.self_signed(&key).unwrap();
        TestCa {
            pem: cert.pem(),
            issuer: Issuer::new(params, key),
        }
    }

    /// The CA certificate, PEM (what `upstream.ca_file` points at).
    pub(crate) fn pem(&self) -> &str {
        &self.pem
    }

    /// A server certificate for `names` (DNS names or IP literals) signed
    /// by this CA, with its private key.
    pub(crate) fn leaf(
        &self,
        names: &[&str],
    ) -> (Vec<CertificateDer<'static>>, PrivateKeyDer<'static>) {
        let names: Vec<String> = names.iter().map(|n| (*n).to_owned()).collect();
        let mut params = CertificateParams::new(names).unwrap();
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        let key = KeyPair::generate().unwrap();
        let cert = params.signed_by(&key, &self.issuer).unwrap();
        let der = PrivatePkcs8KeyDer::from(key.serialize_der());
        (vec![cert.der().clone()], PrivateKeyDer::Pkcs8(der))
    }

    /// A client certificate with subject common name `cn`, valid now, or
    /// expired a year ago when `expired`.
    pub(crate) fn client(
        &self,
        cn: &str,
        expired: bool,
    ) -> (Vec<CertificateDer<'static>>, PrivateKeyDer<'static>) {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.distinguished_name.push(DnType::CommonName, cn);
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        if expired {
            params.not_before = rcgen::date_time_ymd(2020, 1, 1);
            params.not_after = rcgen::date_time_ymd(2021, 1, 1);
        }
        let key = KeyPair::generate().unwrap();
        let cert = params.signed_by(&key, &self.issuer).unwrap();
        let der = PrivatePkcs8KeyDer::from(key.serialize_der());
        (vec![cert.der().clone()], PrivateKeyDer::Pkcs8(der))
    }

    /// The CA certificate, DER.
    pub(crate) fn der(&self) -> CertificateDer<'static> {
        use rustls::pki_types::pem::PemObject;
        CertificateDer::from_pem_slice(self.pem.as_bytes()).unwrap()
    }

    /// A rustls server config presenting a leaf for `names`, offering `alpn`.
    pub(crate) fn server_config(
        &self,
        names: &[&str],
        alpn: &[&[u8]],
    ) -> Arc<rustls::ServerConfig> {
        let (chain, key) = self.leaf(names);
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut cfg = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(chain, key)
            .unwrap();
        cfg.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
        Arc::new(cfg)
    }
}

#[derive(Default)]
struct Seen {
    accepted: AtomicUsize,
    handshakes: AtomicUsize,
    sni: Mutex<Vec<Option<String>>>,
    alpn: Mutex<Vec<Option<String>>>,
}

/// A TLS listener on 127.0.0.1 serving each handshaken stream with a
/// test-supplied server. Every TCP connection is counted; the first
/// `drop_first` are reset (SO_LINGER 0) before any TLS byte is read.
pub(crate) struct TlsUpstream {
    pub addr: SocketAddr,
    seen: Arc<Seen>,
    _task: super::Background,
}

impl TlsUpstream {
    /// Listen on 127.0.0.1:0 with `config`; `serve` runs per handshake.
    pub(crate) async fn start<F, Fut>(
        config: Arc<rustls::ServerConfig>,
        drop_first: usize,
        serve: F,
    ) -> TlsUpstream
    where
        F: Fn(TlsStream<TcpStream>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind TLS upstream");
        let addr = listener.local_addr().expect("TLS upstream addr");
        let seen = Arc::new(Seen::default());
        let s = seen.clone();
        let serve = Arc::new(serve);
        let task = super::Background::spawn(async move {
            let mut conns = JoinSet::new();
            loop {
                while conns.try_join_next().is_some() {}
                let Ok((stream, _)) = listener.accept().await else {
                    continue;
                };
                let n = s.accepted.fetch_add(1, Ordering::SeqCst);
                if n < drop_first {
                    let _ = stream.set_zero_linger();
                    drop(stream);
                    continue;
                }
                let (s, config, serve) = (s.clone(), config.clone(), serve.clone());
                conns.spawn(async move {
                    let acceptor = rustls::server::Acceptor::default();
                    let Ok(start) = LazyConfigAcceptor::new(acceptor, stream).await else {
                        return;
                    };
                    let sni = start.client_hello().server_name().map(str::to_owned);
                    s.sni.lock().unwrap().push(sni);
                    let Ok(tls) = start.into_stream(config).await else {
                        return;
                    };
                    s.handshakes.fetch_add(1, Ordering::SeqCst);
                    let alpn = tls
                        .get_ref()
                        .1
                        .alpn_protocol()
                        .map(|p| String::from_utf8_lossy(p).into_owned());
                    s.alpn.lock().unwrap().push(alpn);
                    serve(tls).await;
                });
            }
        });
        TlsUpstream {
            addr,
            seen,
            _task: task,
        }
    }

    /// `https://HOST:PORT`
    pub(crate) fn url(&self, host: &str) -> String {
        format!("https://{host}:{}", self.addr.port())
    }

    /// TCP connections accepted so far.
    pub(crate) fn accepted(&self) -> usize {
        self.seen.accepted.load(Ordering::SeqCst)
    }

    /// TLS handshakes completed so far.
    pub(crate) fn handshakes(&self) -> usize {
        self.seen.handshakes.load(Ordering::SeqCst)
    }

    /// The SNI of every ClientHello received (`None`: the client sent none).
    pub(crate) fn sni(&self) -> Vec<Option<String>> {
        self.seen.sni.lock().unwrap().clone()
    }

    /// The ALPN protocol agreed on each completed handshake.
    pub(crate) fn alpn(&self) -> Vec<Option<String>> {
        self.seen.alpn.lock().unwrap().clone()
    }
}

/// A certificate chain and its private key.
pub(crate) type Identity = (Vec<CertificateDer<'static>>, PrivateKeyDer<'static>);

/// PEM files written for a test: what config keys point at, and what the
/// test compares against.
pub(crate) struct PemFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
    /// The first certificate of the chain (the leaf).
    pub leaf: CertificateDer<'static>,
    /// The key file's text.
    pub key_pem: String,
}

/// Write `identity` into `dir` as `name`.pem (chain) and `name`.key.
pub(crate) fn write_pem(dir: &super::proxy::Scratch, name: &str, identity: &Identity) -> PemFiles {
    let (chain, key) = identity;
    let key_pem = key_pem(key);
    PemFiles {
        cert: dir.write(&format!("{name}.pem"), &chain_pem(chain)),
        key: dir.write(&format!("{name}.key"), &key_pem),
        leaf: chain[0].clone(),
        key_pem,
    }
}

/// A TLS client connection to `addr` for `server_name`, trusting only
/// `ca`, offering `alpn`, presenting `identity` when there is one.
pub(crate) async fn connect(
    addr: SocketAddr,
    ca: CertificateDer<'static>,
    server_name: &str,
    alpn: &[u8],
    identity: Option<Identity>,
) -> std::io::Result<tokio_rustls::client::TlsStream<TcpStream>> {
    let mut roots = rustls::RootCertStore::empty();
    roots.add(ca).unwrap();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots);
    let mut cfg = match identity {
        Some((chain, key)) => builder.with_client_auth_cert(chain, key).unwrap(),
        None => builder.with_no_client_auth(),
    };
    cfg.alpn_protocols = vec![alpn.to_vec()];
    let tcp = TcpStream::connect(addr).await?;
    let name = rustls::pki_types::ServerName::try_from(server_name.to_owned()).unwrap();
    tokio_rustls::TlsConnector::from(Arc::new(cfg))
        .connect(name, tcp)
        .await
}

/// PEM text of a certificate chain.
pub(crate) fn chain_pem(chain: &[CertificateDer<'_>]) -> String {
    chain
        .iter()
        .map(|c| pem_block("CERTIFICATE", c.as_ref()))
        .collect()
}

/// PEM text of a PKCS#8 private key.
pub(crate) fn key_pem(key: &PrivateKeyDer<'_>) -> String {
    pem_block("PRIVATE KEY", key.secret_der())
}

fn pem_block(label: &str, der: &[u8]) -> String {
    use base64::Engine as _;
    let b64 = base64::engine::general_purpose::STANDARD.encode(der);
    let mut out = format!("-----BEGIN {label}-----\n");
    for line in b64.as_bytes().chunks(64) {
        out.push_str(std::str::from_utf8(line).unwrap());
        out.push('\n');
    }
    out.push_str(&format!("-----END {label}-----\n"));
    out
}

//! A small forward proxy on 127.0.0.1, as a company network puts in front
//! of the internet: `CONNECT host:port` gets a tunnel (bytes copied both
//! ways) and absolute-form requests (`GET http://host/path`) are passed on
//! to their host. It records every request head it takes (method, target,
//! `Proxy-Authorization`), and can refuse every CONNECT with a status.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// One request head the proxy took.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Asked {
    /// `CONNECT`, `GET`, `POST` …
    pub method: String,
    /// `host:port` for CONNECT, the absolute URI otherwise.
    pub target: String,
    /// The `Proxy-Authorization` value, when sent.
    pub authorization: Option<String>,
}

/// What the proxy answers a CONNECT with.
#[derive(Debug, Clone, Copy)]
pub(crate) enum OnConnect {
    /// `200` and a tunnel.
    Tunnel,
    /// This status and reason, then close.
    Refuse(u16, &'static str),
}

/// The running proxy; stops when dropped.
pub(crate) struct ForwardProxy {
    pub addr: SocketAddr,
    asked: Arc<Mutex<Vec<Asked>>>,
    _task: super::Background,
}

impl ForwardProxy {
    /// Listen on 127.0.0.1:0.
    pub(crate) async fn start(on_connect: OnConnect) -> ForwardProxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind proxy");
        let addr = listener.local_addr().expect("proxy addr");
        let asked = Arc::new(Mutex::new(Vec::new()));
        let seen = asked.clone();
        let task = super::Background::spawn(async move {
            let mut conns = tokio::task::JoinSet::new();
            loop {
                while conns.try_join_next().is_some() {}
                let Ok((client, _)) = listener.accept().await else {
                    continue;
                };
                conns.spawn(serve(client, on_connect, seen.clone()));
            }
        });
        ForwardProxy {
            addr,
            asked,
            _task: task,
        }
    }

    /// `http://127.0.0.1:PORT`, with `userinfo@` when given.
    pub(crate) fn url(&self, userinfo: Option<&str>) -> String {
        match userinfo {
            Some(u) => format!("http://{u}@{}", self.addr),
            None => format!("http://{}", self.addr),
        }
    }

    /// Every request head taken so far.
    pub(crate) fn asked(&self) -> Vec<Asked> {
        self.asked.lock().unwrap().clone()
    }
}

/// Read one request head (up to the blank line) byte by byte, so nothing
/// after it is taken from the stream.
async fn read_head(s: &mut TcpStream) -> Option<String> {
    let mut head = Vec::new();
    let mut b = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        if s.read(&mut b).await.ok()? == 0 || head.len() > 16 << 10 {
            return None;
        }
        head.push(b[0]);
    }
    String::from_utf8(head).ok()
}

async fn serve(mut client: TcpStream, on_connect: OnConnect, seen: Arc<Mutex<Vec<Asked>>>) {
    let Some(head) = read_head(&mut client).await else {
        return;
    };
    let mut lines = head.split("\r\n");
    let first = lines.next().unwrap_or("");
    let mut parts = first.split(' ');
    let (method, target) = (
        parts.next().unwrap_or("").to_owned(),
        parts.next().unwrap_or("").to_owned(),
    );
    let authorization = lines.clone().find_map(|l| {
        let (k, v) = l.split_once(':')?;
        k.eq_ignore_ascii_case("proxy-authorization")
            .then(|| v.trim().to_owned())
    });
    seen.lock().unwrap().push(Asked {
        method: method.clone(),
        target: target.clone(),
        authorization,
    });
    if method == "CONNECT" {
        if let OnConnect::Refuse(status, reason) = on_connect {
            let answer = format!("HTTP/1.1 {status} {reason}\r\nContent-Length: 0\r\n\r\n");
            let _ = client.write_all(answer.as_bytes()).await;
            return;
        }
        let Ok(mut upstream) = TcpStream::connect(local(&target)).await else {
            let _ = client
                .write_all(b"HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\n\r\n")
                .await;
            return;
        };
        if client
            .write_all(b"HTTP/1.1 200 Connection established\r\n\r\n")
            .await
            .is_err()
        {
            return;
        }
        let _ = tokio::io::copy_bidirectional(&mut client, &mut upstream).await;
        return;
    }
    // Absolute form: pass the request on to its host in origin form,
    // without the proxy's own header; then copy bytes both ways.
    let Ok(uri) = target.parse::<http::Uri>() else {
        return;
    };
    let (Some(authority), Some(path)) = (uri.authority(), uri.path_and_query()) else {
        return;
    };
    let Ok(mut upstream) = TcpStream::connect(local(authority.as_str())).await else {
        return;
    };
    let mut out = format!("{method} {path} {}\r\n", parts.next().unwrap_or("HTTP/1.1"));
    for l in lines.filter(|l| !l.is_empty()) {
        if !l.to_ascii_lowercase().starts_with("proxy-authorization:") {
            out.push_str(l);
            out.push_str("\r\n");
        }
    }
    out.push_str("\r\n");
    if upstream.write_all(out.as_bytes()).await.is_ok() {
        let _ = tokio::io::copy_bidirectional(&mut client, &mut upstream).await;
    }
}

/// `localhost:PORT` → `127.0.0.1:PORT`: the tests' upstreams are all local.
fn local(target: &str) -> String {
    match target.strip_prefix("localhost:") {
        Some(port) => format!("127.0.0.1:{port}"),
        None => target.to_owned(),
    }
}

//! `healthcheck [URL]`: GET an http://IP:PORT/path URL, exit 0 on a 2xx
//! status and 1 otherwise. Distroless images have no shell or curl, so the
//! image's HEALTHCHECK (and compose's) runs this instead. Standard library
//! only, so the Dockerfile builds it with a bare `rustc` in a second.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::ExitCode;
use std::time::Duration;

const DEFAULT_URL: &str = "http://127.0.0.1:9464/healthz";

fn main() -> ExitCode {
    let url = std::env::args()
        .nth(1)
        .unwrap_or_else(|| DEFAULT_URL.to_owned());
    match check(&url) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("healthcheck {url}: {e}");
            ExitCode::FAILURE
        }
    }
}

fn check(url: &str) -> Result<(), String> {
    let rest = url
        .strip_prefix("http://")
        .ok_or("only http://IP:PORT/path URLs are supported")?;
    let (authority, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
    let path = if path.is_empty() { "/" } else { path };
    let addr: SocketAddr = authority
        .parse()
        .map_err(|_| format!("`{authority}` is not IP:PORT"))?;
    let timeout = Duration::from_secs(3);
    let mut conn = TcpStream::connect_timeout(&addr, timeout).map_err(|e| e.to_string())?;
    conn.set_read_timeout(Some(timeout))
        .map_err(|e| e.to_string())?;
    conn.set_write_timeout(Some(timeout))
        .map_err(|e| e.to_string())?;
    write!(
        conn,
        "GET {path} HTTP/1.1\r\nHost: {authority}\r\nConnection: close\r\nUser-Agent: tokentap-healthcheck\r\n\r\n"
    )
    .map_err(|e| e.to_string())?;
    let mut head = [0u8; 32];
    let mut n = 0;
    while n < 12 {
        match conn.read(&mut head[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) => return Err(e.to_string()),
        }
    }
    let line = String::from_utf8_lossy(&head[..n]);
    // "HTTP/1.1 200 ..." — the status code is the second field.
    let status = line.split(' ').nth(1).unwrap_or("");
    if status.len() == 3 && status.starts_with('2') {
        Ok(())
    } else {
        Err(format!(
            "unexpected response `{}`",
            line.lines().next().unwrap_or("")
        ))
    }
}

//! A client that goes away while its request body is still uploading is
//! measured too: one `client_cancelled` span, and nothing reaches the upstream.

mod support;

use std::time::Duration;

use support::rig::Rig;
use support::upstream::Reply;
use tokio::io::AsyncWriteExt;

#[tokio::test]
async fn upload_cut_short_is_one_cancelled_measurement() {
    let mut rig = Rig::openai(Reply::new(200)).await;
    let mut sock = tokio::net::TcpStream::connect(rig.proxy.addr)
        .await
        .expect("connect");
    let head = "POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: 1000\r\n\r\n{\"model\":";
    sock.write_all(head.as_bytes()).await.expect("write");
    tokio::time::sleep(Duration::from_millis(200)).await;
    drop(sock);
    tokio::time::sleep(Duration::from_millis(200)).await;
    let span = rig.finish("chat").await;
    assert_eq!(span.str("tokentap.outcome"), "client_cancelled");
    assert_eq!(span.str("tokentap.request.body"), "unread");
    assert!(rig.up.exchanges().is_empty(), "nothing was forwarded");
}

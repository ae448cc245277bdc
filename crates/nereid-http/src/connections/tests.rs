//! The stop, tried on loopback sockets with a router that answers "ok".

use std::time::Instant;

use axum::routing::get;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::oneshot;

use super::*;
use nereid_edge::limits::ConnectionLimit;

const REQUEST: &[u8] = b"GET /ok HTTP/1.1\r\nhost: x\r\n\r\n";

/// A served endpoint and the sender that stops it.
async fn endpoint() -> (
    std::net::SocketAddr,
    oneshot::Sender<()>,
    tokio::task::JoinHandle<()>,
) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let app = Router::new().route("/ok", get(|| async { "ok" }));
    let (stop, stopped) = oneshot::channel::<()>();
    let threads = ConnectionThreads::start(1).unwrap();
    let listener = ConnectionLimit::new(16).accept_from(listener);
    let served = tokio::spawn(serve(
        listener,
        app,
        Duration::from_secs(5),
        threads,
        async {
            let _ = stopped.await;
        },
    ));
    (addr, stop, served)
}

/// Reads one whole answer of the "ok" route (or what came before the end).
async fn answer(stream: &mut TcpStream) -> String {
    let mut got = Vec::new();
    let mut buf = [0u8; 1024];
    while !got.ends_with(b"ok") {
        match stream.read(&mut buf).await.unwrap() {
            0 => break,
            n => got.extend_from_slice(&buf[..n]),
        }
    }
    String::from_utf8(got).unwrap()
}

async fn read_to_end(stream: &mut TcpStream) -> String {
    let mut rest = Vec::new();
    stream.read_to_end(&mut rest).await.unwrap();
    String::from_utf8(rest).unwrap()
}

#[tokio::test]
async fn a_request_on_a_kept_connection_after_the_stop_is_answered_then_closed() {
    let (addr, stop, served) = endpoint().await;
    let mut stream = TcpStream::connect(addr).await.unwrap();
    stream.write_all(REQUEST).await.unwrap();
    let first = answer(&mut stream).await;
    assert!(first.starts_with("HTTP/1.1 200"), "{first}");
    assert!(!first.contains("connection: close"), "{first}");
    stop.send(()).unwrap();
    tokio::time::sleep(Duration::from_millis(50)).await;
    stream.write_all(REQUEST).await.unwrap();
    let second = answer(&mut stream).await;
    assert!(second.starts_with("HTTP/1.1 200"), "{second}");
    assert!(second.contains("connection: close"), "{second}");
    assert_eq!(read_to_end(&mut stream).await, "");
    drop(stream);
    served.await.unwrap();
}

#[tokio::test]
async fn an_idle_connection_closes_after_the_grace_and_the_endpoint_stops() {
    let (addr, stop, served) = endpoint().await;
    let mut stream = TcpStream::connect(addr).await.unwrap();
    stream.write_all(REQUEST).await.unwrap();
    answer(&mut stream).await;
    let stopping = Instant::now();
    stop.send(()).unwrap();
    assert_eq!(read_to_end(&mut stream).await, "");
    let waited = stopping.elapsed();
    assert!(waited >= CLOSE_GRACE, "{waited:?}");
    drop(stream);
    served.await.unwrap();
    assert!(
        stopping.elapsed() < CLOSE_GRACE + LINGER,
        "{:?}",
        stopping.elapsed()
    );
}

#[tokio::test]
async fn the_endpoint_stops_at_once_without_connections() {
    let (_, stop, served) = endpoint().await;
    let stopping = Instant::now();
    stop.send(()).unwrap();
    served.await.unwrap();
    assert!(stopping.elapsed() < CLOSE_GRACE, "{:?}", stopping.elapsed());
}

/// `close` on one end of an in-memory stream; what the other end reads.
async fn closed(read_buf: &'static [u8], sent: &'static [u8], stopping: bool) -> String {
    let (server, mut client) = tokio::io::duplex(4096);
    client.write_all(sent).await.unwrap();
    let closing = tokio::spawn(close(server, Bytes::from_static(read_buf), stopping));
    let mut got = Vec::new();
    client.read_to_end(&mut got).await.unwrap();
    drop(client);
    closing.await.unwrap();
    String::from_utf8(got).unwrap()
}

#[tokio::test]
async fn a_request_hyper_had_not_parsed_when_the_endpoint_stopped_gets_a_503() {
    let buffered = closed(b"POST /v2/models/m/infer HTTP/1.1\r\n", b"", true).await;
    let in_socket = closed(b"", b"GET /v2/health/ready HTTP/1.1\r\n\r\n", true).await;
    for answer in [buffered, in_socket] {
        assert!(
            answer.starts_with("HTTP/1.1 503 Service Unavailable\r\n"),
            "{answer}"
        );
        let length = format!("content-length: {}\r\n", STOPPING_BODY.len());
        assert!(answer.contains(&length), "{answer}");
        assert!(
            answer.ends_with(&format!("\r\n\r\n{STOPPING_BODY}")),
            "{answer}"
        );
    }
}

#[tokio::test]
async fn a_connection_with_nothing_unread_or_not_stopping_closes_without_a_word() {
    assert_eq!(closed(b"", b"", true).await, "");
    assert_eq!(closed(b"", b"GET / HTTP/1.1\r\n\r\n", false).await, "");
}

use std::sync::Arc;

use axum::serve::Listener;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio_rustls::TlsConnector;
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use tokio_rustls::rustls::{ClientConfig, RootCertStore};

use super::*;
use crate::limits::ConnectionLimit;
use crate::tls::tests::Pki;

/// A listener for `pki`'s server on a free port, its connections echoing
/// one byte; where it listens.
async fn echo_server(pki: &Pki, mutual: bool, max: usize, timeout: Duration) -> SocketAddr {
    let tls = ServerTls::load(&pki.files(mutual)).unwrap();
    let tcp = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let limited = ConnectionLimit::new(max).accept_from(tcp);
    let mut listener = TlsListener::with_timeout(limited, tls.acceptor(&[b"h2"]), timeout).unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let (mut io, _) = listener.accept().await;
            tokio::spawn(async move {
                let mut byte = [0u8; 1];
                if io.read_exact(&mut byte).await.is_ok() {
                    let _ = io.write_all(&byte).await;
                    let _ = io.flush().await;
                }
            });
        }
    });
    addr
}

fn connector(pki: &Pki, with_cert: bool) -> TlsConnector {
    let mut roots = RootCertStore::empty();
    roots
        .add(CertificateDer::from_pem_file(pki.path("ca.pem")).unwrap())
        .unwrap();
    let provider = Arc::new(tokio_rustls::rustls::crypto::ring::default_provider());
    let builder = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots);
    let mut config = if with_cert {
        let cert = CertificateDer::from_pem_file(pki.path("client.pem")).unwrap();
        let key = PrivateKeyDer::from_pem_file(pki.path("client.key")).unwrap();
        builder.with_client_auth_cert(vec![cert], key).unwrap()
    } else {
        builder.with_no_client_auth()
    };
    config.alpn_protocols = vec![b"h2".to_vec()];
    TlsConnector::from(Arc::new(config))
}

/// Whether a TLS client gets its byte echoed.
async fn echoes(addr: SocketAddr, connector: &TlsConnector) -> bool {
    let tcp = TcpStream::connect(addr).await.unwrap();
    let name = ServerName::try_from("localhost").unwrap();
    let Ok(mut tls) = connector.connect(name, tcp).await else {
        return false;
    };
    assert_eq!(tls.get_ref().1.alpn_protocol(), Some(&b"h2"[..]));
    let mut byte = [0u8; 1];
    // Under TLS 1.3 a refused client certificate shows after the client's
    // side of the handshake, on the first read.
    tls.write_all(b"x").await.is_ok() && tls.read_exact(&mut byte).await.is_ok() && &byte == b"x"
}

#[tokio::test]
async fn a_silent_client_holds_up_no_one() {
    let pki = Pki::new();
    let addr = echo_server(&pki, false, 8, HANDSHAKE_TIMEOUT).await;
    let _silent = TcpStream::connect(addr).await.unwrap();
    // Well before the silent client's handshake would time out.
    let client = connector(&pki, false);
    let served = tokio::time::timeout(HANDSHAKE_TIMEOUT / 2, echoes(addr, &client));
    assert!(served.await.unwrap());
}

#[tokio::test]
async fn a_plain_text_client_fails_alone() {
    let pki = Pki::new();
    let addr = echo_server(&pki, false, 8, HANDSHAKE_TIMEOUT).await;
    let mut plain = TcpStream::connect(addr).await.unwrap();
    plain
        .write_all(b"GET /v2 HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let mut answer = Vec::new();
    // An alert, then the connection closes.
    let _ = plain.read_to_end(&mut answer).await;
    assert!(!answer.starts_with(b"HTTP"));
    assert!(echoes(addr, &connector(&pki, false)).await);
}

#[tokio::test]
async fn mutual_tls_refuses_a_client_without_a_certificate() {
    let pki = Pki::new();
    let addr = echo_server(&pki, true, 8, HANDSHAKE_TIMEOUT).await;
    assert!(!echoes(addr, &connector(&pki, false)).await);
    assert!(echoes(addr, &connector(&pki, true)).await);
}

#[tokio::test]
async fn a_stalled_handshake_gives_its_slot_back() {
    let pki = Pki::new();
    let addr = echo_server(&pki, false, 1, Duration::from_millis(200)).await;
    let _silent = TcpStream::connect(addr).await.unwrap();
    // The only slot is the silent client's until its handshake times out.
    assert!(echoes(addr, &connector(&pki, false)).await);
}

/// A plain HTTP/2 listener on a free port with room for `max`
/// connections; the first 24 bytes of each accepted connection come back.
async fn preface_server(max: usize, timeout: Duration) -> SocketAddr {
    let tcp = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let limited = ConnectionLimit::new(max).accept_from(tcp);
    let mut listener = Handshaken::h2_preface_within(limited, timeout).unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let (mut io, _) = listener.accept().await;
            tokio::spawn(async move {
                let mut preface = [0u8; 24];
                if io.read_exact(&mut preface).await.is_ok() {
                    let _ = io.write_all(&preface).await;
                }
            });
        }
    });
    addr
}

async fn preface_comes_back(addr: SocketAddr, in_two_parts: bool) -> bool {
    let mut client = TcpStream::connect(addr).await.unwrap();
    if in_two_parts {
        client.write_all(&H2_PREFACE[..10]).await.unwrap();
        tokio::time::sleep(Duration::from_millis(50)).await;
        client.write_all(&H2_PREFACE[10..]).await.unwrap();
    } else {
        client.write_all(H2_PREFACE).await.unwrap();
    }
    let mut back = [0u8; 24];
    let read = tokio::time::timeout(Duration::from_secs(5), client.read_exact(&mut back)).await;
    matches!(read, Ok(Ok(_))) && &back == H2_PREFACE
}

#[tokio::test]
async fn a_plain_h2_client_is_served_beside_a_silent_one() {
    let addr = preface_server(4, Duration::from_secs(30)).await;
    let _silent = TcpStream::connect(addr).await.unwrap();
    assert!(preface_comes_back(addr, false).await);
    assert!(preface_comes_back(addr, true).await);
}

#[tokio::test]
async fn a_connection_without_a_preface_gives_its_slot_back() {
    let addr = preface_server(1, Duration::from_millis(200)).await;
    let mut half = TcpStream::connect(addr).await.unwrap();
    half.write_all(&H2_PREFACE[..5]).await.unwrap();
    // The only slot is the half-preface client's until its deadline.
    assert!(preface_comes_back(addr, false).await);
}

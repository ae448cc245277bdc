//! Against a real `redis-server` (Debian's, which `make test` installs),
//! started here on a free loopback port without persistence. Without the
//! binary these tests say so and pass.

use std::net::TcpListener;
use std::process::{Child, Command, Stdio};

use super::*;
use crate::encoding::encode_response;
use crate::tests::uint8_response;

/// A redis-server of this test's own; killed when dropped.
struct Server {
    child: Child,
    port: u16,
}

impl Server {
    /// Starts one on a free port (or on `port`), or `None` without the binary.
    fn start(port: Option<u16>, extra: &[&str]) -> Option<Server> {
        let port = port.unwrap_or_else(free_port);
        let child = Command::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no"])
            .args(extra)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn();
        let Ok(child) = child else {
            eprintln!("redis-server is not installed (scripts/setup-redis.sh): skipped");
            return None;
        };
        let server = Server { child, port };
        let deadline = Instant::now() + Duration::from_secs(10);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(Instant::now() < deadline, "redis-server did not start");
            std::thread::sleep(Duration::from_millis(20));
        }
        Some(server)
    }

    fn options(&self) -> RedisOptions {
        options(self.port)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap().port()
}

fn options(port: u16) -> RedisOptions {
    RedisOptions {
        host: "127.0.0.1".into(),
        port,
        user: None,
        password: None,
        db: 0,
        connect_timeout: Some(RedisOptions::DEFAULT_CONNECT_TIMEOUT),
        socket_timeout: Some(RedisOptions::DEFAULT_SOCKET_TIMEOUT),
        pool_size: 2,
        tls: None,
    }
}

fn answer() -> Vec<u8> {
    encode_response(&uint8_response(vec![1, 2, 3]))
}

#[tokio::test]
async fn an_answer_stored_by_one_cache_is_found_by_another() {
    let Some(server) = Server::start(None, &[]) else {
        return;
    };
    let writer = RedisCache::new(server.options());
    let reader = RedisCache::new(server.options());
    writer.connect().await.unwrap();
    reader.connect().await.unwrap();
    assert_eq!(reader.get("k").await, None);
    writer.set("k".into(), answer()).await;
    assert_eq!(reader.get("k").await, Some(uint8_response(vec![1, 2, 3])));
    let health = reader.health();
    assert!(health.connected);
    assert_eq!(
        health,
        RedisHealth {
            connected: true,
            ..RedisHealth::default()
        }
    );
}

#[tokio::test]
async fn a_redis_that_is_not_there_fails_the_connect_with_the_reason() {
    // A port bound and not listening: connects are refused, and no other
    // test's redis-server can take it meanwhile (a free port that was let
    // go could be, and a connect then saw that server's reset).
    let held = tokio::net::TcpSocket::new_v4().unwrap();
    held.bind(([127, 0, 0, 1], 0).into()).unwrap();
    let port = held.local_addr().unwrap().port();
    let started = Instant::now();
    let error = RedisCache::new(options(port)).connect().await.unwrap_err();
    assert!(started.elapsed() < Duration::from_secs(2));
    let text = error.to_string();
    assert!(
        text.starts_with(&format!("failed to connect to Redis (127.0.0.1:{port})")),
        "{text}"
    );
    assert!(text.to_lowercase().contains("refused"), "{text}");
}

#[tokio::test]
async fn a_wrong_password_fails_the_connect_with_redis_words() {
    let Some(server) = Server::start(None, &["--requirepass", "secret"]) else {
        return;
    };
    let mut wrong = server.options();
    wrong.password = Some("wrong".into());
    let text = RedisCache::new(wrong)
        .connect()
        .await
        .unwrap_err()
        .to_string();
    assert!(
        text.to_lowercase().contains("authentication failed"),
        "{text}"
    );
    let mut right = server.options();
    right.password = Some("secret".into());
    RedisCache::new(right).connect().await.unwrap();
}

#[tokio::test]
async fn a_redis_that_stops_answering_costs_one_time_limit_then_nothing() {
    // Accepts connections and never answers.
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let cache = RedisCache::new(options(port));
    let started = Instant::now();
    assert!(cache.connect().await.is_err(), "no PING answer");
    assert!(
        started.elapsed() < Duration::from_millis(1500),
        "{:?}",
        started.elapsed()
    );
    // Never connected: requests skip Redis while it tries in the background.
    let started = Instant::now();
    for _ in 0..100 {
        assert_eq!(cache.get("k").await, None);
        cache.set("k".into(), answer()).await;
    }
    assert!(
        started.elapsed() < Duration::from_millis(100),
        "{:?}",
        started.elapsed()
    );
    drop(listener);
}

#[tokio::test]
async fn a_redis_that_goes_away_is_a_miss_and_is_used_again_once_back() {
    let Some(server) = Server::start(None, &[]) else {
        return;
    };
    let port = server.port;
    let cache = RedisCache::new(server.options());
    cache.connect().await.unwrap();
    cache.set("k".into(), answer()).await;
    drop(server);
    let started = Instant::now();
    for _ in 0..20 {
        assert_eq!(cache.get("k").await, None);
    }
    assert!(
        started.elapsed() < Duration::from_millis(500),
        "{:?}",
        started.elapsed()
    );
    let health = cache.health();
    assert!(!health.connected && health.get_errors >= 1, "{health:?}");
    let _back = Server::start(Some(port), &[]).unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    cache.set("k".into(), answer()).await;
    while cache.get("k").await.is_none() {
        assert!(
            Instant::now() < deadline,
            "the cache did not come back: {:?}",
            cache.health()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
        cache.set("k".into(), answer()).await;
    }
    assert!(cache.health().connected);
}

#[tokio::test]
async fn a_value_that_does_not_decode_is_a_miss_and_an_error() {
    let Some(server) = Server::start(None, &[]) else {
        return;
    };
    let cache = RedisCache::new(server.options());
    cache.connect().await.unwrap();
    cache.set("k".into(), b"not an answer".to_vec()).await;
    assert_eq!(cache.get("k").await, None);
    assert_eq!(cache.health().get_errors, 1);
    assert!(cache.health().connected);
}

#[test]
fn the_password_stays_out_of_debug_output() {
    let mut options = options(6379);
    options.password = Some("secret".into());
    let text = format!("{options:?}");
    assert!(
        !text.contains("secret") && text.contains("<hidden>"),
        "{text}"
    );
}

//! `--cache-config` and `--response-cache-byte-size`: which response cache
//! the server keeps, with tritonserver's cache names and keys. `local`
//! takes `size`; `redis` takes the keys of Triton's redis cache (host,
//! port, user, password, db, connect_timeout, socket_timeout, pool_size,
//! wait_timeout and the TLS ones), its user and password also from
//! `TRITONCACHE_REDIS_USERNAME` and `TRITONCACHE_REDIS_PASSWORD`.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, anyhow, bail};
use nereid_engine::cache::{CacheConfig, RedisOptions, RedisTls};

use super::settings::split_setting;

/// The keys the redis cache takes.
const REDIS_KEYS: [&str; 15] = [
    "host",
    "port",
    "user",
    "password",
    "db",
    "connect_timeout",
    "socket_timeout",
    "pool_size",
    "wait_timeout",
    "tls_enabled",
    "cert",
    "key",
    "cacert",
    "cacert_dir",
    "sni",
];

/// The cache `settings` (`--cache-config`) and `byte_size`
/// (`--response-cache-byte-size`) ask for; `None` when they ask for none.
/// `env` reads an environment variable.
pub(super) fn response_cache(
    settings: &[String],
    byte_size: Option<u64>,
    env: impl Fn(&str) -> Option<String>,
) -> anyhow::Result<Option<CacheConfig>> {
    let mut caches: BTreeMap<&str, Vec<(&str, &str)>> = BTreeMap::new();
    for setting in settings {
        let (cache, key, value) = split_setting("--cache-config", "cache", setting)?;
        caches.entry(cache).or_default().push((key, value));
    }
    if caches.len() > 1 {
        let names: Vec<&str> = caches.keys().copied().collect();
        bail!(
            "--cache-config: multiple cache configurations ({}): the server keeps one cache",
            names.join(", ")
        );
    }
    match caches.into_iter().next() {
        None => Ok(local(byte_size)),
        Some(("local", keys)) => {
            let mut size = byte_size;
            for (key, value) in keys {
                if key != "size" {
                    bail!(
                        "--cache-config local,{key}={value}: the local cache has one setting, 'size'"
                    );
                }
                size = Some(value.parse::<u64>().map_err(|_| {
                    anyhow!("--cache-config local,size={value}: size must be a number of bytes")
                })?);
            }
            Ok(local(size))
        }
        Some(("redis", keys)) => {
            if byte_size.is_some() {
                bail!(
                    "--response-cache-byte-size sizes the local cache: it cannot go with --cache-config redis"
                );
            }
            redis(&keys, env).map(|options| Some(CacheConfig::Redis(Box::new(options))))
        }
        Some((cache, _)) => {
            bail!(
                "--cache-config {cache},...: Nereid has the 'local' and 'redis' caches, not '{cache}'"
            )
        }
    }
}

fn local(size: Option<u64>) -> Option<CacheConfig> {
    size.filter(|&bytes| bytes > 0)
        .map(|bytes| CacheConfig::Local { bytes })
}

/// The key a value holds after a comma (`127.0.0.1,port=6379`): a second
/// setting packed into one flag.
fn packed_key(value: &str) -> Option<&str> {
    value.split(',').skip(1).find_map(|piece| {
        let (key, _) = piece.split_once('=')?;
        REDIS_KEYS.contains(&key).then_some(key)
    })
}

/// The redis cache's options from its keys (the last of a key counts).
fn redis(
    keys: &[(&str, &str)],
    env: impl Fn(&str) -> Option<String>,
) -> anyhow::Result<RedisOptions> {
    let mut values: BTreeMap<&str, &str> = BTreeMap::new();
    for &(key, value) in keys {
        if let Some(next) = packed_key(value) {
            bail!(
                "--cache-config redis,{key}={value}: one setting per flag, as tritonserver takes them (this sets '{key}' to '{value}'); give '{next}' a flag of its own: --cache-config redis,{key}={} --cache-config redis,{}",
                value.split(',').next().unwrap_or_default(),
                value.split_once(',').map_or("", |(_, rest)| rest),
            );
        }
        if !REDIS_KEYS.contains(&key) {
            bail!(
                "--cache-config redis,{key}={value}: the redis cache has no setting '{key}' (it takes {})",
                REDIS_KEYS.join(", ")
            );
        }
        values.insert(key, value);
    }
    let (Some(host), Some(port)) = (values.get("host"), values.get("port")) else {
        // tritonserver's words.
        bail!(
            "Failed to initialize RedisCache, didn't specify address. Must at a minimum specify 'host' and 'port' in the configuration - e.g. tritonserver --cache-config redis,host=redis --cache-config redis,port=6379 --model-repository=/models ..."
        );
    };
    let number = |key: &str| -> anyhow::Result<Option<u64>> {
        values
            .get(key)
            .map(|v| v.parse::<u64>())
            .transpose()
            .with_context(|| format!("--cache-config redis,{key}: must be a whole number"))
    };
    let milliseconds = |key: &str, default: Duration| -> anyhow::Result<Option<Duration>> {
        Ok(match number(key)? {
            None => Some(default),
            // tritonserver: "0 means wait forever".
            Some(0) => None,
            Some(ms) => Some(Duration::from_millis(ms)),
        })
    };
    let port = port
        .parse::<u16>()
        .with_context(|| format!("--cache-config redis,port={port}: must be a port number"))?;
    let db = match values.get("db") {
        Some(db) => db
            .parse::<i64>()
            .with_context(|| format!("--cache-config redis,db={db}: must be a number"))?,
        None => 0,
    };
    let pool_size = number("pool_size")?.unwrap_or(1);
    if pool_size == 0 {
        bail!("--cache-config redis,pool_size=0: the pool needs at least one connection");
    }
    // Commands share multiplexed connections: none waits for one, so
    // wait_timeout has nothing to bound. It is checked, and taken.
    number("wait_timeout")?;
    let text = |key: &str| values.get(key).map(|v| v.to_string());
    Ok(RedisOptions {
        host: host.to_string(),
        port,
        user: text("user").or_else(|| env("TRITONCACHE_REDIS_USERNAME")),
        password: text("password").or_else(|| env("TRITONCACHE_REDIS_PASSWORD")),
        db,
        connect_timeout: milliseconds("connect_timeout", RedisOptions::DEFAULT_CONNECT_TIMEOUT)?,
        socket_timeout: milliseconds("socket_timeout", RedisOptions::DEFAULT_SOCKET_TIMEOUT)?,
        pool_size: usize::try_from(pool_size).context("--cache-config redis,pool_size")?,
        tls: tls(&values)?,
    })
}

/// TLS, when `tls_enabled=true` asks for it.
fn tls(values: &BTreeMap<&str, &str>) -> anyhow::Result<Option<RedisTls>> {
    if values.contains_key("sni") {
        bail!(
            "--cache-config redis,sni: Nereid sends 'host' as the TLS server name and checks the certificate against it; 'sni' is not supported"
        );
    }
    let path = |key: &str| values.get(key).map(PathBuf::from);
    let files = RedisTls {
        cert: path("cert"),
        key: path("key"),
        cacert: path("cacert"),
        cacert_dir: path("cacert_dir"),
    };
    if values.get("tls_enabled") != Some(&"true") {
        if files != RedisTls::default() {
            bail!(
                "--cache-config redis: cert, key, cacert and cacert_dir are TLS settings; add --cache-config redis,tls_enabled=true"
            );
        }
        return Ok(None);
    }
    if files.cert.is_some() != files.key.is_some() {
        bail!("--cache-config redis: TLS needs both 'cert' and 'key' (mutual TLS), or neither");
    }
    Ok(Some(files))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(settings: &[&str], byte_size: Option<u64>) -> anyhow::Result<Option<CacheConfig>> {
        let settings: Vec<String> = settings.iter().map(|s| s.to_string()).collect();
        response_cache(&settings, byte_size, |_| None)
    }

    fn redis_options(settings: &[&str]) -> RedisOptions {
        match parse(settings, None).unwrap() {
            Some(CacheConfig::Redis(options)) => *options,
            other => panic!("not a redis cache: {other:?}"),
        }
    }

    #[test]
    fn two_settings_in_one_flag_are_refused_with_the_way_to_write_them() {
        let error = parse(&["redis,host=127.0.0.1,port=6379"], None)
            .unwrap_err()
            .to_string();
        assert!(error.contains("one setting per flag"), "{error}");
        assert!(
            error.contains("--cache-config redis,host=127.0.0.1 --cache-config redis,port=6379"),
            "{error}"
        );
    }

    #[test]
    fn the_local_cache_is_sized_by_either_flag() {
        assert_eq!(parse(&[], None).unwrap(), None);
        assert_eq!(
            parse(&["local,size=1048576"], None).unwrap(),
            Some(CacheConfig::Local { bytes: 1048576 })
        );
        assert_eq!(
            parse(&[], Some(4096)).unwrap(),
            Some(CacheConfig::Local { bytes: 4096 })
        );
        assert_eq!(parse(&["local,size=0"], None).unwrap(), None);
    }

    #[test]
    fn a_redis_cache_takes_tritons_keys_with_bounded_defaults() {
        let options = redis_options(&["redis,host=cache", "redis,port=6379"]);
        assert_eq!(options.address(), "cache:6379");
        assert_eq!(options.db, 0);
        assert_eq!(options.pool_size, 1);
        assert_eq!(
            options.socket_timeout,
            Some(RedisOptions::DEFAULT_SOCKET_TIMEOUT)
        );
        assert_eq!(options.tls, None);
        let options = redis_options(&[
            "redis,host=cache",
            "redis,port=6380",
            "redis,user=u",
            "redis,password=p",
            "redis,db=2",
            "redis,connect_timeout=0",
            "redis,socket_timeout=50",
            "redis,pool_size=4",
            "redis,wait_timeout=10",
        ]);
        assert_eq!(options.user.as_deref(), Some("u"));
        assert_eq!(options.password.as_deref(), Some("p"));
        assert_eq!(options.db, 2);
        assert_eq!(options.connect_timeout, None);
        assert_eq!(options.socket_timeout, Some(Duration::from_millis(50)));
        assert_eq!(options.pool_size, 4);
    }

    #[test]
    fn credentials_come_from_the_environment_unless_the_flags_give_them() {
        let settings = ["redis,host=h".to_string(), "redis,port=1".to_string()];
        let env = |name: &str| Some(format!("env-{name}"));
        let Some(CacheConfig::Redis(options)) = response_cache(&settings, None, env).unwrap()
        else {
            panic!("not redis")
        };
        assert_eq!(
            options.user.as_deref(),
            Some("env-TRITONCACHE_REDIS_USERNAME")
        );
        assert_eq!(
            options.password.as_deref(),
            Some("env-TRITONCACHE_REDIS_PASSWORD")
        );
        let mut settings = settings.to_vec();
        settings.push("redis,password=flag".into());
        let Some(CacheConfig::Redis(options)) = response_cache(&settings, None, env).unwrap()
        else {
            panic!("not redis")
        };
        assert_eq!(options.password.as_deref(), Some("flag"));
    }

    #[test]
    fn tls_takes_its_files_when_enabled() {
        let options = redis_options(&[
            "redis,host=h",
            "redis,port=1",
            "redis,tls_enabled=true",
            "redis,cert=/c.pem",
            "redis,key=/k.pem",
            "redis,cacert=/ca.pem",
        ]);
        let tls = options.tls.unwrap();
        assert_eq!(tls.cert, Some(PathBuf::from("/c.pem")));
        assert_eq!(tls.cacert, Some(PathBuf::from("/ca.pem")));
        assert_eq!(tls.cacert_dir, None);
    }

    #[test]
    fn bad_settings_are_refused_with_the_reason() {
        let cases: [(&[&str], Option<u64>, &str); 12] = [
            (&["local,size=lots"], None, "size must be a number of bytes"),
            (&["local,count=1"], None, "the local cache has one setting"),
            (&["local"], None, "expected <cache>,<key>=<value>"),
            (&["memcached,host=h"], None, "not 'memcached'"),
            (
                &["local,size=1", "redis,host=h"],
                None,
                "multiple cache configurations",
            ),
            (
                &["redis,host=h"],
                None,
                "Must at a minimum specify 'host' and 'port'",
            ),
            (
                &["redis,host=h", "redis,port=x"],
                None,
                "must be a port number",
            ),
            (
                &["redis,host=h", "redis,port=1", "redis,hots=h"],
                None,
                "no setting 'hots'",
            ),
            (
                &["redis,host=h", "redis,port=1", "redis,pool_size=0"],
                None,
                "at least one",
            ),
            (
                &["redis,host=h", "redis,port=1", "redis,cert=/c"],
                None,
                "tls_enabled=true",
            ),
            (
                &["redis,host=h", "redis,port=1", "redis,sni=x"],
                None,
                "'sni'",
            ),
            (&["redis,host=h", "redis,port=1"], Some(1), "cannot go with"),
        ];
        for (settings, byte_size, words) in cases {
            let error = parse(settings, byte_size).unwrap_err().to_string();
            assert!(error.contains(words), "{settings:?}: {error}");
        }
    }
}

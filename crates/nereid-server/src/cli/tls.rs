//! The TLS flags: tritonserver's for gRPC (`--grpc-use-ssl`,
//! `--grpc-use-ssl-mutual`, `--grpc-server-cert`, `--grpc-server-key`,
//! `--grpc-root-cert`), and the same words for HTTPS on the HTTP port,
//! which Triton lacks (`--http-use-ssl`, ...).

use std::path::PathBuf;

use clap::builder::BoolishValueParser;

use nereid_edge::tls::{EndpointTls, PemFile, ServerTls, TlsFiles};

#[derive(Debug, clap::Args)]
pub struct TlsFlags {
    /// Serve gRPC over TLS, with --grpc-server-cert and --grpc-server-key.
    #[arg(long, default_value = "false", value_parser = BoolishValueParser::new(), num_args = 1)]
    pub grpc_use_ssl: bool,

    /// Serve gRPC over mutual TLS: a client must present a certificate
    /// that --grpc-root-cert signs. Implies --grpc-use-ssl.
    #[arg(long, default_value = "false", value_parser = BoolishValueParser::new(), num_args = 1)]
    pub grpc_use_ssl_mutual: bool,

    /// PEM file with the gRPC endpoint's certificate (then any
    /// intermediates).
    #[arg(long, value_name = "PATH")]
    pub grpc_server_cert: Option<PathBuf>,

    /// PEM file with the gRPC endpoint's private key.
    #[arg(long, value_name = "PATH")]
    pub grpc_server_key: Option<PathBuf>,

    /// PEM file with the root certificates that sign gRPC clients'
    /// certificates (mutual TLS).
    #[arg(long, value_name = "PATH")]
    pub grpc_root_cert: Option<PathBuf>,

    /// Serve HTTPS on the HTTP port, with --http-server-cert and
    /// --http-server-key.
    #[arg(long, default_value = "false", value_parser = BoolishValueParser::new(), num_args = 1)]
    pub http_use_ssl: bool,

    /// Serve HTTPS with mutual TLS: a client must present a certificate
    /// that --http-root-cert signs. Implies --http-use-ssl.
    #[arg(long, default_value = "false", value_parser = BoolishValueParser::new(), num_args = 1)]
    pub http_use_ssl_mutual: bool,

    /// PEM file with the HTTP endpoint's certificate (then any
    /// intermediates).
    #[arg(long, value_name = "PATH")]
    pub http_server_cert: Option<PathBuf>,

    /// PEM file with the HTTP endpoint's private key.
    #[arg(long, value_name = "PATH")]
    pub http_server_key: Option<PathBuf>,

    /// PEM file with the root certificates that sign HTTP clients'
    /// certificates (mutual TLS).
    #[arg(long, value_name = "PATH")]
    pub http_root_cert: Option<PathBuf>,
}

/// One endpoint's flag names, for messages.
#[derive(Debug)]
struct Names {
    use_ssl: &'static str,
    mutual: &'static str,
    cert: &'static str,
    key: &'static str,
    root: &'static str,
}

const GRPC: Names = Names {
    use_ssl: "--grpc-use-ssl",
    mutual: "--grpc-use-ssl-mutual",
    cert: "--grpc-server-cert",
    key: "--grpc-server-key",
    root: "--grpc-root-cert",
};

const HTTP: Names = Names {
    use_ssl: "--http-use-ssl",
    mutual: "--http-use-ssl-mutual",
    cert: "--http-server-cert",
    key: "--http-server-key",
    root: "--http-root-cert",
};

/// One endpoint's TLS flags.
#[derive(Debug)]
struct EndpointFlags<'a> {
    names: &'static Names,
    use_ssl: bool,
    mutual: bool,
    cert: &'a Option<PathBuf>,
    key: &'a Option<PathBuf>,
    root: &'a Option<PathBuf>,
}

impl TlsFlags {
    /// Checks the flags of the endpoints that serve and loads their files.
    pub fn tls(&self, http: bool, grpc: bool) -> anyhow::Result<EndpointTls> {
        let load = |flags: EndpointFlags| -> anyhow::Result<Option<ServerTls>> {
            match flags.files().map_err(anyhow::Error::msg)? {
                Some(files) => Ok(Some(ServerTls::load(&files)?)),
                None => Ok(None),
            }
        };
        Ok(EndpointTls {
            http: if http { load(self.http())? } else { None },
            grpc: if grpc { load(self.grpc())? } else { None },
        })
    }

    fn grpc(&self) -> EndpointFlags<'_> {
        EndpointFlags {
            names: &GRPC,
            use_ssl: self.grpc_use_ssl,
            mutual: self.grpc_use_ssl_mutual,
            cert: &self.grpc_server_cert,
            key: &self.grpc_server_key,
            root: &self.grpc_root_cert,
        }
    }

    fn http(&self) -> EndpointFlags<'_> {
        EndpointFlags {
            names: &HTTP,
            use_ssl: self.http_use_ssl,
            mutual: self.http_use_ssl_mutual,
            cert: &self.http_server_cert,
            key: &self.http_server_key,
            root: &self.http_root_cert,
        }
    }
}

impl EndpointFlags<'_> {
    /// The files to serve TLS with; `None` for plain text.
    fn files(&self) -> Result<Option<TlsFiles>, String> {
        let names = self.names;
        if !self.use_ssl && !self.mutual {
            // As tritonserver, the files are then ignored; but a
            // certificate without TLS is most likely a forgotten flag.
            let given = [(names.cert, self.cert), (names.key, self.key)];
            for (flag, _) in given.iter().filter(|(_, path)| path.is_some()) {
                tracing::warn!("{flag} is ignored: {} is false", names.use_ssl);
            }
            return Ok(None);
        }
        let on = if self.mutual {
            names.mutual
        } else {
            names.use_ssl
        };
        let needed = |flag: &'static str, path: &Option<PathBuf>, what: &str| {
            path.clone()
                .map(|path| PemFile { flag, path })
                .ok_or_else(|| format!("{on} needs {flag}: {what}"))
        };
        let cert = needed(names.cert, self.cert, "the server's PEM certificate")?;
        let key = needed(names.key, self.key, "the server's PEM private key")?;
        let client_roots = if self.mutual {
            let what = "the PEM root certificate that must sign clients' certificates";
            Some(needed(names.root, self.root, what)?)
        } else {
            if self.root.is_some() {
                tracing::warn!("{} is ignored: {} is false", names.root, names.mutual);
            }
            None
        };
        Ok(Some(TlsFiles {
            cert,
            key,
            client_roots,
        }))
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;
    use crate::cli::Args;

    fn args(flags: &[&str]) -> Args {
        let mut all = vec!["nereid", "--model-repository=/a"];
        all.extend(flags);
        Args::try_parse_from(all).unwrap()
    }

    fn files(flags: &[&str]) -> Result<Option<TlsFiles>, String> {
        args(flags).tls.grpc().files()
    }

    #[test]
    fn plain_text_by_default() {
        let args = args(&[]);
        assert_eq!(args.tls.grpc().files(), Ok(None));
        assert_eq!(args.tls.http().files(), Ok(None));
        assert_eq!(
            files(&["--grpc-server-cert=/c", "--grpc-use-ssl=false"]),
            Ok(None)
        );
    }

    #[test]
    fn tls_needs_a_certificate_and_a_key() {
        assert_eq!(
            files(&["--grpc-use-ssl=true", "--grpc-server-key=/k"]),
            Err("--grpc-use-ssl needs --grpc-server-cert: the server's PEM certificate".into())
        );
        assert_eq!(
            files(&["--grpc-use-ssl", "1", "--grpc-server-cert=/c"]),
            Err("--grpc-use-ssl needs --grpc-server-key: the server's PEM private key".into())
        );
        let files = files(&[
            "--grpc-use-ssl=true",
            "--grpc-server-cert=/c",
            "--grpc-server-key=/k",
        ]);
        let files = files.unwrap().unwrap();
        assert_eq!(files.cert.to_string(), "--grpc-server-cert /c");
        assert_eq!(files.key.to_string(), "--grpc-server-key /k");
        assert_eq!(files.client_roots, None);
    }

    #[test]
    fn mutual_tls_implies_tls_and_needs_a_root_certificate() {
        let flags = [
            "--http-use-ssl-mutual=true",
            "--http-server-cert=/c",
            "--http-server-key=/k",
        ];
        assert_eq!(
            args(&flags).tls.http().files(),
            Err("--http-use-ssl-mutual needs --http-root-cert: the PEM root certificate that must sign clients' certificates".into())
        );
        let files = args(&[&flags[..], &["--http-root-cert=/r"]].concat())
            .tls
            .http()
            .files()
            .unwrap()
            .unwrap();
        assert_eq!(
            files.client_roots.unwrap().to_string(),
            "--http-root-cert /r"
        );
    }

    #[test]
    fn a_missing_file_stops_the_server_with_its_flag() {
        let dir = tempfile::tempdir().unwrap();
        let repo = format!("--model-repository={}", dir.path().display());
        let args = Args::try_parse_from([
            "nereid",
            &repo,
            "--grpc-use-ssl=true",
            "--grpc-server-cert=/nowhere/cert.pem",
            "--grpc-server-key=/nowhere/key.pem",
        ])
        .unwrap();
        let message = args.into_config().unwrap_err().to_string();
        assert!(
            message.starts_with("--grpc-server-cert /nowhere/cert.pem: cannot read it"),
            "{message}"
        );
        // Nothing is read for an endpoint that does not serve.
        let args =
            Args::try_parse_from(["nereid", &repo, "--allow-http=false", "--http-use-ssl=true"])
                .unwrap();
        assert!(args.into_config().unwrap().tls.http.is_none());
    }

    #[test]
    fn a_bool_flag_takes_a_value() {
        assert!(
            Args::try_parse_from(["nereid", "--model-repository=/a", "--grpc-use-ssl=maybe"])
                .is_err()
        );
    }
}

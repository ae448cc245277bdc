use std::path::{Path, PathBuf};

use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, IsCa, KeyPair};

use super::*;

/// A throwaway CA, a server certificate for 127.0.0.1 and localhost, and
/// a client certificate, written as PEM files into a folder.
#[derive(Debug)]
pub(crate) struct Pki {
    pub dir: tempfile::TempDir,
}

impl Pki {
    pub(crate) fn new() -> Pki {
        let dir = tempfile::tempdir().unwrap();
        let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        let ca = CertifiedIssuer::self_signed(ca_params, KeyPair::generate().unwrap()).unwrap();
        write(dir.path(), "ca.pem", &ca.pem());
        for (name, names) in [
            (
                "server",
                vec!["127.0.0.1".to_string(), "localhost".to_string()],
            ),
            ("client", vec!["client".to_string()]),
        ] {
            let key = KeyPair::generate().unwrap();
            let cert = CertificateParams::new(names)
                .unwrap()
                .signed_by(&key, &ca)
                .unwrap();
            write(dir.path(), &format!("{name}.pem"), &cert.pem());
            write(dir.path(), &format!("{name}.key"), &key.serialize_pem());
        }
        Pki { dir }
    }

    pub(crate) fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    pub(crate) fn files(&self, mutual: bool) -> TlsFiles {
        TlsFiles {
            cert: file("--grpc-server-cert", self.path("server.pem")),
            key: file("--grpc-server-key", self.path("server.key")),
            client_roots: mutual.then(|| file("--grpc-root-cert", self.path("ca.pem"))),
        }
    }
}

fn write(dir: &Path, name: &str, text: &str) {
    std::fs::write(dir.join(name), text).unwrap();
}

fn file(flag: &'static str, path: PathBuf) -> PemFile {
    PemFile { flag, path }
}

fn error(files: &TlsFiles) -> String {
    ServerTls::load(files).unwrap_err().to_string()
}

#[test]
fn a_certificate_and_its_key_load() {
    let pki = Pki::new();
    assert!(!ServerTls::load(&pki.files(false)).unwrap().is_mutual());
    assert!(ServerTls::load(&pki.files(true)).unwrap().is_mutual());
}

#[test]
fn a_missing_file_is_named_with_its_flag() {
    let pki = Pki::new();
    let mut files = pki.files(true);
    files.key.path = pki.path("nowhere.key");
    let message = error(&files);
    assert!(message.starts_with("--grpc-server-key "), "{message}");
    assert!(message.contains("nowhere.key: cannot read it"), "{message}");
}

#[test]
fn files_without_the_pem_asked_for_are_named() {
    let pki = Pki::new();
    write(pki.dir.path(), "empty.pem", "not a certificate\n");
    let mut files = pki.files(false);
    files.cert.path = pki.path("empty.pem");
    assert!(
        error(&files).ends_with("empty.pem: holds no PEM certificate"),
        "{}",
        error(&files)
    );
    let mut files = pki.files(false);
    files.key.path = pki.path("server.pem");
    let message = error(&files);
    assert!(message.starts_with("--grpc-server-key "), "{message}");
    assert!(message.contains("holds no PEM private key"), "{message}");
    let mut files = pki.files(true);
    files.client_roots = Some(file("--grpc-root-cert", pki.path("client.key")));
    let message = error(&files);
    assert!(message.starts_with("--grpc-root-cert "), "{message}");
    assert!(message.contains("holds no PEM certificate"), "{message}");
}

#[test]
fn broken_pem_is_named() {
    let pki = Pki::new();
    write(
        pki.dir.path(),
        "cut.pem",
        "-----BEGIN CERTIFICATE-----\nMIIB\n",
    );
    let mut files = pki.files(false);
    files.cert.path = pki.path("cut.pem");
    let message = error(&files);
    assert!(message.contains("cut.pem: not valid PEM"), "{message}");
}

#[test]
fn a_key_that_does_not_fit_the_certificate_is_refused() {
    let pki = Pki::new();
    let mut files = pki.files(false);
    files.key.path = pki.path("client.key");
    let message = error(&files);
    assert!(
        message.starts_with("--grpc-server-key ")
            && message.contains("cannot serve with --grpc-server-cert"),
        "{message}"
    );
}

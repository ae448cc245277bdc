"""TLS with the real tritonclient's `ssl=True` options: gRPC TLS and mutual
TLS with tritonserver's flags (`--grpc-use-ssl`, `--grpc-use-ssl-mutual`,
`--grpc-server-cert`, `--grpc-server-key`, `--grpc-root-cert`), and HTTPS
on the HTTP port with Nereid's own (`--http-use-ssl`, ...), which Triton
lacks. A client the server refuses (plain text, no client certificate, a
certificate from another CA) fails alone: the server serves on. Bad
settings stop the server with the flag and the file named. The
certificates are made at test time: a CA, a server certificate for
127.0.0.1 and localhost, a client certificate, and a stranger's."""

from __future__ import annotations

import datetime
import ipaddress
import os
import shutil
import socket
import subprocess
from pathlib import Path

import gevent.ssl
import grpc
import numpy as np
import pytest
import requests
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from tritonclient.grpc import service_pb2, service_pb2_grpc
from tritonclient.utils import InferenceServerException

from conftest import REPO_ROOT, START_S, free_port, start_server, stop_server


class Pki:
    """PEM files in a folder: `ca.pem`, `server.pem`/`.key`,
    `client.pem`/`.key`, and `stranger.pem`/`.key` from another CA."""

    def __init__(self, folder: Path):
        self.folder = folder
        ca, ca_key = self.issue("Nereid test CA", None, is_ca=True)
        other_ca, other_key = self.issue("Another CA", None, is_ca=True)
        self.write("ca.pem", ca, ca_key)
        self.write("server.pem", *self.issue("server", (ca, ca_key), names=[
            x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
            x509.DNSName("localhost"),
        ]))
        self.write("client.pem", *self.issue("client", (ca, ca_key)))
        self.write("stranger.pem", *self.issue("stranger", (other_ca, other_key)))

    def __getitem__(self, name: str) -> str:
        return str(self.folder / name)

    @staticmethod
    def issue(name, issuer, names=(), is_ca=False):
        key = ec.generate_private_key(ec.SECP256R1())
        subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
        signer_cert, signer_key = issuer or (None, key)
        now = datetime.datetime.now(datetime.timezone.utc)
        builder = (x509.CertificateBuilder()
                   .subject_name(subject)
                   .issuer_name(signer_cert.subject if signer_cert else subject)
                   .public_key(key.public_key())
                   .serial_number(x509.random_serial_number())
                   .not_valid_before(now - datetime.timedelta(minutes=5))
                   .not_valid_after(now + datetime.timedelta(days=1))
                   .add_extension(x509.BasicConstraints(ca=is_ca, path_length=None), critical=True))
        if names:
            builder = builder.add_extension(x509.SubjectAlternativeName(list(names)), critical=False)
        return builder.sign(signer_key, hashes.SHA256()), key

    def write(self, name, cert, key):
        (self.folder / name).write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        (self.folder / name.replace(".pem", ".key")).write_bytes(key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption()))


@pytest.fixture(scope="module")
def pki(tmp_path_factory) -> Pki:
    return Pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def repo(tmp_path_factory) -> Path:
    repo = tmp_path_factory.mktemp("tls-repo")
    shutil.copytree(REPO_ROOT / "model_repository" / "simple", repo / "simple")
    return repo


def tls_flags(endpoint: str, pki: Pki, mutual: bool) -> list[str]:
    flags = [f"--{endpoint}-server-cert={pki['server.pem']}",
             f"--{endpoint}-server-key={pki['server.key']}"]
    if mutual:
        return flags + [f"--{endpoint}-use-ssl-mutual=true", f"--{endpoint}-root-cert={pki['ca.pem']}"]
    return flags + [f"--{endpoint}-use-ssl=true"]


def https_ready(pki: Pki, client_cert: bool):
    cert = (pki["client.pem"], pki["client.key"]) if client_cert else None

    def ready(server) -> bool:
        r = requests.get(f"https://{server.http_url}/v2/health/ready", verify=pki["ca.pem"],
                         cert=cert, timeout=30)
        return r.status_code == 200
    return ready


def tls_server(tmp_path_factory, pki, repo, mutual_on: str):
    """TLS on both endpoints, client certificates asked for on `mutual_on`."""
    tmp = tmp_path_factory.mktemp(f"{mutual_on}-mutual")
    flags = tls_flags("grpc", pki, mutual_on == "grpc") + tls_flags("http", pki, mutual_on == "http")
    s = start_server(tmp, [repo], flags, ready=https_ready(pki, mutual_on == "http"))
    yield s
    assert stop_server(s) == 0, s.log()


@pytest.fixture(scope="module")
def grpc_mutual(tmp_path_factory, pki, repo):
    """Mutual TLS on gRPC, HTTPS without client certificates."""
    yield from tls_server(tmp_path_factory, pki, repo, "grpc")


@pytest.fixture(scope="module")
def http_mutual(tmp_path_factory, pki, repo):
    """TLS on gRPC, HTTPS with client certificates."""
    yield from tls_server(tmp_path_factory, pki, repo, "http")


def operands():
    return np.arange(16, dtype=np.int32).reshape(1, 16), np.full((1, 16), 2, dtype=np.int32)


def grpc_simple(url: str, **ssl) -> None:
    a, b = operands()
    inputs = []
    for name, array in (("INPUT0", a), ("INPUT1", b)):
        t = grpcclient.InferInput(name, [1, 16], "INT32")
        t.set_data_from_numpy(array)
        inputs.append(t)
    with grpcclient.InferenceServerClient(url, **ssl) as client:
        result = client.infer("simple", inputs, client_timeout=30)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + b)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), a - b)


def http_simple(url: str, **ssl) -> None:
    a, b = operands()
    inputs = []
    for name, array in (("INPUT0", a), ("INPUT1", b)):
        t = httpclient.InferInput(name, [1, 16], "INT32")
        t.set_data_from_numpy(array, binary_data=True)
        inputs.append(t)
    with httpclient.InferenceServerClient(url, ssl=True, connection_timeout=30, network_timeout=30,
                                          ssl_context_factory=gevent.ssl.create_default_context,
                                          **ssl) as client:
        result = client.infer("simple", inputs)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + b)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), a - b)


def grpc_client_cert(pki: Pki, name: str = "client") -> dict:
    return {"ssl": True, "root_certificates": pki["ca.pem"],
            "private_key": pki[f"{name}.key"], "certificate_chain": pki[f"{name}.pem"]}


def test_grpc_mutual_tls_infers(grpc_mutual, pki):
    grpc_simple(grpc_mutual.grpc_url, **grpc_client_cert(pki))
    assert "started gRPC endpoint at" in grpc_mutual.log()
    assert "(mutual TLS)" in grpc_mutual.log()


@pytest.mark.parametrize("client", [
    {"ssl": True},  # no client certificate
    "stranger",     # a client certificate another CA signed
    {},             # plain text
])
def test_grpc_mutual_tls_refuses_and_serves_on(grpc_mutual, pki, client):
    ssl = grpc_client_cert(pki, "stranger") if client == "stranger" else dict(client)
    if ssl.get("ssl"):
        ssl.setdefault("root_certificates", pki["ca.pem"])
    with pytest.raises(InferenceServerException) as err:
        grpc_simple(grpc_mutual.grpc_url, **ssl)
    assert str(err.value.status()) == "StatusCode.UNAVAILABLE", err.value
    grpc_simple(grpc_mutual.grpc_url, **grpc_client_cert(pki))


def test_grpc_tls_without_client_certificate(http_mutual, pki):
    grpc_simple(http_mutual.grpc_url, ssl=True, root_certificates=pki["ca.pem"])
    # The standard health service answers over the same TLS channel.
    credentials = grpc.ssl_channel_credentials(open(pki["ca.pem"], "rb").read())
    with grpc.secure_channel(http_mutual.grpc_url, credentials) as channel:
        stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
        assert stub.ServerLive(service_pb2.ServerLiveRequest(), timeout=30).live


def test_https_infers(grpc_mutual, pki):
    http_simple(grpc_mutual.http_url, ssl_options={"ca_certs": pki["ca.pem"]})


def test_plain_http_to_the_https_port_fails_alone(grpc_mutual, pki):
    with pytest.raises(requests.exceptions.ConnectionError):
        requests.get(f"http://{grpc_mutual.http_url}/v2/health/live", timeout=30)
    # A client that connects and never says hello holds up no one: another
    # is served while the silent one is still open, before the server
    # gives up on its handshake (10 s) and closes it.
    with socket.create_connection(("127.0.0.1", grpc_mutual.http_port)) as silent:
        http_simple(grpc_mutual.http_url, ssl_options={"ca_certs": pki["ca.pem"]})
        silent.setblocking(False)
        with pytest.raises(BlockingIOError):
            silent.recv(1)  # nothing to read, and not closed


def test_https_mutual_tls(http_mutual, pki):
    http_simple(http_mutual.http_url, ssl_options={
        "ca_certs": pki["ca.pem"], "certfile": pki["client.pem"], "keyfile": pki["client.key"]})
    for cert in (None, (pki["stranger.pem"], pki["stranger.key"])):
        with pytest.raises(requests.exceptions.ConnectionError):
            requests.get(f"https://{http_mutual.http_url}/v2/health/live", verify=pki["ca.pem"],
                         cert=cert, timeout=30)
    r = requests.get(f"https://{http_mutual.http_url}/v2/health/live", verify=pki["ca.pem"],
                     cert=(pki["client.pem"], pki["client.key"]), timeout=30)
    assert r.status_code == 200


def start_fails(repo: Path, flags: list[str]) -> str:
    binary = os.environ.get("NEREID_BIN", str(REPO_ROOT / "target/debug/nereid"))
    ports = [f"--{e}-port={free_port()}" for e in ("http", "grpc", "metrics")]
    done = subprocess.run([binary, f"--model-repository={repo}", *ports, *flags],
                          capture_output=True, text=True, timeout=START_S)
    assert done.returncode != 0, done.stdout + done.stderr
    assert "panicked" not in done.stderr, done.stderr
    return done.stderr


@pytest.mark.parametrize("flags, message", [
    (["--grpc-use-ssl=true", "--grpc-server-key={server_key}"],
     "--grpc-use-ssl needs --grpc-server-cert"),
    (["--http-use-ssl-mutual=true", "--http-server-cert={server_pem}", "--http-server-key={server_key}"],
     "--http-use-ssl-mutual needs --http-root-cert"),
    (["--grpc-use-ssl=true", "--grpc-server-cert={missing_pem}", "--grpc-server-key={server_key}"],
     "--grpc-server-cert {missing_pem}: cannot read it"),
    (["--http-use-ssl=true", "--http-server-cert={server_pem}", "--http-server-key={garbage_key}"],
     "--http-server-key {garbage_key}: holds no PEM private key"),
    (["--grpc-use-ssl=true", "--grpc-server-cert={server_pem}", "--grpc-server-key={client_key}"],
     "--grpc-server-key {client_key} cannot serve with --grpc-server-cert {server_pem}"),
])
def test_bad_settings_stop_the_server_with_the_flag_named(pki, repo, flags, message):
    (Path(pki.folder) / "garbage.key").write_text("garbage\n")
    names = {n.replace(".", "_"): pki[n] for n in ("server.pem", "server.key", "client.key",
                                                   "missing.pem", "garbage.key")}
    error = start_fails(repo, [f.format(**names) for f in flags])
    assert message.format(**names) in error, error

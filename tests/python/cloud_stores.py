"""Local object stores for the cloud repository tests and benchmark: moto's
S3 server, gcp-storage-emulator and Azurite, started on free loopback ports
from the folders scripts/setup-cloud-test.sh installs them in, with
helpers to fill them, and a proxy that forwards to one while it breaks
chosen requests (a body cut short, a refused connection, an object
overwritten just before it is read).

gcp-storage-emulator answers Google's JSON API; object_store's GCS client
lists and reads through the XML API, whose listing the emulator does not
implement (501) and whose downloads carry no ETag or Last-Modified. The
proxy's `gcs_xml` mode fills that gap: it answers an XML listing from the
emulator's JSON one and adds those headers (and If-Match) to downloads,
so Nereid's GCS path runs against the emulator's objects."""

from __future__ import annotations

import contextlib
import email.utils
import http.client
import os
import socket
import subprocess
import threading
import time
import urllib.parse
from datetime import datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Callable
from xml.sax.saxutils import escape

import pytest
import requests

from conftest import REPO_ROOT, free_port

TOOLS = REPO_ROOT / ".tools"
SETUP = "scripts/setup-cloud-test.sh (make setup-test runs it)"

# The fixed test account of moto, and Azurite's well-known development one.
AWS_ENV = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
           "AWS_DEFAULT_REGION": "us-east-1"}
AZURITE_ACCOUNT = "devstoreaccount1"
AZURITE_KEY = ("Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/"
               "K1SZFPTOtr/KBHBeksoGMGw==")


def tool(path: str) -> Path:
    binary = TOOLS / path
    if not binary.exists():
        pytest.fail(f"{binary} is missing: run {SETUP}")
    return binary


def wait_for_port(port: int, process: subprocess.Popen, log: Path, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"the store exited with {process.returncode}:\n{log.read_text()}")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.2):
            return
        time.sleep(0.05)
    raise RuntimeError(f"the store did not listen on {port}:\n{log.read_text()}")


@contextlib.contextmanager
def running(args: list[str], port: int, log: Path, env: dict[str, str] | None = None):
    with open(log, "w") as out:
        process = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT,
                                   env={**os.environ, **(env or {})})
    try:
        wait_for_port(port, process, log)
        yield port
    finally:
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()


def moto(folder: Path, auth: bool = False):
    """moto's S3 server; with `auth`, every request needs a key moto's IAM
    knows (none: so any key is refused, as AWS refuses a wrong one)."""
    port = free_port()
    env = {"INITIAL_NO_AUTH_ACTION_COUNT": "0"} if auth else {}
    args = [str(tool("cloud-venv/bin/moto_server")), "-H", "127.0.0.1", "-p", str(port)]
    return running(args, port, folder / f"moto-{port}.log", env)


def gcs_emulator(folder: Path):
    port = free_port()
    args = [str(tool("cloud-venv/bin/gcp-storage-emulator")), "start", "--host", "127.0.0.1",
            "--port", str(port), "--in-memory"]
    return running(args, port, folder / f"gcs-{port}.log")


def azurite(folder: Path):
    port = free_port()
    data = folder / f"azurite-{port}"
    data.mkdir()
    args = [str(tool("azurite/node_modules/.bin/azurite-blob")), "--blobHost", "127.0.0.1",
            "--blobPort", str(port), "--loose", "--skipApiVersionCheck", "--disableTelemetry",
            "--silent", "--location", str(data)]
    return running(args, port, folder / f"azurite-{port}.log")


def model_files(model_dir: Path) -> dict[str, bytes]:
    """Every file of a model folder, by path inside it."""
    return {str(p.relative_to(model_dir)): p.read_bytes()
            for p in sorted(model_dir.rglob("*")) if p.is_file()}


class S3:
    def __init__(self, port: int, bucket: str):
        import boto3

        self.bucket = bucket
        self.client = boto3.client("s3", endpoint_url=f"http://127.0.0.1:{port}",
                                   aws_access_key_id="testing", aws_secret_access_key="testing",
                                   region_name="us-east-1")
        self.client.create_bucket(Bucket=bucket)

    def put(self, key: str, body: bytes) -> None:
        self.client.put_object(Bucket=self.bucket, Key=key, Body=body)

    def delete(self, prefix: str) -> None:
        listed = self.client.list_objects_v2(Bucket=self.bucket, Prefix=prefix)
        for item in listed.get("Contents", []):
            self.client.delete_object(Bucket=self.bucket, Key=item["Key"])


class Gcs:
    def __init__(self, port: int, bucket: str):
        self.base = f"http://127.0.0.1:{port}"
        self.bucket = bucket
        requests.post(f"{self.base}/storage/v1/b", params={"project": "test"},
                      json={"name": bucket}, timeout=30).raise_for_status()

    def put(self, key: str, body: bytes) -> None:
        requests.post(f"{self.base}/upload/storage/v1/b/{self.bucket}/o",
                      params={"uploadType": "media", "name": key}, data=body,
                      timeout=30).raise_for_status()


class Azure:
    def __init__(self, port: int, container: str):
        from azure.storage.blob import BlobServiceClient

        connection = (f"DefaultEndpointsProtocol=http;AccountName={AZURITE_ACCOUNT};"
                      f"AccountKey={AZURITE_KEY};"
                      f"BlobEndpoint=http://127.0.0.1:{port}/{AZURITE_ACCOUNT};")
        service = BlobServiceClient.from_connection_string(connection)
        self.container = service.create_container(container)

    def put(self, key: str, body: bytes) -> None:
        self.container.upload_blob(key, body, overwrite=True)


def upload_model(store, prefix: str, name: str, source: Path, rename: bool = True) -> None:
    """Uploads the model folder `source` as `prefix/name`, its config's name
    changed to `name`."""
    for path, body in model_files(source).items():
        if rename and path == "config.pbtxt":
            body = body.replace(f'"{source.name}"'.encode(), f'"{name}"'.encode())
        store.put(f"{prefix}/{name}/{path}", body)


# What a rule does to a request it matches.
Action = str | Callable[[], None]


class FaultProxy:
    """Forwards HTTP/1.1 requests to `upstream` (a loopback port). A rule
    `(method, path fragment, action)` applies to the matching requests:
    "truncate" sends half the body and closes, "refuse" closes without an
    answer, a callable runs before the request is forwarded."""

    def __init__(self, upstream: int, gcs_xml: bool = False):
        self.upstream = upstream
        self.gcs_xml = gcs_xml
        self.rules: list[tuple[str, str, Action]] = []
        self.seen: list[tuple[str, str]] = []
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args) -> None:
                pass

            def handle_one(self) -> None:
                proxy.handle(self)

            do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = handle_one

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def action(self, method: str, path: str) -> Action | None:
        for rule_method, fragment, action in self.rules:
            if rule_method == method and fragment in path:
                return action
        return None

    def handle(self, handler: BaseHTTPRequestHandler) -> None:
        method, path = handler.command, handler.path
        self.seen.append((method, path))
        length = int(handler.headers.get("Content-Length") or 0)
        body = handler.rfile.read(length) if length else b""
        action = self.action(method, path)
        if action == "refuse":
            handler.close_connection = True
            handler.connection.shutdown(socket.SHUT_RDWR)
            return
        if callable(action):
            action()
        if self.gcs_xml and method in ("GET", "HEAD"):
            status, headers, payload = self.gcs(method, path, handler.headers)
        else:
            status, headers, payload = self.forward(method, path, handler.headers, body)
        handler.send_response(status)
        for name, value in headers:
            handler.send_header(name, value)
        handler.send_header("Content-Length", str(len(payload)))
        handler.end_headers()
        if method == "HEAD":
            return
        if action == "truncate":
            handler.wfile.write(payload[: len(payload) // 2])
            handler.wfile.flush()
            handler.close_connection = True
            handler.connection.shutdown(socket.SHUT_RDWR)
            return
        handler.wfile.write(payload)

    def forward(self, method: str, path: str, headers, body: bytes):
        connection = http.client.HTTPConnection("127.0.0.1", self.upstream, timeout=30)
        skip = {"connection", "keep-alive", "transfer-encoding", "content-length"}
        sent = {k: v for k, v in headers.items() if k.lower() not in skip}
        connection.request(method, path, body=body or None, headers=sent)
        response = connection.getresponse()
        payload = response.read()
        kept = [(k, v) for k, v in response.getheaders() if k.lower() not in skip]
        connection.close()
        return response.status, kept, payload

    def gcs(self, method: str, path: str, headers):
        """The XML API on top of gcp-storage-emulator's JSON API."""
        url = urllib.parse.urlsplit(path)
        parts = url.path.lstrip("/").split("/", 1)
        query = urllib.parse.parse_qs(url.query)
        if len(parts) == 1 and query.get("list-type") == ["2"]:
            return self.gcs_list(parts[0], query.get("prefix", [""])[0])
        if len(parts) != 2:
            return self.forward(method, path, headers, b"")
        bucket, name = parts[0], urllib.parse.unquote(parts[1])
        quoted = urllib.parse.quote(name, safe="")
        meta = requests.get(f"http://127.0.0.1:{self.upstream}/storage/v1/b/{bucket}/o/{quoted}",
                            timeout=30)
        if meta.status_code != 200:
            return meta.status_code, [], meta.content
        meta = meta.json()
        etag = f'"{meta["etag"]}"'
        if headers.get("If-Match") not in (None, etag):
            return 412, [], b"<Error><Code>PreconditionFailed</Code></Error>"
        status, kept, payload = self.forward("GET", path, headers, b"")
        updated = datetime.fromisoformat(meta["updated"].replace("Z", "+00:00"))
        kept += [("ETag", etag),
                 ("Last-Modified", email.utils.format_datetime(updated, usegmt=True))]
        return status, kept, payload

    def gcs_list(self, bucket: str, prefix: str):
        listed = requests.get(f"http://127.0.0.1:{self.upstream}/storage/v1/b/{bucket}/o",
                              params={"prefix": prefix}, timeout=30)
        if listed.status_code != 200:
            return listed.status_code, [], listed.content
        items = listed.json().get("items", [])
        contents = "".join(
            f"<Contents><Key>{escape(i['name'])}</Key><LastModified>{i['updated']}</LastModified>"
            f"<ETag>\"{escape(i['etag'])}\"</ETag><Size>{i['size']}</Size></Contents>"
            for i in items)
        xml = (f'<?xml version="1.0" encoding="UTF-8"?><ListBucketResult><Name>{bucket}</Name>'
               f"<Prefix>{escape(prefix)}</Prefix><KeyCount>{len(items)}</KeyCount>"
               f"<IsTruncated>false</IsTruncated>{contents}</ListBucketResult>")
        return 200, [("Content-Type", "application/xml")], xml.encode()

"""deploy/ without a cluster: every manifest parses; the Helm chart (rendered
and linted by real Helm, tests/python/helm.py) and the KServe runtime start the built server with their own arguments, and their
ports and probes answer on it; the HPA agrees with the adapter's rules and
exposes the values operators set; the dashboard asks only for metrics the
server serves; the Dockerfile's promises hold (non-root, ONNX Runtime,
`tritonserver` on the PATH, the ports the server listens on)."""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import requests
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
import yaml

from conftest import REPO_ROOT, START_S, STOP_S, free_ports
from helm import Chart, helm

DEPLOY = REPO_ROOT / "deploy"
CHART = DEPLOY / "helm" / "nereid"
RUNTIME = DEPLOY / "kserve" / "nereid-runtime.yaml"
ISVC = DEPLOY / "kserve" / "inferenceservice.yaml"
DASHBOARD = CHART / "dashboards" / "nereid.json"
ADAPTER_VALUES = DEPLOY / "helm" / "prometheus-adapter-values.yaml"
DOCKERFILE = DEPLOY / "Dockerfile"
BINARY = os.environ.get("NEREID_BIN", str(REPO_ROOT / "target/debug/nereid"))
GPU_METRICS = {"nv_gpu_utilization", "nv_gpu_memory_total_bytes", "nv_gpu_memory_used_bytes",
               "nv_gpu_power_usage", "nv_gpu_power_limit", "nv_energy_consumption"}


@dataclass
class Launched:
    process: subprocess.Popen
    log_path: Path

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def stop(self) -> int:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(timeout=STOP_S)
        except subprocess.TimeoutExpired:
            self.process.kill()
            raise


def answers_200(http_port: int, path: str) -> bool:
    """Whether `path` answers 200 now; no connection or no answer in time
    is a no, as the server may still be starting."""
    try:
        return requests.get(f"http://127.0.0.1:{http_port}{path}", timeout=10).status_code == 200
    except requests.RequestException:
        return False


def launch(tmp_path: Path, args: list[str], http_port: int) -> Launched:
    """Runs the binary with a manifest's arguments (its program name
    dropped) and waits until it is live (a debug build under load can take
    minutes)."""
    log_path = tmp_path / "nereid.log"
    process = subprocess.Popen([BINARY, *args], stdout=open(log_path, "w"),
                               stderr=subprocess.STDOUT)
    launched = Launched(process, log_path)
    deadline = time.monotonic() + START_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"nereid {args} exited with {process.returncode}:\n{launched.log()}")
        if answers_200(http_port, "/v2/health/live"):
            return launched
        time.sleep(0.05)
    process.kill()
    process.wait()
    raise RuntimeError(f"nereid {args} did not come up in {START_S} s:\n{launched.log()}")


def wait_ready(http_port: int, path: str = "/v2/health/ready") -> None:
    deadline = time.monotonic() + START_S
    while not answers_200(http_port, path):
        assert time.monotonic() < deadline, f"{path} never answered 200 in {START_S} s"
        time.sleep(0.05)


def model_repository(tmp_path: Path) -> Path:
    repo = tmp_path / "models"
    repo.mkdir()
    (repo / "simple").symlink_to(REPO_ROOT / "model_repository" / "simple")
    return repo


def infer_simple(http_port: int) -> None:
    client = httpclient.InferenceServerClient(f"127.0.0.1:{http_port}")
    inputs = [httpclient.InferInput(n, [1, 16], "INT32") for n in ("INPUT0", "INPUT1")]
    for i in inputs:
        i.set_data_from_numpy(np.ones((1, 16), dtype=np.int32))
    client.infer("simple", inputs)


def flag(args: list[str], name: str) -> str | None:
    """The value of `--name=value` in args (the form the manifests use)."""
    values = [a.split("=", 1)[1] for a in args if a.startswith(f"--{name}=")]
    assert len(values) <= 1, (name, args)
    return values[0] if values else None


def help_default(name: str) -> str:
    text = subprocess.run([BINARY, "--help"], capture_output=True, text=True, check=True).stdout
    m = re.search(rf"--{name} <[A-Z_]+>\n(?:.*\n)*?\s+\[default: ([^\]]+)\]", text)
    assert m, f"--{name} has no default in --help"
    return m.group(1)


def by_kind(docs: list[dict]) -> dict[str, dict]:
    kinds = {}
    for doc in docs:
        assert doc["kind"] not in kinds, f"two {doc['kind']}s"
        kinds[doc["kind"]] = doc
    return kinds


def container(deployment: dict) -> dict:
    [c] = deployment["spec"]["template"]["spec"]["containers"]
    return c


# Everything optional turned on, so that every template renders.
EVERYTHING = {
    "podMonitor": {"enabled": True},
    "grafanaDashboard": {"enabled": True},
    "autoscaling": {"gpuUtilization": 0.8},
    "serverArgs": ["--model-control-mode=poll", "--repository-poll-secs=5"],
    "env": [{"name": "AWS_DEFAULT_REGION", "value": "eu-west-1"}],
    "envFrom": [{"secretRef": {"name": "model-store"}}],
    "nodeSelector": {"nvidia.com/gpu.present": "true"},
    "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists"}],
    "metrics": {"histogramBuckets": "1,5,25,100"},
}


def test_every_manifest_parses():
    files = [p for p in DEPLOY.rglob("*.yaml") if "templates" not in p.parts]
    assert {RUNTIME, ISVC, CHART / "Chart.yaml", CHART / "values.yaml"} <= set(files)
    for path in files:
        for doc in yaml.safe_load_all(path.read_text()):
            assert isinstance(doc, dict), path
            if path.parent.name == "kserve":
                assert {"apiVersion", "kind", "metadata", "spec"} <= set(doc), path
    json.loads(DASHBOARD.read_text())
    for values in ({}, EVERYTHING, {"autoscaling": {"enabled": False}}):
        kinds = by_kind(Chart(CHART, values).documents())
        for doc in kinds.values():
            assert doc["apiVersion"] and doc["metadata"]["name"], doc
        assert {"Deployment", "Service"} <= set(kinds)
        assert ("HorizontalPodAutoscaler" in kinds) == values.get("autoscaling", {}).get("enabled", True)
    everything = by_kind(Chart(CHART, EVERYTHING).documents())
    assert {"PodMonitor", "ConfigMap"} <= set(everything)
    assert json.loads(everything["ConfigMap"]["data"]["nereid.json"]) == json.loads(DASHBOARD.read_text())
    off = by_kind(Chart(CHART, {"autoscaling": {"enabled": False}, "replicaCount": 3}).documents())
    assert off["Deployment"]["spec"]["replicas"] == 3
    assert "replicas" not in by_kind(Chart(CHART).documents())["Deployment"]["spec"], \
        "with an HPA, the Deployment leaves the replica count to it"


def documented_commands(doc: Path, program: str) -> list[list[str]]:
    """The commands of `doc`'s sh blocks that start with `program`, as the
    shell splits them (continuation lines joined)."""
    blocks = re.findall(r"^```sh\n(.*?)^```", doc.read_text(), re.S | re.M)
    lines = "\n".join(blocks).replace("\\\n", " ").splitlines()
    return [shlex.split(line) for line in lines if line.startswith(program + " ")]


def test_real_helm_lints_the_chart():
    out = helm("lint", "--strict", str(CHART))
    assert "0 chart(s) failed" in out, out


def test_the_documented_helm_install_renders_with_real_helm():
    """docs/deploy.md step 2, as written, with `template` for `install` (no
    cluster here): Helm checks the chart's dependencies on both."""
    installs = [c for c in documented_commands(REPO_ROOT / "docs/deploy.md", "helm")
                if c[1] == "install" and c[3] == "deploy/helm/nereid"]
    assert len(installs) == 1, installs
    text = helm("template", *installs[0][2:])
    kinds = by_kind([d for d in yaml.safe_load_all(text) if d])
    spec = kinds["Deployment"]["spec"]["template"]["spec"]
    assert container(kinds["Deployment"])["image"] == "registry.example.com/nereid:0.1.0"
    [models] = [v for v in spec["volumes"] if v["name"] == "models"]
    assert models == {"name": "models", "persistentVolumeClaim": {"claimName": "models"}}


def test_the_chart_keeps_pods_ready_through_a_bad_upload():
    """The readiness the chart asks for by default (docs/deploy.md,
    "Readiness and a bad upload"; test_hot_reload runs the rule itself)."""
    args = container(by_kind(Chart(CHART).documents())["Deployment"])["args"]
    assert flag(args, "strict-readiness") == "startup"
    triton = container(by_kind(Chart(CHART, {"strictReadiness": "true"}).documents())["Deployment"])
    assert flag(triton["args"], "strict-readiness") == "true"


@pytest.fixture(scope="module")
def chart_server(tmp_path_factory):
    """The server the chart's Deployment starts, on free ports, serving a
    repository at the volume's mount path."""
    tmp = tmp_path_factory.mktemp("chart")
    ports = dict(zip(["http", "grpc", "metrics"], free_ports(3)))
    values = {**EVERYTHING, "ports": ports,
              "modelRepository": {"path": str(model_repository(tmp))}}
    kinds = by_kind(Chart(CHART, values).documents())
    args = container(kinds["Deployment"])["args"]
    assert args[0] == "nereid"
    server = launch(tmp, args[1:], ports["http"])
    wait_ready(ports["http"])
    yield kinds, ports, server
    assert server.stop() == 0, server.log()


def test_chart_ports_match_the_servers_flags(chart_server):
    kinds, ports, _ = chart_server
    c = container(kinds["Deployment"])
    declared = {p["name"]: p["containerPort"] for p in c["ports"]}
    assert declared == ports
    for name in ("http", "grpc", "metrics"):
        assert flag(c["args"], f"{name}-port") == str(ports[name])
    service = kinds["Service"]
    for port in service["spec"]["ports"]:
        assert port["targetPort"] in declared and port["port"] == declared[port["targetPort"]]
    assert service["spec"]["selector"] == kinds["Deployment"]["spec"]["selector"]["matchLabels"]
    annotations = kinds["Deployment"]["spec"]["template"]["metadata"]["annotations"]
    assert annotations["prometheus.io/port"] == str(ports["metrics"])
    [endpoint] = kinds["PodMonitor"]["spec"]["podMetricsEndpoints"]
    assert endpoint["port"] in declared and endpoint["path"] == annotations["prometheus.io/path"]


def test_chart_probes_answer_on_the_running_server(chart_server):
    kinds, ports, server = chart_server
    c = container(kinds["Deployment"])
    probes = {kind: c[f"{kind}Probe"]["httpGet"] for kind in ("startup", "liveness", "readiness")}
    assert {p["path"] for p in probes.values()} == {"/v2/health/live", "/v2/health/ready"}
    for kind, probe in probes.items():
        assert probe["path"].startswith("/v2/health/"), kind
        url = f"http://127.0.0.1:{ports[probe['port']]}{probe['path']}"
        assert requests.get(url, timeout=30).status_code == 200, (kind, url, server.log())


def test_chart_serves_the_metrics_it_announces(chart_server):
    kinds, ports, _ = chart_server
    infer_simple(ports["http"])
    annotations = kinds["Deployment"]["spec"]["template"]["metadata"]["annotations"]
    text = requests.get(f"http://127.0.0.1:{annotations['prometheus.io/port']}"
                        f"{annotations['prometheus.io/path']}", timeout=30).text
    assert 'nv_inference_request_success{model="simple",version="1"} 1' in text
    # histogramBuckets: "1,5,25,100" reached the server.
    assert re.search(r'nv_inference_request_histogram_ms_bucket\{model="simple",version="1",le="25"\} \d', text)
    assert 'le="100"' in text and 'le="10000"' not in text


def test_chart_drain_fits_in_the_grace_period():
    kinds = by_kind(Chart(CHART).documents())
    spec = kinds["Deployment"]["spec"]["template"]["spec"]
    c = container(kinds["Deployment"])
    sleep = int(c["lifecycle"]["preStop"]["exec"]["command"][1])
    exit_timeout = int(flag(c["args"], "exit-timeout-secs"))
    assert spec["terminationGracePeriodSeconds"] > sleep + exit_timeout
    uid = int(re.search(r"^USER (\d+)", DOCKERFILE.read_text(), re.M).group(1))
    assert spec["securityContext"]["runAsUser"] == uid and spec["securityContext"]["runAsNonRoot"]
    mounts = {m["mountPath"] for m in c["volumeMounts"]}
    assert "/tmp" in mounts and c["securityContext"]["readOnlyRootFilesystem"], \
        "Python workers write their sources under /tmp"


def test_a_cloud_repository_needs_no_volume():
    values = {"modelRepository": {"path": "s3://bucket/models", "volume": None}}
    kinds = by_kind(Chart(CHART, values).documents())
    c = container(kinds["Deployment"])
    assert flag(c["args"], "model-repository") == "s3://bucket/models"
    assert [v["name"] for v in kinds["Deployment"]["spec"]["template"]["spec"]["volumes"]] == ["tmp"]
    assert all(m["name"] != "models" for m in c["volumeMounts"])


def test_hpa_scales_on_the_adapters_queue_time_with_the_values_knobs():
    scaling = yaml.safe_load((CHART / "values.yaml").read_text())["autoscaling"]
    adapter = yaml.safe_load(ADAPTER_VALUES.read_text())
    rules = {r["name"]["as"]: r for r in adapter["rules"]["custom"]}
    queue = rules[scaling["queueTime"]["metric"]]
    assert "nv_inference_queue_duration_us" in queue["metricsQuery"]
    assert "nv_inference_request_success" in queue["metricsQuery"]
    assert "gpu_utilization" in rules
    for rule in rules.values():
        assert set(rule["resources"]["overrides"]) == {"namespace", "pod"}
        assert "<<.LabelMatchers>>" in rule["metricsQuery"] and "<<.GroupBy>>" in rule["metricsQuery"]

    custom = {"minReplicas": 2, "maxReplicas": 9,
              "queueTime": {"targetMicroseconds": 200},
              "cpuUtilizationPercent": 65, "gpuUtilization": 0.7,
              "scaleUp": {"stabilizationWindowSeconds": 15, "pods": 3, "percent": 50, "periodSeconds": 20},
              "scaleDown": {"stabilizationWindowSeconds": 600, "pods": 2, "percent": 10, "periodSeconds": 120}}
    kinds = by_kind(Chart(CHART, {"autoscaling": custom}).documents())
    hpa = kinds["HorizontalPodAutoscaler"]["spec"]
    assert hpa["scaleTargetRef"] == {"apiVersion": "apps/v1", "kind": "Deployment",
                                     "name": kinds["Deployment"]["metadata"]["name"]}
    assert (hpa["minReplicas"], hpa["maxReplicas"]) == (2, 9)
    pods = {m["pods"]["metric"]["name"]: m["pods"]["target"] for m in hpa["metrics"] if m["type"] == "Pods"}
    assert pods == {"avg_time_queue_us": {"type": "AverageValue", "averageValue": "200"},
                    "gpu_utilization": {"type": "AverageValue", "averageValue": "0.7"}}
    [cpu] = [m["resource"] for m in hpa["metrics"] if m["type"] == "Resource"]
    assert cpu == {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": 65}}
    for direction in ("scaleUp", "scaleDown"):
        behavior, asked = hpa["behavior"][direction], custom[direction]
        assert behavior["stabilizationWindowSeconds"] == asked["stabilizationWindowSeconds"]
        assert {(p["type"], p["value"], p["periodSeconds"]) for p in behavior["policies"]} == {
            ("Pods", asked["pods"], asked["periodSeconds"]),
            ("Percent", asked["percent"], asked["periodSeconds"])}
    defaults = by_kind(Chart(CHART, {"autoscaling": {"cpuUtilizationPercent": 0}}).documents())
    assert [m["type"] for m in defaults["HorizontalPodAutoscaler"]["spec"]["metrics"]] == ["Pods"], \
        "0 leaves CPU out, and the default leaves GPU out"


def kserve_args(explicit: bool) -> list[str]:
    """The container's arguments as KServe runs them: the runtime's, then
    --model-control-mode=explicit when there is no storageUri, or else
    the InferenceService's own args."""
    [runtime] = yaml.safe_load(RUNTIME.read_text())["spec"]["containers"]
    args = list(runtime["args"])
    if explicit:
        return args + ["--model-control-mode=explicit"]
    isvc = yaml.safe_load(ISVC.read_text())
    assert isvc["spec"]["predictor"]["model"]["runtime"] == yaml.safe_load(RUNTIME.read_text())["metadata"]["name"]
    return args + isvc["spec"]["predictor"]["model"].get("args", [])


def test_kserve_runtime_keeps_tritons_arguments():
    runtime = yaml.safe_load(RUNTIME.read_text())
    [c] = runtime["spec"]["containers"]
    assert c["args"] == ["tritonserver", "--model-store=/mnt/models", "--grpc-port=9000",
                         "--http-port=8080", "--allow-grpc=true", "--allow-http=true"]
    assert {"v2", "grpc-v2"} <= set(runtime["spec"]["protocolVersions"])
    assert runtime["spec"]["annotations"]["prometheus.kserve.io/port"] == help_default("metrics-port")
    assert c["securityContext"]["runAsNonRoot"]
    assert re.search(r"ln -s /opt/nereid/bin/nereid /usr/local/bin/tritonserver", DOCKERFILE.read_text()), \
        "the image must answer to `tritonserver`"


@pytest.mark.parametrize("explicit", [True, False], ids=["no-storageUri", "storageUri"])
def test_kserve_arguments_start_the_server(tmp_path, explicit):
    """The runtime's flags, exactly, with the store's path and the two ports
    pointed at this machine's; the metrics port, which KServe leaves at
    its default, moved off 8002 so as not to meet another server here."""
    repo = model_repository(tmp_path)
    http, grpc, metrics = free_ports(3)
    moved = {"--model-store=/mnt/models": f"--model-store={repo}",
             "--http-port=8080": f"--http-port={http}",
             "--grpc-port=9000": f"--grpc-port={grpc}"}
    args = kserve_args(explicit)
    assert args[0] == "tritonserver" and set(moved) <= set(args)
    args = [moved.get(a, a) for a in args[1:]] + [f"--metrics-port={metrics}"]
    server = launch(tmp_path, args, http)
    try:
        wait_ready(http)
        assert grpcclient.InferenceServerClient(f"127.0.0.1:{grpc}").is_server_live()
        ready = f"http://127.0.0.1:{http}/v2/models/simple/ready"
        if explicit:
            assert requests.get(ready, timeout=30).status_code != 200, "explicit mode loads nothing itself"
            load = requests.post(f"http://127.0.0.1:{http}/v2/repository/models/simple/load", timeout=30)
            assert load.status_code == 200, load.text
        assert requests.get(ready, timeout=30).status_code == 200
        infer_simple(http)
    finally:
        assert server.stop() == 0, server.log()


def test_dockerfile_builds_a_non_root_image_with_onnx_runtime():
    text = DOCKERFILE.read_text()
    stages = re.findall(r"^FROM \S+(?: AS (\w+))?", text, re.M)
    assert len(stages) >= 3 and stages[-1] == "", "multi-stage, ending in the runtime image"
    users = re.findall(r"^USER (\S+)", text, re.M)
    assert users and users[-1].split(":")[0].isdigit() and users[-1].split(":")[0] != "0"
    assert re.search(r"pip install .*onnxruntime==", text)
    ort = re.search(r"^ENV ORT_DYLIB_PATH=(\S+)", text, re.M).group(1)
    assert re.search(rf"^COPY --from=onnxruntime \S+ {re.escape(str(Path(ort).parent))}/", text, re.M)
    exposed = re.search(r"^EXPOSE (.+)$", text, re.M).group(1).split()
    assert exposed == [help_default(f"{p}-port") for p in ("http", "grpc", "metrics")]
    ignored = (DEPLOY / "Dockerfile.dockerignore").read_text().split()
    assert {"target", ".venv", ".tools", ".git"} <= set(ignored)
    # Cargo's --locked needs a lock file in the build context.
    assert "--locked" in text and (REPO_ROOT / "Cargo.lock").exists()


def test_dockerfile_command_starts_the_server(tmp_path):
    cmd = json.loads(re.search(r"^CMD (\[.*\])$", DOCKERFILE.read_text(), re.M).group(1))
    assert cmd[0] == "nereid"
    repo = model_repository(tmp_path)
    http, grpc, metrics = free_ports(3)
    args = [a.replace("=/models", f"={repo}") for a in cmd[1:]]
    args += [f"--http-port={http}", f"--grpc-port={grpc}", f"--metrics-port={metrics}"]
    server = launch(tmp_path, args, http)
    try:
        wait_ready(http)
    finally:
        assert server.stop() == 0, server.log()


def dashboard_expressions() -> list[str]:
    panels = json.loads(DASHBOARD.read_text())["panels"]
    return [t["expr"] for p in panels for t in p.get("targets", [])]


def test_dashboard_reads_only_metrics_the_server_serves(chart_server):
    _, ports, _ = chart_server
    infer_simple(ports["http"])
    text = requests.get(f"http://127.0.0.1:{ports['metrics']}/metrics", timeout=30).text
    served = set(re.findall(r"^# TYPE (\S+)", text, re.M))
    # GPUs name their own families (nereid-device), served on a GPU machine.
    gpu_source = (REPO_ROOT / "crates/nereid-device/src/metrics.rs").read_text()
    wanted = set()
    for expr in dashboard_expressions():
        for name in re.findall(r"\b(nv_[a-z_]+)", expr):
            wanted.add(re.sub(r"_(bucket|sum|count)$", "", name) if "histogram" in name else name)
    assert {"nv_inference_request_success", "nv_inference_queue_duration_us",
            "nv_inference_compute_infer_duration_us", "nv_inference_request_histogram_ms",
            "nv_gpu_utilization"} <= wanted
    for name in wanted:
        if name in GPU_METRICS:
            assert f'"{name}"' in gpu_source, name  # served when the machine has GPUs
        else:
            assert name in served, name
    histograms = [e for e in dashboard_expressions() if "histogram_quantile" in e]
    assert histograms and all("_bucket" in e and "le" in e for e in histograms)

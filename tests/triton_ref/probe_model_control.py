#!/usr/bin/env python3
"""Records what the real Triton 2.51 does with model control: the repository
API (index / load / unload) in each `--model-control-mode`, load parameters
(config override, file contents), poll-mode reloads, readiness and
`--exit-on-error`. The findings are in docs/triton-reference.md ("Model
control"); the raw record goes to tests/triton_ref/model_control.json.

    scripts/setup-triton.sh
    .tools/triton-venv/bin/python tests/triton_ref/probe_model_control.py

Each phase copies tests/triton_ref/models into a temporary folder, starts
`scripts/run-triton.sh` on it (ports 18100-18102 unless TRITON_*_PORT say
otherwise) and stops it again.
"""

import base64
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

import grpc
import requests
from google.protobuf import json_format
from tritonclient.grpc import service_pb2, service_pb2_grpc

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
PORTS = [int(os.environ.get(k, d)) for k, d in
         (("TRITON_HTTP_PORT", 18100), ("TRITON_GRPC_PORT", 18101), ("TRITON_METRICS_PORT", 18102))]
HTTP = f"http://127.0.0.1:{PORTS[0]}"
RESULTS = []
PHASE = ""

I16 = list(range(1, 17))


def record(case, **entry):
    entry = {"phase": PHASE, "case": case, **entry}
    RESULTS.append(entry)
    print(json.dumps(entry)[:400], flush=True)
    return entry


def http(case, method, path, body=None):
    raw = json.dumps(body).encode() if body is not None else None
    r = requests.request(method, HTTP + path, data=raw, timeout=60,
                         headers={"Accept-Encoding": "identity"})
    record(case, request=f"{method} {path} {raw.decode() if raw else ''}".strip(),
           status=r.status_code, content_type=r.headers.get("content-type"), body=r.text)
    return r


def pb_dict(msg):
    try:
        return json_format.MessageToDict(msg, including_default_value_fields=True,
                                         preserving_proto_field_name=True)
    except TypeError:
        return json_format.MessageToDict(msg, always_print_fields_with_no_presence=True,
                                         preserving_proto_field_name=True)


def rpc(case, stub, name, request):
    try:
        resp = getattr(stub, name)(request, timeout=60)
        return record(case, rpc=name, request=pb_dict(request), code="OK", response=pb_dict(resp))
    except grpc.RpcError as e:
        return record(case, rpc=name, request=pb_dict(request), code=e.code().name,
                      message=e.details())


def infer_body():
    return {"inputs": [{"name": n, "datatype": "INT32", "shape": [1, 16], "data": I16}
                       for n in ("INPUT0", "INPUT1")]}


def copy_models(names):
    tmp = tempfile.mkdtemp(prefix="triton-mc-")
    repo = os.path.join(tmp, "models")
    os.mkdir(repo)
    for name in names:
        shutil.copytree(os.path.join(HERE, "models", name), os.path.join(repo, name),
                        ignore=shutil.ignore_patterns("__pycache__"))
    return repo


def start(repo, args, wait=True):
    env = dict(os.environ, TRITON_HTTP_PORT=str(PORTS[0]), TRITON_GRPC_PORT=str(PORTS[1]),
               TRITON_METRICS_PORT=str(PORTS[2]))
    log = open(os.path.join(os.path.dirname(repo), "triton.log"), "w+")
    proc = subprocess.Popen([os.path.join(ROOT, "scripts/run-triton.sh"), repo, *args],
                            stdout=log, stderr=subprocess.STDOUT, env=env)
    deadline = time.monotonic() + 90
    while wait and time.monotonic() < deadline:
        if proc.poll() is not None:
            break
        try:
            requests.get(HTTP + "/v2/health/live", timeout=1)
            break
        except requests.ConnectionError:
            time.sleep(0.2)
    time.sleep(1)
    return proc, log


def stop(proc, log):
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
    log.flush()
    log.seek(0)
    return log.read()


def wait_for(predicate, timeout=20):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.25)
    return False


def index():
    return requests.post(HTTP + "/v2/repository/index", timeout=10).json()


def phase_none():
    global PHASE
    PHASE = "none"
    repo = copy_models(["simple", "identity_bytes", "broken"])
    proc, log = start(repo, [])
    stub = service_pb2_grpc.GRPCInferenceServiceStub(grpc.insecure_channel(f"127.0.0.1:{PORTS[1]}"))
    http("ready with a failed model (strict)", "GET", "/v2/health/ready")
    http("index", "POST", "/v2/repository/index")
    http("load", "POST", "/v2/repository/models/simple/load")
    http("unload", "POST", "/v2/repository/models/simple/unload")
    http("load unknown", "POST", "/v2/repository/models/nope/load")
    rpc("grpc load", stub, "RepositoryModelLoad", service_pb2.RepositoryModelLoadRequest(model_name="simple"))
    rpc("grpc unload", stub, "RepositoryModelUnload", service_pb2.RepositoryModelUnloadRequest(model_name="simple"))
    text = stop(proc, log)
    record("log lines about failures", log=[l for l in text.splitlines()
                                             if "load" in l.lower() or "error" in l.lower()][:30])


def phase_poll():
    global PHASE
    PHASE = "poll"
    repo = copy_models(["simple", "identity_bytes"])
    proc, log = start(repo, ["--model-control-mode=poll", "--repository-poll-secs=1"])
    stub = service_pb2_grpc.GRPCInferenceServiceStub(grpc.insecure_channel(f"127.0.0.1:{PORTS[1]}"))
    http("load", "POST", "/v2/repository/models/simple/load")
    http("unload", "POST", "/v2/repository/models/simple/unload")
    rpc("grpc load", stub, "RepositoryModelLoad", service_pb2.RepositoryModelLoadRequest(model_name="simple"))
    # A new model appears.
    shutil.copytree(os.path.join(HERE, "models", "simple"), os.path.join(repo, "simple2"),
                    ignore=shutil.ignore_patterns("__pycache__"))
    cfg = os.path.join(repo, "simple2", "config.pbtxt")
    with open(cfg) as f:
        text = f.read().replace('name: "simple"', 'name: "simple2"')
    with open(cfg, "w") as f:
        f.write(text)
    wait_for(lambda: any(r.get("name") == "simple2" and r.get("state") == "READY" for r in index()))
    http("index after adding simple2", "POST", "/v2/repository/index")
    # Its config breaks: does the old version keep serving?
    with open(cfg, "w") as f:
        f.write(text + "\nthis is not valid {\n")
    time.sleep(4)
    http("index after breaking simple2's config", "POST", "/v2/repository/index")
    http("infer simple2 after its config broke", "POST", "/v2/models/simple2/infer", infer_body())
    http("ready after simple2's config broke", "GET", "/v2/health/ready")
    # Fixed, now asking for version 2 only (Triton 2.51 aborted with a
    # boost::interprocess::lock_exception when it loaded two python-backend
    # versions at once here).
    with open(cfg, "w") as f:
        f.write(text.replace("specific: { versions: [1] }", "specific: { versions: [2] }"))
    wait_for(lambda: any(r.get("name") == "simple2" and r.get("version") == "2"
                         and r.get("state") == "READY" for r in index()))
    time.sleep(1)
    http("index after switching simple2 to version 2", "POST", "/v2/repository/index")
    # The selected version goes away.
    shutil.rmtree(os.path.join(repo, "simple2", "2"))
    wait_for(lambda: not any(r.get("name") == "simple2" and r.get("version") == "2"
                             and r.get("state") == "READY" for r in index()))
    time.sleep(1)
    http("index after removing simple2/2", "POST", "/v2/repository/index")
    http("infer simple2 after removing its only selected version", "POST", "/v2/models/simple2/infer",
         infer_body())
    http("ready after removing simple2/2", "GET", "/v2/health/ready")
    # A model goes away.
    shutil.rmtree(os.path.join(repo, "identity_bytes"))
    wait_for(lambda: not any(r.get("name") == "identity_bytes" and r.get("state") == "READY" for r in index()))
    time.sleep(1)
    http("index after removing identity_bytes", "POST", "/v2/repository/index")
    http("metadata of the removed model", "GET", "/v2/models/identity_bytes")
    # A broken model appears.
    shutil.copytree(os.path.join(HERE, "models", "broken"), os.path.join(repo, "broken"),
                    ignore=shutil.ignore_patterns("__pycache__"))
    wait_for(lambda: any(r.get("name") == "broken" and r.get("state") for r in index()))
    time.sleep(1)
    http("index after adding broken", "POST", "/v2/repository/index")
    http("ready after adding broken", "GET", "/v2/health/ready")
    http("ready of broken", "GET", "/v2/models/broken/ready")
    stop(proc, log)


def config_json(**changes):
    config = {
        "name": "simple", "backend": "python", "max_batch_size": 8,
        "input": [{"name": n, "data_type": "TYPE_INT32", "dims": [16]} for n in ("INPUT0", "INPUT1")],
        "output": [{"name": n, "data_type": "TYPE_INT32", "dims": [16]} for n in ("OUTPUT0", "OUTPUT1")],
    }
    config.update(changes)
    return json.dumps(config)


def phase_explicit():
    global PHASE
    PHASE = "explicit"
    repo = copy_models(["simple", "identity_bytes", "broken"])
    proc, log = start(repo, ["--model-control-mode=explicit"])
    stub = service_pb2_grpc.GRPCInferenceServiceStub(grpc.insecure_channel(f"127.0.0.1:{PORTS[1]}"))
    http("ready with nothing loaded", "GET", "/v2/health/ready")
    http("index with nothing loaded", "POST", "/v2/repository/index")
    http("index ready=true with nothing loaded", "POST", "/v2/repository/index", {"ready": True})
    http("load simple", "POST", "/v2/repository/models/simple/load")
    http("load simple again", "POST", "/v2/repository/models/simple/load")
    rpc("grpc load identity_bytes", stub, "RepositoryModelLoad",
        service_pb2.RepositoryModelLoadRequest(model_name="identity_bytes"))
    http("index after loads", "POST", "/v2/repository/index")
    http("load with config override (all versions)", "POST", "/v2/repository/models/simple/load",
         {"parameters": {"config": config_json(version_policy={"all": {}})}})
    http("index after override", "POST", "/v2/repository/index")
    http("config after override", "GET", "/v2/models/simple/config")
    http("load with invalid config JSON", "POST", "/v2/repository/models/simple/load",
         {"parameters": {"config": "{not json"}})
    http("load with config of the wrong name", "POST", "/v2/repository/models/simple/load",
         {"parameters": {"config": config_json(name="other")}})
    http("load with config that is not a string", "POST", "/v2/repository/models/simple/load",
         {"parameters": {"config": {"name": "simple"}}})
    http("load with an unknown parameter", "POST", "/v2/repository/models/simple/load",
         {"parameters": {"foo": "bar"}})
    http("load with a body that is not JSON", "POST", "/v2/repository/models/simple/load", None)
    with open(os.path.join(repo, "simple", "1", "model.py"), "rb") as f:
        model_py = base64.b64encode(f.read()).decode()
    http("load with file but no config", "POST", "/v2/repository/models/simple/load",
         {"parameters": {"file:1/model.py": model_py}})
    http("load with file and config", "POST", "/v2/repository/models/fresh/load",
         {"parameters": {"config": config_json(name="fresh"), "file:1/model.py": model_py}})
    http("index after file load", "POST", "/v2/repository/index")
    http("infer the model loaded from file contents", "POST", "/v2/models/fresh/infer", infer_body())
    http("load with file that is not base64", "POST", "/v2/repository/models/fresh2/load",
         {"parameters": {"config": config_json(name="fresh2"), "file:1/model.py": "%%%"}})
    rpc("grpc load with config override", stub, "RepositoryModelLoad",
        service_pb2.RepositoryModelLoadRequest(
            model_name="identity_bytes",
            parameters={"config": service_pb2.ModelRepositoryParameter(string_param="{bad")}))
    http("unload simple", "POST", "/v2/repository/models/simple/unload")
    http("index after unload", "POST", "/v2/repository/index")
    http("metadata after unload", "GET", "/v2/models/simple")
    http("ready after unload", "GET", "/v2/health/ready")
    http("unload simple again", "POST", "/v2/repository/models/simple/unload")
    http("unload unknown", "POST", "/v2/repository/models/nope/unload")
    http("unload with unload_dependents", "POST", "/v2/repository/models/identity_bytes/unload",
         {"parameters": {"unload_dependents": True}})
    rpc("grpc unload unknown", stub, "RepositoryModelUnload",
        service_pb2.RepositoryModelUnloadRequest(model_name="nope"))
    rpc("grpc load unknown", stub, "RepositoryModelLoad",
        service_pb2.RepositoryModelLoadRequest(model_name="nope"))
    rpc("grpc index with a repository name", stub, "RepositoryIndex",
        service_pb2.RepositoryIndexRequest(repository_name="x"))
    http("load simple", "POST", "/v2/repository/models/simple/load")
    with open(os.path.join(repo, "simple", "config.pbtxt"), "a") as f:
        f.write("\nnot valid {\n")
    http("reload simple with a broken config on disk", "POST", "/v2/repository/models/simple/load")
    http("index after the failed reload", "POST", "/v2/repository/index")
    http("infer simple after the failed reload", "POST", "/v2/models/simple/infer", infer_body())
    http("ready after the failed reload", "GET", "/v2/health/ready")
    http("load broken", "POST", "/v2/repository/models/broken/load")
    http("ready after broken failed", "GET", "/v2/health/ready")
    rpc("grpc load broken", stub, "RepositoryModelLoad",
        service_pb2.RepositoryModelLoadRequest(model_name="broken"))
    stop(proc, log)


def phase_startup():
    global PHASE
    PHASE = "startup"
    cases = [
        ("exit-on-error=true, none mode, broken in the repository", ["simple", "broken"],
         ["--exit-on-error=true"]),
        ("exit-on-error=true, explicit, --load-model=broken", ["simple", "broken"],
         ["--model-control-mode=explicit", "--load-model=broken", "--exit-on-error=true"]),
        ("explicit, --load-model=nope", ["simple"],
         ["--model-control-mode=explicit", "--load-model=nope", "--exit-on-error=true"]),
        ("explicit, --load-model=*", ["simple", "identity_bytes"],
         ["--model-control-mode=explicit", "--load-model=*"]),
        ("poll with --load-model", ["simple"], ["--model-control-mode=poll", "--load-model=simple"]),
        ("bad mode", ["simple"], ["--model-control-mode=bogus"]),
        ("--load-model in none mode", ["simple"], ["--load-model=simple"]),
        ("poll mode with --repository-poll-secs=0", ["simple"],
         ["--model-control-mode=poll", "--repository-poll-secs=0"]),
    ]
    for case, models, args in cases:
        repo = copy_models(models)
        proc, log = start(repo, args)
        alive = proc.poll() is None
        rows = None
        if alive:
            try:
                rows = index()
            except requests.RequestException:
                pass
        code = None
        if not alive:
            code = proc.returncode
        text = stop(proc, log)
        record(case, alive_after_start=alive, exit_code=code, index=rows,
               log=[l for l in text.splitlines() if "CUDA" not in l and "cuda" not in l][-12:])


def main():
    phases = sys.argv[1:] or ["none", "poll", "explicit", "startup"]
    try:
        for p in phases:
            globals()[f"phase_{p}"]()
    finally:
        out = os.path.join(HERE, "model_control.json")
        with open(out, "w") as f:
            json.dump(RESULTS, f, indent=1)
        print(f"wrote {out}")


if __name__ == "__main__":
    main()

"""Every command README.md and docs/ show is accounted for: a test runs it
as written (the scenarios here, or another test named in WAYS that reads it
out of the doc), or WAYS says why this machine cannot. A command added to
the docs without a way fails here, and so does a way whose command left.

"As written" allows three changes, made by doc_commands.Shell: the docs'
ports (8000, 8001, 8002, 9000, 9092) become free ones, scratch paths such
as /tmp/traffic move under the test's tmp folder, and `make run ...` runs
what `make --dry-run` says it would, on the debug build the tests use (a
release build takes minutes on two cores). A transcript (`console`) must
print what it shows, `...` standing for anything, times and rates
whatever they are."""

from __future__ import annotations

import ast
import json
import re
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import requests

from conftest import REPO_ROOT
from doc_commands import (COMMAND_LANGUAGES, OTHER_LANGUAGES, Block, Command, Shell, all_commands,
                          blocks, commands, documents)


@dataclass(frozen=True)
class RunBy:
    """Run by this test (a function in tests/python/FILE)."""
    file: str
    function: str


@dataclass(frozen=True)
class NotHere:
    """Not run on this machine, and why."""
    why: str


def here(function: str) -> Test:
    return RunBy("test_docs.py", function)


NO_CONTAINERS = NotHere("no container engine here (docs/deploy.md says what is checked instead)")
NO_CLUSTER = NotHere("no Kubernetes cluster here; test_deploy renders and runs the chart's pods' arguments")
NO_GPU = NotHere("no GPU here; scripts/gpu-check.sh runs the GPU paths on a GPU machine")
REAL_TRITON = NotHere("installs and starts real Triton (about 1 GB, minutes): how a session compares "
                      "with it by hand, not part of make test")
BENCHMARK = NotHere("a benchmark's load (minutes): benches/latency_target.sh runs it; "
                    "test_latency_target checks the 503 and its words")

# (document, how the command's first line starts) -> how it runs.
WAYS: dict[tuple[str, str], RunBy | NotHere] = {
    ("README.md", "make run    #"): here("test_the_readme_quickstart_runs_as_written"),
    ("README.md", "make test"): NotHere("the run these tests are part of"),
    ("README.md", 'make run ARGS="--model-repository /models --http-port'):
        here("test_the_readme_quickstart_runs_as_written"),
    ("README.md", "curl localhost:8000/v2/health/ready"): here("test_the_readme_quickstart_runs_as_written"),
    ("README.md", "curl localhost:8000/v2/models/simple"): here("test_the_readme_quickstart_runs_as_written"),
    ("README.md", "curl -s localhost:8000/v2/models/simple/infer"):
        here("test_the_readme_quickstart_runs_as_written"),
    ("README.md", 'make run ARGS="--openai-port'): here("test_the_readme_openai_example_runs_as_written"),
    ("README.md", "curl -s localhost:9000/v1/completions"): here("test_the_readme_openai_example_runs_as_written"),
    ("README.md", "curl -sN localhost:9000/v1/chat"): here("test_the_readme_openai_example_runs_as_written"),
    ("README.md", "curl -s localhost:9000/v1/chat/completions"):
        here("test_the_readme_openai_example_runs_as_written"),
    ("README.md", "curl -s localhost:8000/v2/models/smollm2/generate"):
        here("test_the_readme_openai_example_runs_as_written"),
    ("README.md", "make run TORCH=1   #"): here("test_the_readme_torchscript_commands_run_as_written"),
    ("README.md", "export LIBTORCH="): here("test_the_readme_torchscript_commands_run_as_written"),
    ("README.md", "cargo build --release --bin nereid --features nereid-server/torch"):
        NotHere("a release build (minutes on two cores); make test builds the same features in debug"),
    ("README.md", "make run TF=1"): here("test_the_readme_tensorflow_commands_run_as_written"),
    ("README.md", "curl -s localhost:8000/v2/models/tf_serving"):
        here("test_the_readme_tensorflow_commands_run_as_written"),
    ("README.md", "make run GPU=1"): NO_GPU,
    ("README.md", "make run TORCH=1 GPU=1"): NO_GPU,
    ("README.md", 'make run ARGS="--model-repository /models --model-control-mode explicit'):
        here("test_the_readme_model_control_runs_as_written"),
    ("README.md", "curl -X POST localhost:8000/v2/repository/"): here("test_the_readme_model_control_runs_as_written"),
    ("docs/batch.md", "nereid batch"): here("test_the_batch_guide_runs_as_written"),
    ("docs/batch.md", "echo $?"): here("test_the_batch_guide_runs_as_written"),
    ("docs/batch.md", "cat answers.jsonl"): here("test_the_batch_guide_runs_as_written"),
    ("docs/batch.md", "ls scores"): here("test_the_batch_guide_runs_as_written"),
    ("docs/deploy.md", "docker "): NO_CONTAINERS,
    ("docs/deploy.md", "curl localhost:8000/v2/health/ready"): NO_CONTAINERS,
    ("docs/deploy.md", "helm install nereid deploy/helm/nereid"):
        RunBy("test_deploy.py", "test_the_documented_helm_install_renders_with_real_helm"),
    ("docs/deploy.md", "kubectl "): NO_CLUSTER,
    ("docs/deploy.md", "curl localhost:8000/v2/models/simple"): NO_CLUSTER,
    ("docs/deploy.md", "helm repo add prometheus-community"):
        NotHere("fetches prometheus-community's chart index (the network) for a cluster"),
    ("docs/deploy.md", "helm install prometheus-adapter"):
        NotHere("installs prometheus-community's chart into a cluster; test_prometheus runs its rules"),
    ("docs/deploy.md", "curl -H \"Host: $(kubectl"): NO_CLUSTER,
    ("docs/gpu.md", "make run GPU=1"): NO_GPU,
    ("docs/gpu.md", "make run TORCH=1 GPU=1"): NO_GPU,
    ("docs/latency-target.md", ".venv/bin/python scripts/make_models.py --bench-mlp"): BENCHMARK,
    ("docs/latency-target.md", "target/release/nereid"): BENCHMARK,
    ("docs/latency-target.md", ".tools/perf_analyzer/perf_analyzer.sh"): BENCHMARK,
    ("docs/latency-target.md", "curl -si 127.0.0.1:8000/v2/models/mlp_large/infer"): BENCHMARK,
    ("docs/many-models.md", "nereid --model-repository /models --model-control-mode=on_demand"):
        here("test_the_many_models_guide_runs_as_written"),
    ("docs/streaming.md", "nereid --model-repository model_repository --kafka-config"):
        here("test_the_streaming_walkthrough_runs_as_written"),
    ("docs/streaming.md", "echo '{\"id\":\"r1\""): here("test_the_streaming_walkthrough_runs_as_written"),
    ("docs/streaming.md", "kcat -C"): here("test_the_streaming_walkthrough_runs_as_written"),
    ("docs/traffic.md", "mkdir -p /tmp/traffic"): here("test_the_traffic_walkthrough_runs_as_written"),
    ("docs/traffic.md", "sed -i"): here("test_the_traffic_walkthrough_runs_as_written"),
    ("docs/traffic.md", "cp -r model_repository/add_sub_versions"):
        here("test_the_traffic_walkthrough_runs_as_written"),
    ("docs/traffic.md", 'make run ARGS="--model-repository /tmp/traffic'):
        here("test_the_traffic_walkthrough_runs_as_written"),
    ("docs/traffic.md", "curl -s localhost:8000/v2/models/ab/"): here("test_the_traffic_walkthrough_runs_as_written"),
    ("docs/traffic.md", "curl -s -X POST localhost:8000/v2/models/ab/traffic/rollback"):
        here("test_the_traffic_walkthrough_runs_as_written"),
    ("docs/traffic.md", "perf_analyzer -m mlp_large"): BENCHMARK,
    ("docs/traffic.md", "curl -s localhost:8002/metrics"): BENCHMARK,
    ("docs/traffic.md", "curl -si localhost:8000/v2/models/mlp_large/infer"): BENCHMARK,
    ("docs/triton-reference.md", "scripts/setup-triton.sh"): REAL_TRITON,
    ("docs/triton-reference.md", ".tools/triton-venv/bin/python tests/triton_ref/"): REAL_TRITON,
    ("docs/triton-reference.md", "timeout 60 .tools/perf_analyzer/perf_analyzer.sh"): REAL_TRITON,
}


def way(command: Command) -> tuple[tuple[str, str], RunBy | NotHere]:
    """The one entry of WAYS for `command`: the longest prefix that fits."""
    fits = [(key, w) for key, w in WAYS.items()
            if key[0] == command.doc and command.first_line.startswith(key[1])]
    assert fits, f"{command.doc}:{command.line}: `{command.first_line}` is run by no test: " \
                 "run it in a test and name the test in test_docs.WAYS, or say there why it cannot run here"
    return max(fits, key=lambda f: len(f[0][1]))


def find(doc: str, start: str) -> Command:
    """The one command of `doc` whose first line starts with `start`."""
    found = [c for c in all_commands() if c.doc == doc and c.first_line.startswith(start)]
    assert len(found) == 1, (doc, start, found)
    return found[0]


def block_after(doc: str, language: str, marker: str) -> Block:
    """The first `language` block of `doc` after the line holding `marker`."""
    text = (REPO_ROOT / doc).read_text().splitlines()
    at = next(i for i, line in enumerate(text, 1) if marker in line)
    return next(b for b in blocks(doc) if b.language == language and b.line > at)


def test_every_block_says_what_it_holds():
    for doc in documents():
        for block in blocks(doc):
            assert block.language in COMMAND_LANGUAGES | OTHER_LANGUAGES, \
                f"{doc}:{block.line}: a fenced block needs a language (sh for commands, console " \
                f"for a transcript, text for neither); `{block.language}` is not one test_docs knows"


def test_every_documented_command_is_accounted_for():
    used = set()
    for command in all_commands():
        key, how = way(command)
        used.add(key)
        if isinstance(how, RunBy):
            source = (REPO_ROOT / "tests/python" / how.file).read_text()
            functions = {node.name: ast.get_source_segment(source, node)
                         for node in ast.walk(ast.parse(source)) if isinstance(node, ast.FunctionDef)}
            assert how.function in functions, f"{how} does not exist"
            assert command.doc in functions[how.function], \
                f"{how} does not read {command.doc}, so it cannot run `{command.first_line}`"
        else:
            assert how.why
    assert not set(WAYS) - used, f"ways for commands the docs no longer have: {set(WAYS) - used}"


def test_transcripts_are_read_with_what_they_show():
    """The reader itself: a console block's prompts and output, a command
    over continuation lines, an open quote over lines."""
    block = Block("x.md", 1, "console", ("$ echo 'a", "b' \\", "  c", "a", "b c", "$ true", ">>> 1", "1"))
    assert [(c.text, c.shown) for c in commands(block)] == [("echo 'a\nb' \\\n  c", "a\nb c"), ("true", "")]
    sh = Block("x.md", 1, "sh", ("make run    # a comment", "            # more of it", "ls \\", "  -l"))
    assert [c.text for c in commands(sh)] == ["make run    # a comment", "ls \\\n  -l"]


def python_block(shell: Shell, block: Block, cwd: Path | None = None, before: str = "") -> str:
    """Runs a Python block as a script, with this run's ports and paths,
    after `before` (the blocks a doc ran earlier in the same session)."""
    done = subprocess.run([str(REPO_ROOT / ".venv/bin/python"), "-c", shell.local(before + block.text)],
                          cwd=cwd or shell.cwd, env=shell.env(), capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, f"{block.doc}:{block.line}:\n{done.stderr}"
    return done.stdout


def test_the_readme_quickstart_runs_as_written(tmp_path):
    (tmp_path / "models").symlink_to(REPO_ROOT / "model_repository")
    shell = Shell.make(tmp_path, paths={"/models": str(tmp_path / "models")})
    server = shell.serve(find("README.md", "make run    #"))
    try:
        assert "200 OK" in shell.ok(find("README.md", "curl localhost:8000/v2/health/ready"))
        metadata = json.loads(shell.ok(find("README.md", "curl localhost:8000/v2/models/simple")))
        assert metadata["name"] == "simple"
        answer = json.loads(shell.ok(find("README.md", "curl -s localhost:8000/v2/models/simple/infer")))
        outputs = {o["name"]: o["data"] for o in answer["outputs"]}
        assert outputs["OUTPUT0"] == list(range(1, 17)) and outputs["OUTPUT1"] == list(range(-1, 15))
        printed = python_block(shell, block_after("README.md", "python", "## Try it"))
        assert re.findall(r"-?\d+", printed) == [str(2 * i) for i in range(16)], printed
    finally:
        server.stop()
    other = shell.serve(find("README.md", 'make run ARGS="--model-repository /models --http-port'))
    try:
        assert requests.get(f"http://127.0.0.1:{shell.ports[9000]}/v2/models/simple/ready",
                            timeout=30).status_code == 200
        assert "--log-verbose" in other.args
    finally:
        other.stop()


def test_the_readme_openai_example_runs_as_written(tmp_path):
    shell = Shell.make(tmp_path)
    server = shell.serve(find("README.md", 'make run ARGS="--openai-port'))
    try:
        completion = json.loads(shell.ok(find("README.md", "curl -s localhost:9000/v1/completions")))
        assert completion["choices"][0]["text"].strip()
        stream = shell.ok(find("README.md", "curl -sN localhost:9000/v1/chat"))
        assert stream.strip().endswith("data: [DONE]") and stream.count("data: ") > 2, stream
        printed = python_block(shell, block_after("README.md", "python", 'make run ARGS="--openai-port'))
        assert printed.strip()
        chat = json.loads(shell.ok(find("README.md", "curl -s localhost:9000/v1/chat/completions")))
        assert chat["choices"][0]["message"]["content"].strip()
        generated = json.loads(shell.ok(find("README.md", "curl -s localhost:8000/v2/models/smollm2")))
        assert generated["text_output"].startswith("The capital of France is "), generated
        printed = python_block(shell, block_after("README.md", "python", "## Language models"))
        assert len(printed.strip().splitlines()) >= 2 and "Once upon a time" in printed, printed
    finally:
        server.stop()


def test_the_readme_torchscript_commands_run_as_written(tmp_path):
    shell = Shell.make(tmp_path)
    shell.ok(find("README.md", "export LIBTORCH="), timeout=600)
    server = shell.serve(find("README.md", "make run TORCH=1   #"))
    try:
        for model in ("add_sub_torch", "mlp_torch"):
            assert requests.get(f"http://127.0.0.1:{shell.ports[8000]}/v2/models/{model}/ready",
                                timeout=30).status_code == 200, server.log()
    finally:
        server.stop()


def test_the_readme_tensorflow_commands_run_as_written(tmp_path):
    python = subprocess.run([str(REPO_ROOT / "scripts/setup-tensorflow-python.sh")], check=True,
                            capture_output=True, text=True).stdout.strip()
    subprocess.run([python, str(REPO_ROOT / "tests/python/make_savedmodels.py"), str(tmp_path / "tf"),
                    str(tmp_path / "answers.npz")], check=True, capture_output=True)
    shell = Shell.make(tmp_path, paths={"/models/tf": str(tmp_path / "tf")})
    server = shell.serve(find("README.md", "make run TF=1"))
    try:
        config = json.loads(shell.ok(find("README.md", "curl -s localhost:8000/v2/models/tf_serving/config")))
        assert (config["platform"], config["max_batch_size"]) == ("tensorflow_savedmodel", 4), config
        assert [i["name"] for i in config["input"]] == ["x"], config
        answer = json.loads(shell.ok(find("README.md", "curl -s localhost:8000/v2/models/tf_serving/infer")))
        assert answer["outputs"][0]["name"] == "y" and answer["outputs"][0]["shape"] == [1, 3], answer
    finally:
        server.stop()


def test_the_readme_model_control_runs_as_written(tmp_path):
    (tmp_path / "models").symlink_to(REPO_ROOT / "model_repository")
    shell = Shell.make(tmp_path, paths={"/models": str(tmp_path / "models")})
    server = shell.serve(find("README.md", 'make run ARGS="--model-repository /models --model-control-mode'))
    index = find("README.md", "curl -X POST localhost:8000/v2/repository/index")
    try:
        assert {r["name"]: r.get("state") for r in json.loads(shell.ok(index))}["mlp"] is None
        shell.ok(find("README.md", "curl -X POST localhost:8000/v2/repository/models/mlp/load"))
        assert {r["name"]: r.get("state") for r in json.loads(shell.ok(index))}["mlp"] == "READY"
        shell.ok(find("README.md", "curl -X POST localhost:8000/v2/repository/models/mlp/unload"))
        assert {r["name"]: r.get("state") for r in json.loads(shell.ok(index))}["mlp"] == "UNAVAILABLE"
    finally:
        server.stop()


def test_shown_output_is_matched_as_a_reader_would():
    from doc_commands import shown_pattern
    pattern = shown_pattern('nereid batch: 4 records (1 failed) in 0.1 s, 72 records/s\n{"a":[1,2,...,16]}\n'
                            '{"id":"row-1", ...}\nOUTPUT.npy  errors.jsonl')
    assert pattern.fullmatch('nereid batch: 4 records (1 failed) in 0.03 s, 133 records/s\n'
                             '{"a":[1,2,3,4,16]}\n{"id":"row-1","b":2}\nOUTPUT.npy\nerrors.jsonl')
    assert not pattern.fullmatch('nereid batch: 5 records (1 failed) in 0.03 s, 133 records/s\n'
                                 '{"a":[1,2,3,4,16]}\n{"id":"row-1","b":2}\nOUTPUT.npy\nerrors.jsonl')


def test_the_batch_guide_runs_as_written(tmp_path):
    """docs/batch.md's examples in order, in a folder of their own: the
    Python that writes the inputs, then the transcripts."""
    work = tmp_path / "work"
    work.mkdir()
    (work / "model_repository").symlink_to(REPO_ROOT / "model_repository")
    shell = Shell.make(tmp_path, cwd=work)
    doc = "docs/batch.md"
    session = ""
    for block in blocks(doc):
        if block.language == "python" and not block.lines[0].startswith(">>>"):
            python_block(shell, block, before=session)
            session += block.text
        elif block.language == "console":
            shell.transcript(block)
    # The synopsis at the top, on the same features in a folder of its own.
    synopsis = work / "synopsis"
    synopsis.mkdir()
    (synopsis / "models").symlink_to(REPO_ROOT / "model_repository")
    (synopsis / "features.parquet").symlink_to(work / "features.parquet")
    Shell(synopsis, tmp_path, {}, shell.ports, shell.binary).ok(find(doc, "nereid batch --model-repository ./models"))
    assert (synopsis / "scores.parquet").stat().st_size > 0


def test_the_traffic_walkthrough_runs_as_written(tmp_path):
    doc = "docs/traffic.md"
    traffic = tmp_path / "traffic"
    shell = Shell.make(tmp_path, paths={"/tmp/traffic": str(traffic),
                                        "/tmp/routes.jsonl": str(tmp_path / "routes.jsonl")})
    [start] = [b for b in blocks(doc) if b.language == "sh" and "mkdir -p /tmp/traffic" in b.text]
    *setup, make_run = commands(start)
    for command in setup:
        shell.ok(command)
    server = shell.serve(make_run)
    base = f"http://127.0.0.1:{shell.ports[8000]}"
    try:
        settings = block_after(doc, "json", "## The settings: `traffic.json`")
        saved_as = re.search(r"Save it as `(/tmp/traffic/[^`]+)`", (REPO_ROOT / doc).read_text()).group(1)
        Path(shell.local(saved_as)).write_text(settings.text)
        until = time.monotonic() + 60
        while requests.get(f"{base}/v2/models/ab/traffic", timeout=30).json()["settings"].get("labels") is None:
            assert time.monotonic() < until, server.log()
            time.sleep(0.2)
        for marker in ("The traffic endpoint.", "A request names a label"):
            shell.transcript(block_after(doc, "console", marker))
        for i in range(40):
            requests.post(f"{base}/v2/models/ab/infer", json={"inputs": [
                {"name": "INPUT0", "shape": [4], "datatype": "FP32", "data": [1, 2, 3, 4]},
                {"name": "INPUT1", "shape": [4], "datatype": "FP32", "data": [1, 1, 1, 1]}]},
                headers={"nereid-routing-key": f"user-{i}"}, timeout=30).raise_for_status()
        printed = python_block(shell, block_after(doc, "python", "An analysis of A against B"))
        assert [line.split()[0] for line in printed.splitlines()] == ["1", "2"], printed
        shell.ok(find(doc, "curl -s localhost:8000/v2/models/ab/traffic -d '{\"shadow\""))
        for marker in ("Promotion is moving a label", "Rolling back is one"):
            shell.transcript(block_after(doc, "console", marker))
        assert "fallback model is not in the model repository" not in server.log(), \
            "the walkthrough makes ab_small"
    finally:
        server.stop()


def newer_librdkafka(tmp: Path) -> Path:
    """A folder where kcat finds the librdkafka that confluent-kafka's wheel
    carries: Debian's (2.0.2) misreads tansu 0.6.0's ApiVersions answer,
    which a Kafka broker's it reads ("Protocol read buffer underflow")."""
    import confluent_kafka
    [library] = (Path(confluent_kafka.__file__).parent.parent / "confluent_kafka.libs").glob("librdkafka*.so*")
    folder = tmp / "librdkafka"
    folder.mkdir()
    (folder / "librdkafka.so.1").symlink_to(library)
    return folder


def test_the_streaming_walkthrough_runs_as_written(tmp_path):
    """docs/streaming.md, "Running it", against the tests' tansu broker:
    the route file, the topics, the server, kcat's record in and out, and
    the same in Python."""
    from kafka_support import Tansu
    doc = "docs/streaming.md"
    broker = Tansu(tmp_path)
    broker.start()
    work = tmp_path / "work"
    work.mkdir()
    (work / "model_repository").symlink_to(REPO_ROOT / "model_repository")
    shell = Shell.make(tmp_path, cwd=work)
    shell.ports[9092] = broker.port
    shell.extra_env["LD_LIBRARY_PATH"] = str(newer_librdkafka(tmp_path))
    server = None
    try:
        (work / "kafka.toml").write_text(shell.local(block_after(doc, "toml", "## Running it").text))
        python_block(shell, block_after(doc, "python", "Create its topics"))
        server = shell.serve(find(doc, "nereid --model-repository model_repository --kafka-config"))
        produce, consume = commands(block_after(doc, "bash", "Produce a record with kcat"))
        shell.ok(produce)
        until = time.monotonic() + 60
        while '"id":"r1"' not in (out := shell.ok(consume)):
            assert time.monotonic() < until, server.log()
            time.sleep(0.5)
        assert out.startswith("key=user-42 headers=trace=abc"), out
        answer = json.loads(out.splitlines()[1])
        outputs = {o["name"]: o["data"] for o in answer["outputs"]}
        assert outputs["OUTPUT0"] == list(range(2, 18)), answer
        printed = python_block(shell, block_after(doc, "python", "or with Python"))
        assert printed.startswith("b'user-42' [('trace', b'abc')]"), printed
    finally:
        if server:
            server.stop()
        broker.stop()


def test_the_many_models_guide_runs_as_written(tmp_path):
    """docs/many-models.md's server over a copy of the example models: the
    first request for a model loads it."""
    doc = "docs/many-models.md"
    shutil.copytree(REPO_ROOT / "model_repository", tmp_path / "models", symlinks=True)
    shell = Shell.make(tmp_path, paths={"/models": str(tmp_path / "models")})
    server = shell.serve(find(doc, "nereid --model-repository /models --model-control-mode=on_demand"))
    base = f"http://127.0.0.1:{shell.ports[8000]}"
    try:
        rows = requests.post(f"{base}/v2/repository/index", timeout=30).json()
        assert all("state" not in row for row in rows), rows
        answer = requests.post(f"{base}/v2/models/simple/infer", timeout=60, json={"inputs": [
            {"name": "INPUT0", "datatype": "INT32", "shape": [1, 16], "data": list(range(16))},
            {"name": "INPUT1", "datatype": "INT32", "shape": [1, 16], "data": [1] * 16}]})
        assert answer.status_code == 200, answer.text
        rows = {r["name"]: r for r in requests.post(f"{base}/v2/repository/index", timeout=30).json()}
        assert rows["simple"]["state"] == "READY" and rows["simple"]["memory_bytes"] > 0
    finally:
        server.stop()

"""`nereid batch`: the built binary run over JSON lines, .npy, Parquet and
Arrow IPC files made here, its results checked against ONNX Runtime's
Python API (or the identity they should be), in input order, with failed
records written beside the others and counted in the exit status; and
resumed after SIGKILL and SIGINT with every record exactly once."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pyarrow as pa
import pyarrow.ipc as ipc
import pyarrow.parquet as pq
import pytest

from models import REPO_ROOT, mlp_reference

BINARY = os.environ.get("NEREID_BIN", str(REPO_ROOT / "target/debug/nereid"))
REPOSITORIES = [REPO_ROOT / "model_repository", REPO_ROOT / "tests" / "models"]
TIMEOUT_S = 300


def command(*args: str) -> list[str]:
    argv = [BINARY, "batch", f"--backend-config=python,python-path={sys.executable}"]
    for repo in REPOSITORIES:
        argv += ["--model-repository", str(repo)]
    return argv + list(args)


def batch(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(command(*args), capture_output=True, text=True, timeout=TIMEOUT_S)


def simple_reference(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    session = ort.InferenceSession(str(REPO_ROOT / "model_repository/simple/1/model.onnx"))
    out0, out1 = session.run(["OUTPUT0", "OUTPUT1"], {"INPUT0": a, "INPUT1": b})
    return out0, out1


def mlp_rows(n: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((n, 256)).astype(np.float32)


def fixed_list_table(name: str, rows: np.ndarray) -> pa.Table:
    flat = pa.array(rows.reshape(-1), type=pa.float32())
    column = pa.FixedSizeListArray.from_arrays(flat, rows.shape[1])
    return pa.table({name: column})


def simple_body(a: np.ndarray, b: np.ndarray, request_id: str) -> dict:
    return {
        "id": request_id,
        "inputs": [
            {"name": "INPUT0", "shape": [1, len(a)], "datatype": "INT32", "data": a.tolist()},
            {"name": "INPUT1", "shape": [1, len(b)], "datatype": "INT32", "data": b.tolist()},
        ],
    }


# --- JSON lines ------------------------------------------------------------


def test_json_lines_answer_each_line_in_order_with_failures_beside(tmp_path):
    rng = np.random.default_rng(1)
    a = rng.integers(-1000, 1000, size=(40, 16), dtype=np.int32)
    b = rng.integers(-1000, 1000, size=(40, 16), dtype=np.int32)
    lines = [json.dumps(simple_body(a[i], b[i], f"r{i}")) for i in range(40)]
    bad = {7: "{not json", 19: "", 23: json.dumps(simple_body(a[23][:8], b[23][:8], "short"))}
    for index, line in bad.items():
        lines[index] = line
    source = tmp_path / "in.jsonl"
    source.write_text("\n".join(lines) + "\n")
    out = tmp_path / "out.jsonl"
    done = batch("--model=simple", f"--input={source}", f"--output={out}")
    assert done.returncode == 2, done.stderr
    assert "40 records (3 failed)" in done.stderr
    answers = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(answers) == 40
    want0, want1 = simple_reference(a, b)
    for i, answer in enumerate(answers):
        if i in bad:
            assert set(answer) == {"error"}, answer
            continue
        assert answer["id"] == f"r{i}" and answer["model_name"] == "simple"
        outputs = {o["name"]: o for o in answer["outputs"]}
        assert outputs["OUTPUT0"]["shape"] == [1, 16]
        np.testing.assert_array_equal(outputs["OUTPUT0"]["data"], want0[i])
        np.testing.assert_array_equal(outputs["OUTPUT1"]["data"], want1[i])
    assert "failed to parse the request JSON" in answers[7]["error"]
    assert "empty line" in answers[19]["error"]
    assert "unexpected shape for input 'INPUT0'" in answers[23]["error"]


# --- Parquet and Arrow -------------------------------------------------------


def test_parquet_runs_the_mlp_and_writes_a_column_per_output(tmp_path):
    rows = mlp_rows(300)
    source = tmp_path / "in.parquet"
    pq.write_table(fixed_list_table("INPUT", rows), source, row_group_size=64)
    out = tmp_path / "out.parquet"
    done = batch("--model=mlp", f"--input={source}", f"--output={out}")
    assert done.returncode == 0, done.stderr
    assert "300 records (0 failed)" in done.stderr and "records/s" in done.stderr
    table = pq.read_table(out)
    assert table.column_names == ["OUTPUT", "error"]
    assert table.column("error").null_count == 300
    got = np.array(table.column("OUTPUT").to_pylist(), dtype=np.float32)
    np.testing.assert_allclose(got, mlp_reference(rows), rtol=1e-4, atol=1e-4)
    assert not Path(f"{out}.parts").exists()


def test_arrow_variable_rows_and_bad_rows_fail_alone(tmp_path):
    values = [[1.5, 2.5, 3.5], [4.0], None, [], [7.0, 8.0], [9.0] * 9]
    source = tmp_path / "in.arrow"
    table = pa.table({"INPUT0": pa.array(values, type=pa.list_(pa.float32()))})
    with ipc.new_file(source, table.schema) as writer:
        writer.write_table(table, max_chunksize=4)
    out = tmp_path / "out.arrow"
    done = batch("--model=identity_fp32", f"--input={source}", f"--output={out}")
    assert done.returncode == 2, done.stderr
    result = ipc.open_file(out).read_all()
    errors = result.column("error").to_pylist()
    outputs = result.column("OUTPUT0").to_pylist()
    assert len(outputs) == len(values)
    for i, want in enumerate(values):
        if want is None:
            assert "column 'INPUT0' is null" in errors[i] and outputs[i] is None
        else:
            assert errors[i] is None and outputs[i] == want, (i, errors[i])


def test_a_parquet_column_of_the_wrong_type_stops_the_job(tmp_path):
    source = tmp_path / "in.parquet"
    pq.write_table(pa.table({"INPUT": pa.array([[1.0] * 256], type=pa.list_(pa.float64()))}), source)
    done = batch("--model=mlp", f"--input={source}", f"--output={tmp_path / 'out.parquet'}")
    assert done.returncode == 1
    assert "column 'INPUT' holds List" in done.stderr and "FP32" in done.stderr
    assert not (tmp_path / "out.parquet").exists()


def test_parquet_strings_in_and_out(tmp_path):
    words = ["", "a", "é", "x" * 300, "\x00nul"]
    source = tmp_path / "in.parquet"
    pq.write_table(pa.table({"INPUT0": pa.array([[w] for w in words], type=pa.list_(pa.string()))}), source)
    out = tmp_path / "out.parquet"
    done = batch("--model=string_identity", f"--input={source}", f"--output={out}")
    assert done.returncode == 0, done.stderr
    got = pq.read_table(out).column("OUTPUT0").to_pylist()
    assert got == [[w.encode()] for w in words]


# --- .npy ------------------------------------------------------------------


def test_npy_file_for_a_one_input_model(tmp_path):
    rows = mlp_rows(130, seed=3)
    source = tmp_path / "x.npy"
    np.save(source, rows)
    out = tmp_path / "scores"
    done = batch("--model=mlp", f"--input={source}", f"--output={out}", "--output-format=npy")
    assert done.returncode == 0, done.stderr
    got = np.load(out / "OUTPUT.npy")
    assert got.shape == (130, 16) and got.dtype == np.float32
    np.testing.assert_allclose(got, mlp_reference(rows), rtol=1e-4, atol=1e-4)
    assert (out / "errors.jsonl").read_text() == ""


def test_npy_inputs_by_name_and_in_a_folder(tmp_path):
    rng = np.random.default_rng(5)
    a = rng.integers(-50, 50, size=(20, 16), dtype=np.int32)
    b = rng.integers(-50, 50, size=(20, 16), dtype=np.int32)
    folder = tmp_path / "inputs"
    folder.mkdir()
    np.save(folder / "INPUT0.npy", a)
    np.save(folder / "INPUT1.npy", b)
    want0, want1 = simple_reference(a, b)
    for inputs, name in [([f"--input={folder}"], "from_folder"),
                         ([f"--input=INPUT0={folder / 'INPUT0.npy'}",
                           f"--input=INPUT1={folder / 'INPUT1.npy'}"], "by_name")]:
        out = tmp_path / name
        done = batch("--model=simple", *inputs, f"--output={out}")
        assert done.returncode == 0, done.stderr
        np.testing.assert_array_equal(np.load(out / "OUTPUT0.npy"), want0)
        np.testing.assert_array_equal(np.load(out / "OUTPUT1.npy"), want1)
    np.save(folder / "INPUT1.npy", b[:5])
    done = batch("--model=simple", f"--input={folder}", f"--output={tmp_path / 'uneven'}")
    assert done.returncode == 1 and "different row counts" in done.stderr


# --- jobs that cannot run ----------------------------------------------------


def test_jobs_that_cannot_run_exit_1(tmp_path):
    source = tmp_path / "in.jsonl"
    source.write_text("{}\n")
    done = batch("--model=no_such_model", f"--input={source}", f"--output={tmp_path / 'o.jsonl'}")
    assert done.returncode == 1 and "no_such_model" in done.stderr
    done = batch("--model=simple", f"--input={tmp_path / 'missing.parquet'}",
                 f"--output={tmp_path / 'o.parquet'}")
    assert done.returncode == 1 and "missing.parquet" in done.stderr
    done = batch("--model=simple", f"--input={source}")
    assert done.returncode == 1 and "--output" in done.stderr
    done = batch("--model=simple", f"--input={tmp_path / 'in.csv'}", f"--output={tmp_path / 'o'}")
    assert done.returncode == 1 and "cannot tell the format" in done.stderr


# --- resume ----------------------------------------------------------------


def wait_for(condition, process: subprocess.Popen, what: str, timeout_s: float = 120) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert process.poll() is None, f"the job ended before {what}: {process.stderr.read()}"
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.01)


def start(*args: str) -> subprocess.Popen:
    return subprocess.Popen(command(*args), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            text=True)


def test_parquet_job_killed_resumes_with_every_record_once(tmp_path):
    rows = mlp_rows(12000, seed=7)
    source = tmp_path / "in.parquet"
    pq.write_table(fixed_list_table("INPUT", rows), source, row_group_size=1000)
    out = tmp_path / "out.parquet"
    parts = Path(f"{out}.parts")
    args = ("--model=mlp", f"--input={source}", f"--output={out}", "--commit-records=500",
            "--concurrency=2")
    job = start(*args)
    wait_for(lambda: parts.exists() and len(list(parts.glob("*.arrow"))) >= 2, job, "two parts")
    job.kill()
    job.wait()
    assert not out.exists()
    kept = sorted(parts.glob("*.arrow"))
    assert 2 <= len(kept) < 24
    done = batch(*args[:3])
    assert done.returncode == 0, done.stderr
    assert "resumed after" in done.stderr
    table = pq.read_table(out)
    assert table.num_rows == 12000 and table.column("error").null_count == 12000
    got = np.array(table.column("OUTPUT").to_pylist(), dtype=np.float32)
    np.testing.assert_allclose(got, mlp_reference(rows), rtol=1e-4, atol=1e-4)
    # Run again: nothing to do, the output untouched.
    before = out.stat().st_mtime_ns
    again = batch(*args[:3])
    assert again.returncode == 0 and "nothing to do" in again.stderr
    assert out.stat().st_mtime_ns == before


def test_json_lines_job_killed_resumes_after_its_last_whole_line(tmp_path):
    rng = np.random.default_rng(9)
    n = 6000
    a = rng.integers(-1000, 1000, size=(n, 16), dtype=np.int32)
    b = rng.integers(-1000, 1000, size=(n, 16), dtype=np.int32)
    source = tmp_path / "in.jsonl"
    with open(source, "w") as f:
        for i in range(n):
            body = simple_body(a[i], b[i], str(i)) if i % 1000 != 500 else {"inputs": "bad"}
            f.write(json.dumps(body) + "\n")
    out = tmp_path / "out.jsonl"
    args = ("--model=simple", f"--input={source}", f"--output={out}", "--commit-records=100",
            "--concurrency=2")
    job = start(*args)
    wait_for(lambda: out.exists() and out.stat().st_size > 20_000, job, "output lines")
    job.kill()
    job.wait()
    written = out.read_bytes().count(b"\n")
    assert 0 < written < n
    done = batch(*args)
    assert done.returncode == 2, done.stderr
    assert f"resumed after {written} records" in done.stderr or "resumed after" in done.stderr
    assert "(6 failed)" in done.stderr
    answers = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(answers) == n
    want0, _ = simple_reference(a, b)
    for i, answer in enumerate(answers):
        if i % 1000 == 500:
            assert "error" in answer
            continue
        assert answer["id"] == str(i)
        np.testing.assert_array_equal(answer["outputs"][0]["data"], want0[i])


def test_sigint_stops_with_130_and_the_job_resumes(tmp_path):
    rows = mlp_rows(12000, seed=11)
    source = tmp_path / "x.npy"
    np.save(source, rows)
    out = tmp_path / "out.arrow"
    args = ("--model=mlp", f"--input={source}", f"--output={out}", "--commit-records=500",
            "--concurrency=2")
    job = start(*args)
    parts = Path(f"{out}.parts")
    wait_for(lambda: parts.exists() and any(parts.glob("*.arrow")), job, "a part")
    job.send_signal(signal.SIGINT)
    _, stderr = job.communicate(timeout=TIMEOUT_S)
    assert job.returncode == 130, stderr
    assert "interrupted" in stderr and "run the same command again" in stderr
    done = batch(*args)
    assert done.returncode == 0, done.stderr
    result = ipc.open_file(out).read_all()
    got = np.array(result.column("OUTPUT").to_pylist(), dtype=np.float32)
    assert got.shape == (12000, 16)
    np.testing.assert_allclose(got, mlp_reference(rows), rtol=1e-4, atol=1e-4)


def test_a_finished_output_of_another_job_is_not_resumed(tmp_path):
    source = tmp_path / "x.npy"
    np.save(source, mlp_rows(10))
    out = tmp_path / "out.parquet"
    assert batch("--model=mlp", f"--input={source}", f"--output={out}").returncode == 0
    np.save(source, mlp_rows(12))
    done = batch("--model=mlp", f"--input={source}", f"--output={out}")
    assert done.returncode == 1 and "--overwrite" in done.stderr
    done = batch("--model=mlp", f"--input={source}", f"--output={out}", "--overwrite")
    assert done.returncode == 0, done.stderr
    assert pq.read_table(out).num_rows == 12


# --- other backends and model kinds --------------------------------------------


PYTHON_MODELS = REPO_ROOT / "crates/nereid-backend-python/python/tests/models"


def test_a_python_model_and_an_ensemble_run_as_onnx_ones_do(tmp_path):
    repo = tmp_path / "repo"
    (repo / "add_sub").mkdir(parents=True)
    (repo / "add_sub" / "config.pbtxt").write_text(
        'backend: "python"\nmax_batch_size: 8\n'
        "dynamic_batching { max_queue_delay_microseconds: 1000 }\n"
        'input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] },'
        ' { name: "INPUT1" data_type: TYPE_FP32 dims: [ 4 ] } ]\n'
        'output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] },'
        ' { name: "OUTPUT1" data_type: TYPE_FP32 dims: [ 4 ] } ]\n')
    (repo / "add_sub" / "1").mkdir()
    (repo / "add_sub" / "1" / "model.py").write_text(
        (PYTHON_MODELS / "add_sub" / "1" / "model.py").read_text())
    rng = np.random.default_rng(13)
    a, b = rng.standard_normal((30, 4), dtype=np.float32), rng.standard_normal((30, 4), dtype=np.float32)
    source = tmp_path / "in.parquet"
    pq.write_table(pa.table({name: pa.FixedSizeListArray.from_arrays(pa.array(x.reshape(-1)), 4)
                             for name, x in [("INPUT0", a), ("INPUT1", b)]}), source)
    out = tmp_path / "out.parquet"
    done = subprocess.run(
        [BINARY, "batch", f"--backend-config=python,python-path={sys.executable}",
         "--model-repository", str(repo), "--model=add_sub", f"--input={source}", f"--output={out}"],
        capture_output=True, text=True, timeout=TIMEOUT_S)
    assert done.returncode == 0, done.stderr
    table = pq.read_table(out)
    np.testing.assert_allclose(np.array(table.column("OUTPUT0").to_pylist()), a + b, rtol=1e-6)
    np.testing.assert_allclose(np.array(table.column("OUTPUT1").to_pylist()), a - b, rtol=1e-6)

    raw = rng.integers(0, 256, size=(50, 256), dtype=np.uint8)
    np.save(tmp_path / "raw.npy", raw)
    done = batch("--model=mlp_pipeline", f"--input={tmp_path / 'raw.npy'}", f"--output={tmp_path / 'pipe'}")
    assert done.returncode == 0, done.stderr
    want = mlp_reference(raw.astype(np.float32) / 255)
    np.testing.assert_allclose(np.load(tmp_path / "pipe" / "OUTPUT.npy"), want, rtol=1e-4, atol=1e-4)


def test_a_job_names_its_version_by_a_label(tmp_path):
    repo = tmp_path / "labelled"
    shutil.copytree(REPO_ROOT / "model_repository" / "add_sub_versions", repo / "ab")
    config = repo / "ab" / "config.pbtxt"
    config.write_text(config.read_text().replace('"add_sub_versions"', '"ab"'))
    (repo / "ab" / "traffic.json").write_text(json.dumps({"labels": {"stable": 1, "canary": 2}}))
    records = tmp_path / "in.jsonl"
    records.write_text(json.dumps({"inputs": [
        {"name": "INPUT0", "datatype": "FP32", "shape": [4], "data": [5, 5, 5, 5]},
        {"name": "INPUT1", "datatype": "FP32", "shape": [4], "data": [1, 2, 3, 4]}]}) + "\n")
    argv = [BINARY, "batch", "--model-repository", str(repo), "--model", "ab",
            "--input", str(records)]
    for label, version, expected in (("stable", "1", [6, 7, 8, 9]), ("canary", "2", [5, 10, 15, 20])):
        output = tmp_path / f"{label}.jsonl"
        done = subprocess.run([*argv, "--model-version", label, "--output", str(output)],
                              capture_output=True, text=True, timeout=TIMEOUT_S)
        assert done.returncode == 0, done.stderr
        [line] = output.read_text().splitlines()
        answer = json.loads(line)
        assert answer["model_version"] == version
        assert answer["outputs"][0]["data"] == expected
    done = subprocess.run([*argv, "--model-version", "beta", "--output", str(tmp_path / "b.jsonl")],
                          capture_output=True, text=True, timeout=TIMEOUT_S)
    assert done.returncode == 1
    assert "has no version label 'beta'" in done.stderr


def test_a_decoupled_model_is_refused(tmp_path):
    source = tmp_path / "in.jsonl"
    source.write_text('{"inputs": []}\n')
    done = batch("--model=echo_words", f"--input={source}", f"--output={tmp_path / 'o.jsonl'}")
    assert done.returncode == 1 and "decoupled" in done.stderr

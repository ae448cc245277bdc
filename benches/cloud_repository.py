"""Time to ready from a cloud repository against the same models on local
disk: 20 models served from moto's S3 server (on this machine) and from a
folder, each start timed from the process's start to its first 200 on
/v2/health/ready, several starts each. Writes the "Cloud repository"
section of docs/benchmarks.md.

    cloud_repository.py NEREID_BIN OUT RUNS
"""

from __future__ import annotations

import datetime
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import requests

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests/python"))
sys.path.insert(0, str(Path(__file__).parent))
from cloud_stores import AWS_ENV, S3, moto, upload_model  # noqa: E402
from conftest import free_port  # noqa: E402
from sections import write_section  # noqa: E402

BEGIN = "<!-- cloud-repository:begin -->"
END = "<!-- cloud-repository:end -->"
MODELS = 20
# (label, source model folder): tiny models show the per-model cost, the
# 5 MB MLP the cost per byte.
SETS = [("simple", ROOT / "model_repository/simple"),
        ("mlp", ROOT / "model_repository/mlp")]


def time_to_ready(binary: str, repository: str, log: Path, env: dict[str, str]) -> float:
    ports = [free_port() for _ in range(3)]
    args = [binary, f"--model-repository={repository}", "--http-address=127.0.0.1",
            "--grpc-address=127.0.0.1", "--metrics-address=127.0.0.1",
            f"--http-port={ports[0]}", f"--grpc-port={ports[1]}", f"--metrics-port={ports[2]}"]
    url = f"http://127.0.0.1:{ports[0]}/v2/health/ready"
    with open(log, "w") as out:
        started = time.monotonic()
        process = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT,
                                   env={**os.environ, **env})
    try:
        while time.monotonic() - started < 120:
            if process.poll() is not None:
                raise RuntimeError(f"nereid exited:\n{log.read_text()}")
            try:
                if requests.get(url, timeout=1).status_code == 200:
                    return time.monotonic() - started
            except requests.ConnectionError:
                pass
            time.sleep(0.005)
        raise RuntimeError(f"not ready in 120 s:\n{log.read_text()}")
    finally:
        process.terminate()
        process.wait(timeout=30)


def measure(binary: str, runs: int, work: Path, port: int, store: S3) -> list[dict]:
    rows = []
    env = {**AWS_ENV, "TRITON_AWS_MOUNT_DIRECTORY": str(work)}
    for index, (label, source) in enumerate(SETS):
        local = work / f"local-{index}"
        prefix = f"set-{index}"
        for i in range(MODELS):
            name = f"m{i:02d}"
            shutil.copytree(source, local / name)
            config = local / name / "config.pbtxt"
            config.write_text(config.read_text().replace(f'"{source.name}"', f'"{name}"'))
            upload_model(store, prefix, name, source)
        size = sum(p.stat().st_size for p in local.rglob("*") if p.is_file())
        repositories = {"local disk": str(local),
                        "S3 (moto)": f"s3://127.0.0.1:{port}/bench/{prefix}"}
        times = {where: [] for where in repositories}
        for run in range(runs):
            # Alternated, so a slower stretch of the machine hits both.
            for where, repository in repositories.items():
                log = work / f"nereid-{index}-{run}.log"
                times[where].append(time_to_ready(binary, repository, log, env))
        rows.append({"label": label, "bytes": size, "times": times})
        print(label, {k: [round(t, 3) for t in v] for k, v in times.items()}, flush=True)
    return rows


def table(rows: list[dict]) -> str:
    lines = ["| 20 copies of | in all | local disk | S3 (moto) | S3 − local |",
             "|---|---:|---:|---:|---:|"]
    for row in rows:
        local, s3 = (statistics.median(row["times"][k]) for k in ("local disk", "S3 (moto)"))
        spread = {k: f"{min(v):.2f}–{max(v):.2f}" for k, v in row["times"].items()}
        size = (f"{row['bytes'] / 1e6:.1f} MB" if row["bytes"] >= 1e6
                else f"{row['bytes'] / 1e3:.0f} KB")
        lines.append(f"| {row['label']} | {size} "
                     f"| {local:.2f} s ({spread['local disk']}) "
                     f"| {s3:.2f} s ({spread['S3 (moto)']}) | {s3 - local:+.2f} s |")
    return "\n".join(lines) + "\n"


def main() -> None:
    binary, out, runs = sys.argv[1], Path(sys.argv[2]), int(sys.argv[3])
    with tempfile.TemporaryDirectory(prefix="nereid-cloud-bench-") as tmp:
        work = Path(tmp)
        with moto(work) as port:
            rows = measure(binary, runs, work, port, S3(port, "bench"))
    git = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                         text=True, cwd=ROOT).stdout.strip()
    body = f"""## Cloud repository: time to ready

`benches/cloud_repository.sh` ({datetime.date.today()}, commit {git}, {os.cpu_count()} CPUs,
`{Path(binary).name}` built in {'release' if 'release' in binary else 'debug'} mode): the
time from starting the server to its first 200 on `/v2/health/ready`, serving 20
models from a folder and the same 20 from moto's S3 server on the same machine
(`s3://127.0.0.1:PORT/bench/...`); median of {runs} starts each, alternated, with
the range in brackets. From S3 the server lists the bucket once, copies the models
(4 at once, 8 objects of each at once) into `TRITON_AWS_MOUNT_DIRECTORY`, then loads
them as from disk.

{table(rows)}
moto is a Python server on the same machine, so the S3 column measures Nereid's
listing and copying against a fast, near store, not a network: against AWS add the
round trips (one listing, one GET per file) and the bandwidth. The copies are
deleted when the server stops, so every start copies everything again, as
Triton's does.
"""
    write_section(out, BEGIN, END, body)


if __name__ == "__main__":
    main()

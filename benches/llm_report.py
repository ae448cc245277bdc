"""Writes the "Language models" section of docs/benchmarks.md from
benches/llm.sh's results (one JSON object a line)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

from sections import write_section

BEGIN = "<!-- llm:begin -->"
END = "<!-- llm:end -->"


def rows(results: list[dict], server: str, label: str, workload: str) -> list[dict]:
    return [r for r in results if r["server"] == server and r["label"] == label
            and r["result"]["workload"] == workload]


def line(r: dict) -> str:
    x = r["result"]
    failed = f"{x['failed']}" + (f" ({x['first_failure'][:80]})" if x["failed"] else "")
    return (f"| {x['concurrency']} | {x['tokens_per_s']:.0f} | {x['ttft_p50']:.2f} | "
            f"{x['ttft_p99']:.2f} | {1000 * x['tpot_p50']:.0f} | {failed} | "
            f"{r['peak_rss_kb'] / 1024:.0f} |")


HEADER = ("| streams | generated tokens/s | first token p50 (s) | p99 (s) | "
          "time per output token p50 (ms) | failed | peak RSS (MiB) |\n|---|---|---|---|---|---|---|")


def side_by_side(results: list[dict], workload: str) -> list[str]:
    """Both servers' rows of a 16-stream workload, each row naming its server."""
    return [line(r).replace("| 16 |", f"| 16 ({server}) |", 1)
            for server in ("llama-server", "nereid")
            for r in rows(results, server, "default", workload)]


def hit_rate(metrics: Path) -> str:
    if not metrics.is_file():
        return "n/a"
    values = {}
    for text in metrics.read_text().splitlines():
        m = re.match(r"(vllm:prefix_cache_(?:queries|hits)_total)\{.*\} (\S+)", text)
        if m:
            values[m.group(1)] = float(m.group(2))
    queries = values.get("vllm:prefix_cache_queries_total", 0)
    hits = values.get("vllm:prefix_cache_hits_total", 0)
    return f"{100 * hits / queries:.0f}% of {queries:.0f} prompt tokens" if queries else "n/a"


def preemptions(metrics: Path) -> str:
    if not metrics.is_file():
        return "n/a"
    m = re.search(r"^vllm:num_preemptions_total\{.*\} (\S+)$", metrics.read_text(), re.M)
    return m.group(1) if m else "0"


def main():
    results_path, work, busy, threads, out = sys.argv[1:6]
    results = [json.loads(l) for l in Path(results_path).read_text().splitlines() if l.strip()]
    work = Path(work)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True).stdout.strip()
    parts = [
        "## Language models\n",
        f"`benches/llm.sh` at {commit}: SmolLM2-135M-Instruct (Q4_1 GGUF), {threads} threads on "
        f"each side, one server at a time, machine {busy}% busy before the run. Each request "
        "streams 128 tokens (forced with `ignore_eos`) at temperature 0 through "
        "`/v1/completions`, closed loop. llama-server: `--parallel 16 --cont-batching -c 18432` "
        "(its context split into 16 slots of 1,152 positions). Nereid: `kv_cache_tokens` 24,576, "
        "`max_sequences` 64, `tokens_per_step` 512.\n",
        "### Prompts of 50 to 1,000 tokens\n",
        "llama-server:\n", HEADER,
        *[line(r) for r in rows(results, "llama-server", "default", "mixed")],
        "\nNereid:\n", HEADER,
        *[line(r) for r in rows(results, "nereid", "default", "mixed")],
        f"\nNereid's preemptions over these runs: {preemptions(work / 'metrics-default.txt')}.\n",
        "### A 500-token system prompt shared by every request (16 streams)\n", HEADER,
        *side_by_side(results, "shared"),
        f"\nNereid's prefix cache, over the default run's workloads: "
        f"{hit_rate(work / 'metrics-default.txt')} found in the cache.\n",
        "### A quarter of the prompts about 2,000 tokens (16 streams)\n", HEADER,
        *side_by_side(results, "long"),
        "\n### A KV cache of a quarter of what 64 streams need (Nereid, 10,496 positions)\n",
        HEADER, *[line(r) for r in rows(results, "nereid", "tight", "mixed")],
        f"\nPreemptions: {preemptions(work / 'metrics-tight.txt')}.\n",
    ]
    body = "\n".join(parts) + "\n"
    write_section(Path(out), BEGIN, END, body)
    # docs/llm.md carries the same tables, a level down.
    guide = Path(out).parent / "llm.md"
    if guide.is_file():
        write_section(guide, BEGIN, END, body.replace("\n### ", "\n#### ").replace("## Language models\n", ""))


if __name__ == "__main__":
    main()

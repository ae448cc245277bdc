"""The tables of benches/python_backend.sh: medians over its rounds of each
server's throughput, p50 and CPU per inference per model, protocol and
concurrency, and the ratios the aims are about (nereid over Triton: its
throughput, its p50, its CPU per inference; and its time to ready). When
the run also measured an earlier nereid ("before"), a second table sets
it beside this one.

    python3 benches/python_report.py RESULTS_TSV
"""

import statistics
import sys
from collections import defaultdict


def main(path):
    rows = defaultdict(list)  # (server, model, protocol, c) -> [(throughput, p50, cpu)]
    ready = defaultdict(list)
    with open(path) as results:
        for line in results:
            server, model, protocol, c, first, second, cpu = line.rstrip("\n").split("\t")
            if model == "ready":
                ready[server].append(float(first))
            else:
                rows[server, model, protocol, c].append(
                    (float(first), float(second), None if cpu == "-" else float(cpu)))

    def median(server, key, index):
        values = [row[index] for row in rows.get((server, *key), []) if row[index] is not None]
        return statistics.median(values) if values else None

    def fmt(value):
        return "-" if value is None else f"{value:,.0f}"

    def ratio(a, b):
        return f"{a / b:.2f}×" if a and b else "-"

    keys = sorted({key[1:] for key in rows})
    print("| model | protocol | concurrency | nereid infer/s | Triton infer/s | ratio "
          "| nereid p50 µs | Triton p50 µs | ratio | nereid CPU µs/infer | Triton CPU µs/infer | ratio |")
    print("| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for key in keys:
        cells = [(median("nereid", key, i), median("triton", key, i)) for i in range(3)]
        print(f"| {key[0]} | {key[1]} | {key[2]} | "
              + " | ".join(f"{fmt(n)} | {fmt(t)} | {ratio(n, t)}" for n, t in cells) + " |")
    n_ready = statistics.median(ready["nereid"]) if ready["nereid"] else None
    t_ready = statistics.median(ready["triton"]) if ready["triton"] else None
    if n_ready and t_ready:
        print(f"\nTime to ready (median): nereid {n_ready:,.0f} ms, Triton {t_ready:,.0f} ms "
              f"({n_ready / t_ready:.2f}×).")
    if not any(key[0] == "before" for key in rows):
        return
    print("\nBefore and after, on the same run (nereid \"before\" is the earlier binary):\n")
    print("| model | protocol | concurrency | before infer/s | after infer/s | ratio "
          "| before p50 µs | after p50 µs | ratio | before CPU µs/infer | after CPU µs/infer | ratio |")
    print("| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for key in keys:
        cells = [(median("before", key, i), median("nereid", key, i)) for i in range(3)]
        print(f"| {key[0]} | {key[1]} | {key[2]} | "
              + " | ".join(f"{fmt(b)} | {fmt(a)} | {ratio(a, b)}" for b, a in cells) + " |")


if __name__ == "__main__":
    main(sys.argv[1])

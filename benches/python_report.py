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

    def table(left, right, names, later_first=False):
        """Each cell's medians for servers `left` and `right`, headed
        `names`, with their ratio (`right` over `left` when `later_first`)."""
        columns = [f"{names[0]} infer/s | {names[1]} infer/s | ratio",
                   f"{names[0]} p50 µs | {names[1]} p50 µs | ratio",
                   f"{names[0]} CPU µs/infer | {names[1]} CPU µs/infer | ratio"]
        print("| model | protocol | concurrency | " + " | ".join(columns) + " |")
        print("| --- | --- | --- |" + " ---: |" * 9)
        for key in keys:
            cells = [(median(left, key, i), median(right, key, i)) for i in range(3)]
            print(f"| {key[0]} | {key[1]} | {key[2]} | "
                  + " | ".join(f"{fmt(a)} | {fmt(b)} | {ratio(b, a) if later_first else ratio(a, b)}"
                               for a, b in cells) + " |")

    table("nereid", "triton", ("nereid", "Triton"))
    n_ready = statistics.median(ready["nereid"]) if ready["nereid"] else None
    t_ready = statistics.median(ready["triton"]) if ready["triton"] else None
    if n_ready and t_ready:
        print(f"\nTime to ready (median): nereid {n_ready:,.0f} ms, Triton {t_ready:,.0f} ms "
              f"({n_ready / t_ready:.2f}×).")
    if any(key[0] == "before" for key in rows):
        print("\nBefore and after, on the same run (nereid \"before\" is the earlier binary):\n")
        table("before", "nereid", ("before", "after"), later_first=True)

if __name__ == "__main__":
    main(sys.argv[1])

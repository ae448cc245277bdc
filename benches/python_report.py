"""The table of benches/python_backend.sh: medians over its rounds of each
server's throughput and p50 per model, protocol and concurrency, and the
ratios the issue's aims are about (nereid's throughput over Triton's, its
p50 over Triton's, its time to ready over Triton's).

    python3 benches/python_report.py RESULTS_TSV
"""

import statistics
import sys
from collections import defaultdict


def main(path):
    rows = defaultdict(list)  # (server, model, protocol, c) -> [(throughput, p50)]
    ready = defaultdict(list)
    with open(path) as results:
        for line in results:
            server, model, protocol, c, first, second = line.rstrip("\n").split("\t")
            if model == "ready":
                ready[server].append(float(first))
            else:
                rows[server, model, protocol, c].append((float(first), float(second)))

    def median(server, key, index):
        values = [row[index] for row in rows.get((server, *key), [])]
        return statistics.median(values) if values else None

    keys = sorted({key[1:] for key in rows})
    print("| model | protocol | concurrency | nereid infer/s | Triton infer/s | ratio | nereid p50 µs | Triton p50 µs | ratio |")
    print("| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    for key in keys:
        n_tp, t_tp = median("nereid", key, 0), median("triton", key, 0)
        n_p50, t_p50 = median("nereid", key, 1), median("triton", key, 1)
        tp_ratio = f"{n_tp / t_tp:.2f}×" if n_tp and t_tp else "-"
        p50_ratio = f"{n_p50 / t_p50:.2f}×" if n_p50 and t_p50 else "-"
        fmt = lambda v: "-" if v is None else f"{v:,.0f}"
        print(f"| {key[0]} | {key[1]} | {key[2]} | {fmt(n_tp)} | {fmt(t_tp)} | {tp_ratio} "
              f"| {fmt(n_p50)} | {fmt(t_p50)} | {p50_ratio} |")
    n_ready = statistics.median(ready["nereid"]) if ready["nereid"] else None
    t_ready = statistics.median(ready["triton"]) if ready["triton"] else None
    if n_ready and t_ready:
        print(f"\nTime to ready (median): nereid {n_ready:,.0f} ms, Triton {t_ready:,.0f} ms "
              f"({n_ready / t_ready:.2f}×).")


if __name__ == "__main__":
    main(sys.argv[1])

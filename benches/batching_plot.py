"""Draws docs/batching.png for benches/batching_report.py: throughput and p50
latency against concurrency, one line per series, with horizontal reference
lines (raw ONNX Runtime's best, the aim, the client's CPU ceiling) on the
throughput side. Knows nothing of the results folder."""

from dataclasses import dataclass, field


@dataclass
class Series:
    """One line on both sides; style holds matplotlib keywords, "fmt" the
    format string."""

    label: str
    concurrencies: list
    throughput: list
    p50_us: list
    style: dict = field(default_factory=dict)


@dataclass
class Level:
    """A horizontal line on the throughput side."""

    value: float
    label: str
    style: dict = field(default_factory=dict)


def plot(path, title, concurrencies, series, levels):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 6.6))
    fig.suptitle(title, fontsize=10)
    for s in series:
        style = dict(s.style)
        fmt = style.pop("fmt", "-")
        left.plot(s.concurrencies, s.throughput, fmt, label=s.label, **style)
        right.plot(s.concurrencies, [p / 1000 for p in s.p50_us], fmt, label=s.label, **style)
    for level in levels:
        left.axhline(level.value, label=level.label, **level.style)
    if levels:
        left.set_ylim(0, 1.12 * max(level.value for level in levels))
    for ax in (left, right):
        ax.set_xscale("log", base=2)
        ax.set_xticks(concurrencies)
        ax.set_xticklabels([str(c) for c in concurrencies])
        ax.set_xlabel("perf_analyzer concurrency")
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.14), ncol=2)
    left.set_ylabel("inferences / s")
    left.set_title("Throughput")
    right.set_yscale("log")
    right.set_ylabel("p50 latency (ms)")
    right.set_title("p50 latency (client side)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)

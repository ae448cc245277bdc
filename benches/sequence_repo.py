"""Writes the sequence benchmark's repository: the accumulator of
tests/python/test_sequence.py (implicit state, START/END/READY/CORRID
controls) as `acc_direct` and `acc_oldest`, each with `max_batch_size` 32
and two CPU instances, so 64 sequence slots (direct) or candidate
sequences (oldest) in all.

    sequence_repo.py REPO
"""

from __future__ import annotations

import sys
from pathlib import Path

import onnx

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "python"))
from test_sequence import CONFIG, accumulator  # noqa: E402

STRATEGIES = {
    "acc_direct": "direct { }",
    "acc_oldest": ("oldest { max_candidate_sequences: 32 preferred_batch_size: [ 16, 32 ] "
                   "max_queue_delay_microseconds: 1000 }"),
}


def main() -> None:
    repo = Path(sys.argv[1])
    for name, strategy in STRATEGIES.items():
        (repo / name / "1").mkdir(parents=True, exist_ok=True)
        onnx.save(accumulator(), repo / name / "1" / "model.onnx")
        (repo / name / "config.pbtxt").write_text(CONFIG.format(
            name=name, max_batch=32, instances=2, idle_us=5_000_000,
            corrid_type="TYPE_UINT64", strategy=strategy))


if __name__ == "__main__":
    main()

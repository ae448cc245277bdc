"""Writes the batch benchmark's input: N rows of 256 seeded FP32 values in a
Parquet file, one FixedSizeList column named INPUT, row groups of 65,536.

    batch_data.py OUT.parquet ROWS
"""

from __future__ import annotations

import sys

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

WIDTH = 256
GROUP = 65_536


def main() -> None:
    out, rows = sys.argv[1], int(sys.argv[2])
    rng = np.random.default_rng(0)
    schema = pa.schema([("INPUT", pa.list_(pa.float32(), WIDTH))])
    with pq.ParquetWriter(out, schema) as writer:
        for start in range(0, rows, GROUP):
            n = min(GROUP, rows - start)
            flat = rng.standard_normal(n * WIDTH, dtype=np.float32)
            column = pa.FixedSizeListArray.from_arrays(pa.array(flat), WIDTH)
            writer.write_table(pa.table({"INPUT": column}, schema=schema))


if __name__ == "__main__":
    main()

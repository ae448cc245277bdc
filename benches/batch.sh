#!/usr/bin/env bash
# nereid batch against ONNX Runtime called in-process: rows per second of
# `nereid batch` over Parquet files (256 FP32 per row, a FixedSizeList
# column) beside the raw_ort example at batch 64 with the same threads.
#
#   1. model_repository/mlp (256-1024-1024-16) over a 1,000,000-row file;
#   2. mlp_large (256-4096-4096-4096-16, made by scripts/make_models.py
#      --bench-mlp) over a BATCH_LARGE_ROWS-row file: a million rows of it
#      take about eight minutes a run on 2 cores, so a subset is measured.
#
# Both models batch dynamically up to 64 (their configs as committed or
# made). Runs alternate raw_ort and nereid batch, BATCH_RUNS times each; the
# report takes medians. Writes the "Batch jobs" section of docs/benchmarks.md.
#
#   benches/batch.sh
#
# Environment:
#   BATCH_ROWS          rows of the mlp file (1000000)
#   BATCH_LARGE_ROWS    rows of the mlp_large file (50000)
#   BATCH_RUNS          runs of each (3)
#   BATCH_RAW_SECONDS   raw_ort seconds per run (5 for mlp, 10 for mlp_large)
#   BENCH_OUT           the report (docs/benchmarks.md)
#   NEREID_BIN          the nereid binary (target/release/nereid; built if missing)
#   RAW_ORT_BIN         the raw_ort example (target/release/examples/raw_ort)
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD

rows=${BATCH_ROWS:-1000000}
large_rows=${BATCH_LARGE_ROWS:-50000}
runs=${BATCH_RUNS:-3}
out=${BENCH_OUT:-docs/benchmarks.md}
nereid_bin=${NEREID_BIN:-target/release/nereid}
raw_bin=${RAW_ORT_BIN:-target/release/examples/raw_ort}

BENCH_TAG=batch
# shellcheck source=benches/lib.sh
source benches/lib.sh

work=$(mktemp -d "${TMPDIR:-/tmp}/nereid-batch-bench.XXXXXX")
results=$work/results
mkdir -p "$results"
trap 'rm -rf "$work"' EXIT

# pyarrow writes the input files (scripts/requirements.txt has it).
.venv/bin/python -c 'import pyarrow' 2>/dev/null || scripts/setup-python.sh
use_venv_onnxruntime
build_nereid_if_missing
build_raw_ort_if_missing

models=$work/models
mkdir -p "$models"
cp -r model_repository/mlp "$models/mlp"
log "making mlp_large in $models"
.venv/bin/python scripts/make_models.py --bench-mlp "$models" >/dev/null

log "writing the input files ($rows and $large_rows rows of 256 FP32)"
.venv/bin/python benches/batch_data.py "$work/mlp.parquet" "$rows"
.venv/bin/python benches/batch_data.py "$work/mlp_large.parquet" "$large_rows"

busy=$(background_busy_pct)
((busy < 25)) || log "warning: the machine is already ${busy}% busy; numbers will be skewed"
{
  echo "busy_before_pct=$busy"
  echo "load_before=$(cut -d' ' -f1 /proc/loadavg)"
} >"$results/run.env"

raw() {
  local model=$1 run=$2 seconds=$3
  "$raw_bin" --model "$models/$model/1/model.onnx" --batch-sizes 64 --seconds "$seconds" \
    --csv "$results/raw_${model}_$run.csv" >"$results/raw_${model}_$run.log"
  log "raw_ort $model run $run: $(awk -F, 'NR == 2 { print $5 }' "$results/raw_${model}_$run.csv") rows/s"
}

job() {
  local model=$1 run=$2 t0 t1
  rm -rf "$work/out_$model.parquet" "$work/out_$model.parquet.parts"
  t0=$(now_ms)
  "$nereid_bin" batch --model-repository "$models" --model "$model" \
    --input "$work/$model.parquet" --output "$work/out_$model.parquet" --quiet \
    2>"$results/batch_${model}_$run.log"
  t1=$(now_ms)
  echo "wall_ms=$((t1 - t0))" >"$results/batch_${model}_$run.env"
  log "nereid batch $model run $run: $(tail -n 1 "$results/batch_${model}_$run.log")"
}

for run in $(seq 1 "$runs"); do
  raw mlp "$run" "${BATCH_RAW_SECONDS:-5}"
  job mlp "$run"
  raw mlp_large "$run" "${BATCH_RAW_SECONDS:-10}"
  job mlp_large "$run"
done

echo "load_after=$(cut -d' ' -f1 /proc/loadavg)" >>"$results/run.env"
.venv/bin/python benches/batch_report.py --results "$results" --out "$out" \
  --rows "$rows" --large-rows "$large_rows" --runs "$runs" --nereid-bin "$nereid_bin"
log "wrote the batch section of $out"

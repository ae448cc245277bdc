#!/usr/bin/env bash
# Time to ready for 20 models from moto's S3 server against the same 20
# models on local disk (tiny models and 5 MB ones), several starts each.
# Writes the "Cloud repository: time to ready" section of
# docs/benchmarks.md (benches/cloud_repository.py).
#
#   benches/cloud_repository.sh   # after a release build
#
# Environment: NEREID_BIN (target/release/nereid), CLOUD_RUNS (starts per
# cell, 5), BENCH_OUT (docs/benchmarks.md).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup-python.sh
scripts/setup-cloud-test.sh
ORT_DYLIB_PATH=$(scripts/ort-path.sh)
export ORT_DYLIB_PATH
.venv/bin/python benches/cloud_repository.py "${NEREID_BIN:-target/release/nereid}" \
  "${BENCH_OUT:-docs/benchmarks.md}" "${CLOUD_RUNS:-5}"

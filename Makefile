# The two commands a user needs: `make run` and `make test`. Every setup step
# they depend on lives here or in scripts/, so a fresh machine needs nothing
# done by hand.

SHELL := /bin/bash
CARGO ?= cargo
VENV := .venv
PYTHON := $(VENV)/bin/python
# `make run GPU=1` serves with ONNX Runtime's CUDA build (onnxruntime-gpu)
# and puts the CUDA libraries from PyPI on the loader's path; with TORCH=1
# too, libtorch's CUDA libraries as well (scripts/setup-*-gpu/cuda.sh).
GPU ?=
ORT_DYLIB_PATH = $(shell $(if $(GPU),scripts/setup-ort-gpu.sh,scripts/ort-path.sh))
export ORT_DYLIB_PATH
CUDA_LIBRARY_PATH = $(if $(GPU),$(shell scripts/cuda-library-path.sh),)
TARGET_DIR := $(or $(CARGO_TARGET_DIR),target)
# libtorch 2.13 for the TorchScript backend; scripts/setup-libtorch.sh puts
# it here (about 1.25 GB, downloaded once and kept).
LIBTORCH := $(CURDIR)/.tools/libtorch/torch
export LIBTORCH
# `make run TORCH=1` builds the TorchScript backend in and also serves
# model_repository_torch/. Tests always build it.
TORCH ?=
RUN_FEATURES := $(if $(TORCH),--features nereid-server/torch,)
TEST_FEATURES := --features nereid-server/torch
# `make run TF=1` installs TensorFlow's C API (the tensorflow-cpu wheel's two
# libraries, in .tools/tensorflow) and points the server at it, so
# SavedModels serve; the SavedModel backend itself is always built in.
TF ?=
TF_LIBRARY = $(if $(TF),--tensorflow-library-dir=$(shell scripts/setup-tensorflow.sh),)
RUN_REPOSITORIES := --model-repository model_repository $(if $(TORCH),--model-repository model_repository_torch,)
DEFAULT_REPOSITORY := $(if $(findstring --model-repository,$(ARGS)),,$(RUN_REPOSITORIES))
# Python models' workers run on the venv `make run` sets up (it has numpy).
PYTHON_BACKEND := $(if $(findstring python-path,$(ARGS)),,--backend-config=python,python-path=$(CURDIR)/$(PYTHON))

.PHONY: run test setup setup-test setup-torch setup-tensorflow setup-gpu gpu-check release build models torch-models lint fmt unit-test python-test perf-smoke bench fuzz clean

## Serve model_repository/ on HTTP 8000, gRPC 8001, metrics 8002
## (TORCH=1: with TorchScript support, and model_repository_torch/ too;
## TF=1: with TensorFlow's C API for SavedModels;
## GPU=1: with ONNX Runtime's and, with TORCH=1, libtorch's CUDA libraries).
run: setup $(if $(TORCH),setup-torch,) $(if $(GPU),setup-gpu,) release
	LD_LIBRARY_PATH="$(CUDA_LIBRARY_PATH)$${LD_LIBRARY_PATH:+:$$LD_LIBRARY_PATH}" \
		$(TARGET_DIR)/release/nereid $(DEFAULT_REPOSITORY) $(PYTHON_BACKEND) $(TF_LIBRARY) $(ARGS)

## Set up what the tests need and run them all.
test: setup-test lint unit-test python-test perf-smoke

setup:
	scripts/setup-python.sh
	scripts/setup-llm.sh >/dev/null

setup-test: setup setup-torch setup-tensorflow
	scripts/setup-perf-analyzer.sh
	scripts/setup-prometheus.sh
	scripts/setup-redis.sh
	scripts/setup-cloud-test.sh
	scripts/setup-tansu.sh >/dev/null
	scripts/setup-helm.sh >/dev/null
	scripts/setup-kcat.sh

setup-torch: setup
	scripts/setup-libtorch.sh >/dev/null

## TensorFlow's C API in .tools/tensorflow, and a tensorflow-cpu venv in
## .tools/tf-venv that the tests write SavedModels with (one 270 MB download).
setup-tensorflow: setup
	scripts/setup-tensorflow.sh >/dev/null
	scripts/setup-tensorflow-python.sh >/dev/null

setup-gpu: setup
	scripts/setup-ort-gpu.sh >/dev/null
	$(if $(TORCH),scripts/setup-libtorch-cuda.sh,)

release:
	$(CARGO) build --release --bin nereid $(RUN_FEATURES)

build: setup-torch
	$(CARGO) build --bin nereid $(TEST_FEATURES)

models: setup
	$(PYTHON) scripts/make_models.py

## Regenerates the committed TorchScript models (needs the full torch, several GB).
torch-models: models
	$$(scripts/setup-torch-python.sh) scripts/make_torch_models.py

lint: setup-torch
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --workspace --all-targets $(TEST_FEATURES) -- -D warnings

unit-test: setup-torch
	$(CARGO) test --workspace $(TEST_FEATURES)

python-test: build
	NEREID_BIN=$(TARGET_DIR)/debug/nereid $(PYTHON) -m pytest -q tests/python
	$(PYTHON) -m pytest -q crates/nereid-backend-python/python/tests

perf-smoke: build
	NEREID_BIN=$(TARGET_DIR)/debug/nereid tests/perf_smoke.sh

bench: setup-test release
	benches/run.sh
	benches/ensemble.sh
	benches/protocol_extensions.sh
	benches/tls.sh
	benches/sequence.sh
	benches/python_backend.sh
	benches/python_profile.sh
	benches/decoupled.sh
	STREAM_MODEL=stream_paced STREAM_REQUESTS=5 benches/decoupled.sh
	benches/cache.sh
	benches/batch.sh
	benches/cloud_repository.sh
	benches/kafka.sh
	benches/instructions.sh
	benches/tensorflow.sh
	benches/many_models.sh
	benches/llm.sh
	@if [ -n "$$TRITON_BACKEND_DIR" ]; then benches/latency_target.sh; \
	else echo "benches/latency_target.sh skipped: it needs TRITON_BACKEND_DIR (Triton's native ONNX Runtime backend)"; fi

## Runs every fuzz target for FUZZ_SECONDS each (nightly, cargo-fuzz);
## crashes land in fuzz/artifacts/<target>/. Not part of `make test`, which
## replays fuzz/seeds/ and fuzz/regressions/<target>/ instead (copy a
## crash there once it is fixed; the folder is made with the first one).
FUZZ_SECONDS ?= 60
FUZZ_TARGETS := http_infer_body json_tensor_data bytes_framing grpc_infer_request config_pbtxt load_parameters
fuzz:
	command -v cargo-fuzz >/dev/null || $(CARGO) install cargo-fuzz
	cd fuzz && for t in $(FUZZ_TARGETS); do \
		mkdir -p corpus/$$t && \
		$(CARGO) +nightly fuzz run $$t corpus/$$t seeds/$$t -- \
			-max_total_time=$(FUZZ_SECONDS) -timeout=10 -rss_limit_mb=2048 || exit 1; \
	done

fmt:
	$(CARGO) fmt --all

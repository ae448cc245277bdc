# The two commands a user needs: `make run` and `make test`. Every setup step
# they depend on lives here or in scripts/, so a fresh machine needs nothing
# done by hand.

SHELL := /bin/bash
CARGO ?= cargo
VENV := .venv
PYTHON := $(VENV)/bin/python
ORT_DYLIB_PATH = $(shell scripts/ort-path.sh)
export ORT_DYLIB_PATH
TARGET_DIR := $(or $(CARGO_TARGET_DIR),target)
DEFAULT_REPOSITORY := $(if $(findstring --model-repository,$(ARGS)),,--model-repository model_repository)

.PHONY: run test setup setup-test release build models lint fmt unit-test python-test perf-smoke bench clean

## Serve model_repository/ on HTTP 8000, gRPC 8001, metrics 8002.
run: setup release
	$(TARGET_DIR)/release/nereid $(DEFAULT_REPOSITORY) $(ARGS)

## Set up what the tests need and run them all.
test: setup-test lint unit-test python-test perf-smoke

setup:
	scripts/setup-python.sh

setup-test: setup
	scripts/setup-perf-analyzer.sh

release:
	$(CARGO) build --release --bin nereid

build:
	$(CARGO) build --bin nereid

models: setup
	$(PYTHON) scripts/make_models.py

lint:
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --workspace --all-targets -- -D warnings

unit-test:
	$(CARGO) test --workspace

python-test: build
	NEREID_BIN=$(TARGET_DIR)/debug/nereid $(PYTHON) -m pytest -q tests/python

perf-smoke: build
	NEREID_BIN=$(TARGET_DIR)/debug/nereid tests/perf_smoke.sh

bench: setup-test release
	benches/run.sh
	benches/ensemble.sh

fmt:
	$(CARGO) fmt --all

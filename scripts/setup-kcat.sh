#!/usr/bin/env bash
# Installs Debian's kcat (only when missing): docs/streaming.md produces and
# reads records with it, and tests/python/test_docs.py runs those commands
# against the tests' tansu broker.
set -euo pipefail
if command -v kcat >/dev/null 2>&1; then exit 0; fi
if ! apt-get install -y kcat; then
  apt-get update && apt-get install -y kcat
fi

#!/usr/bin/env bash
# Installs Debian's redis-server (only when missing): the tests and the
# cache benchmark start their own on a free loopback port, with no
# persistence, for the Redis response cache (--cache-config redis,...).
set -euo pipefail
if command -v redis-server >/dev/null 2>&1; then exit 0; fi
if ! apt-get install -y redis-server; then
  apt-get update && apt-get install -y redis-server
fi

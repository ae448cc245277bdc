#!/usr/bin/env bash
# Installs Debian's Prometheus server for tests/python/test_prometheus.py
# (which starts its own on a loopback port), only when it is missing.
# The package's own service is neither wanted nor started: the tests run
# the binary with their own configuration and data folder.
set -euo pipefail
if command -v prometheus >/dev/null; then exit 0; fi
export DEBIAN_FRONTEND=noninteractive
# policy-rc.d answers 101 so that the package's postinst leaves the
# service stopped; an existing policy is kept.
policy=/usr/sbin/policy-rc.d
made_policy=
if [ ! -e "$policy" ]; then
  printf '#!/bin/sh\nexit 101\n' >"$policy" && chmod +x "$policy" && made_policy=1
fi
trap '[ -z "$made_policy" ] || rm -f "$policy"' EXIT
if ! apt-get install -y --no-install-recommends prometheus; then
  apt-get update && apt-get install -y --no-install-recommends prometheus
fi
command -v prometheus >/dev/null

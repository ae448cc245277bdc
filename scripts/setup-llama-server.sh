#!/usr/bin/env bash
# llama.cpp's own OpenAI-compatible server (llama-server), the anchor of the
# language-model benchmark (benches/llm.sh): built once into
# .tools/llama-server/ from the llama.cpp sources that PyPI's
# llama-cpp-python sdist vendors (pip download, nothing installed), with the
# same CPU features as Nereid's llama.cpp (.cargo/config.toml: AVX2, FMA,
# F16C; AMX off). Needs CMake and a C++ compiler (scripts/setup-llm.sh).
# Prints the binary's path.
set -euo pipefail
cd "$(dirname "$0")/.."
version=0.3.36
dir=$PWD/.tools/llama-server
bin=$dir/bin/llama-server
if [ -x "$bin" ]; then echo "$bin"; exit 0; fi
scripts/setup-llm.sh >/dev/null
mkdir -p "$dir/src"
if [ ! -f "$dir/src/llama_cpp_python-$version.tar.gz" ]; then
  python3 -m pip download -q --no-deps --no-binary :all: "llama-cpp-python==$version" -d "$dir/src" >&2
fi
tar -xzf "$dir/src/llama_cpp_python-$version.tar.gz" -C "$dir/src"
llama=$dir/src/llama_cpp_python-$version/vendor/llama.cpp
cmake -S "$llama" -B "$dir/build" -DCMAKE_BUILD_TYPE=Release -DLLAMA_CURL=OFF \
  -DLLAMA_BUILD_SERVER=ON -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
  -DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON \
  -DGGML_BMI2=ON -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF >&2
cmake --build "$dir/build" --target llama-server -j "$(nproc)" >&2
mkdir -p "$dir/bin"
cp "$dir/build/bin/llama-server" "$bin"
rm -rf "$dir/src/llama_cpp_python-$version"
echo "$bin"

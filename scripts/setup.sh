#!/usr/bin/env bash
# Installs what vrambench needs from Debian's packages (when missing), then configures and builds it
# into build/. Idempotent: a second run only rebuilds what changed.
# Usage: scripts/setup.sh [extra cmake arguments, e.g. -DVRAMBENCH_CUDA=OFF -DCMAKE_CUDA_ARCHITECTURES=90]
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(cmake ninja-build g++ git libcli11-dev libfmt-dev nlohmann-json3-dev libgtest-dev
          libbenchmark-dev)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}" >&2
  sudo=""
  if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# The CUDA toolkit is not a Debian package here: use the one in /usr/local/cuda when present.
if [ -z "${CUDACXX:-}" ] && ! command -v nvcc >/dev/null 2>&1 && [ -x /usr/local/cuda/bin/nvcc ]; then
  export CUDACXX=/usr/local/cuda/bin/nvcc
fi

if [ ! -f build/CMakeCache.txt ]; then
  cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release "$@" >/dev/null
elif [ $# -gt 0 ]; then
  cmake -S . -B build "$@" >/dev/null
fi
cmake --build build -j "$(nproc)"

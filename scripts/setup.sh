#!/usr/bin/env bash
# Installs what vrambench needs from Debian's packages (when missing), fetches cudnn-frontend's
# headers into .deps/ when the CUDA device is built, makes build/venv with what the Python module
# and its tests need from PyPI (python/requirements-dev.txt), then configures and builds it all
# into build/. Idempotent: a second run only rebuilds what changed.
# Usage: scripts/setup.sh [extra cmake arguments, e.g. -DVRAMBENCH_CUDA=OFF -DCMAKE_CUDA_ARCHITECTURES=90
#        -DVRAMBENCH_PYTHON=OFF]
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

# cudnn-frontend (cuDNN's header-only C++ graph API, MIT) is not a Debian package: its headers come
# from one pinned PyPI wheel (the headers are the same in every wheel of a version; the platform
# flags only make pip pick the same file on any machine), checked by sha256, unpacked into .deps/.
# Only the CUDA device needs it.
fe_version=1.32.0
fe_wheel=nvidia_cudnn_frontend-${fe_version}-cp312-cp312-manylinux_2_27_x86_64.manylinux_2_28_x86_64.whl
fe_sha256=8b354a8e550c083eb247f1eb39a7d69a4a269075f5a01e4fcbd2531680b17239
fe_dir=.deps/cudnn-frontend-${fe_version}
want_cuda=1
for arg in "$@"; do
  case "$arg" in -DVRAMBENCH_CUDA=OFF | -DVRAMBENCH_CUDA:STRING=OFF) want_cuda=0 ;; esac
done
if [ "$want_cuda" = 1 ] && { [ -n "${CUDACXX:-}" ] || command -v nvcc >/dev/null 2>&1; } &&
   [ ! -f "$fe_dir/include/cudnn_frontend.h" ]; then
  if ! python3 -m pip --version >/dev/null 2>&1; then
    echo "setup: installing python3-pip (to fetch cudnn-frontend)" >&2
    sudo=""
    if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends python3-pip >/dev/null
  fi
  echo "setup: fetching cudnn-frontend ${fe_version} into ${fe_dir}" >&2
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  python3 -m pip download --quiet --no-deps --only-binary=:all: --python-version 3.12 \
    --implementation cp --platform manylinux_2_28_x86_64 --dest "$tmp" \
    "nvidia-cudnn-frontend==${fe_version}"
  if ! echo "${fe_sha256}  ${tmp}/${fe_wheel}" | sha256sum --check --quiet; then
    echo "setup: ${fe_wheel} does not have the expected sha256 ${fe_sha256}" >&2
    exit 1
  fi
  # Unpack include/ next to its final place, then move it there in one step.
  mkdir -p .deps
  python3 - "$tmp/$fe_wheel" "$tmp/unpacked" <<'PY'
import sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as wheel:
    wheel.extractall(sys.argv[2], [n for n in wheel.namelist() if n.startswith("include/")])
PY
  rm -rf "$fe_dir.partial"
  mkdir -p "$fe_dir.partial"
  mv "$tmp/unpacked/include" "$fe_dir.partial/include"
  rm -rf "$fe_dir"
  mv "$fe_dir.partial" "$fe_dir"
fi

# The Python module (python/) is built with the interpreter of build/venv, which holds nanobind,
# pytest and pandas; -DVRAMBENCH_PYTHON=OFF leaves it out.
want_python=1
for arg in "$@"; do
  case "$arg" in -DVRAMBENCH_PYTHON=OFF | -DVRAMBENCH_PYTHON:STRING=OFF) want_python=0 ;; esac
done
python_args=()
if [ "$want_python" = 1 ]; then
  venv=build/venv
  if [ ! -x "$venv/bin/python" ]; then
    if ! python3 -c 'import ensurepip, venv' >/dev/null 2>&1 ||
       ! python3 -c 'import os, sysconfig; assert os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h"))' >/dev/null 2>&1; then
      echo "setup: installing python3-venv and python3-dev (for the Python module)" >&2
      sudo=""
      if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
      $sudo apt-get update -qq
      DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends python3-venv python3-dev >/dev/null
    fi
    mkdir -p build
    python3 -m venv "$venv"
  fi
  # Installed again only when the requirements change.
  if ! cmp -s python/requirements-dev.txt "$venv/requirements-dev.txt"; then
    echo "setup: installing python/requirements-dev.txt into $venv" >&2
    "$venv/bin/python" -m pip install --quiet --disable-pip-version-check -r python/requirements-dev.txt
    cp python/requirements-dev.txt "$venv/requirements-dev.txt"
  fi
  python_args=(-DPython_EXECUTABLE:FILEPATH="$PWD/$venv/bin/python")
fi

if [ ! -f build/CMakeCache.txt ]; then
  cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release "${python_args[@]}" "$@" >/dev/null
elif [ $# -gt 0 ] || { [ ${#python_args[@]} -gt 0 ] &&
                       ! grep -qxF "Python_EXECUTABLE:FILEPATH=$PWD/build/venv/bin/python" build/CMakeCache.txt; }; then
  cmake -S . -B build "${python_args[@]}" "$@" >/dev/null
fi
cmake --build build -j "$(nproc)"

#!/usr/bin/env bash
# Packs what a GPU machine lacks into .device/ (ignored by git through .git/info/exclude), for a
# session that is lent one: the built binaries, stripped (the default build has sm_80 and sm_90
# code), every shared library they link but the C and C++ runtime (glibc, libstdc++, libgcc_s:
# on every Linux machine) and the CUDA libraries the GPU machine's Python wheels carry (cudart,
# cuDNN; cuBLASLt is loaded at run time), so fmt and Google Benchmark go along; and bitsandbytes
# cut to its CUDA 13 and CPU libraries (the whole wheel is 43 MB; a call carries 64 MiB). The GPU
# machine's Python has torch, transformers, peft and the CUDA 13 runtime, cuBLAS and cuDNN in its
# nvidia wheels; scripts/gpu-session.sh runs there and finds them. docs/gpu-session.md says how a
# session uses both.
#
#   scripts/gpu-prepare.sh [BUILD_DIR] [--dest DIR] [--no-python]
#     BUILD_DIR     default build (scripts/setup.sh makes it)
#     --dest DIR    pack into DIR instead of .device (then nothing is added to .git/info/exclude)
#     --no-python   leave bitsandbytes out (no download): the binaries and their libraries only
set -euo pipefail
cd "$(dirname "$0")/.."
build=build
dev=.device
python_too=1
while [ $# -gt 0 ]; do
  case $1 in
    --dest) dev=${2:?--dest needs a folder}; shift 2 ;;
    --no-python) python_too=0; shift ;;
    -*) echo "gpu-prepare: unknown option $1 (--dest DIR, --no-python)" >&2; exit 2 ;;
    *) build=$1; shift ;;
  esac
done
bnb_version=0.50.2
for b in vrambench tests/vrambench_gpu_tests bench/vrambench_gpu_bench; do
  [ -x "$build/$b" ] || { echo "gpu-prepare: $build/$b is missing: build first (scripts/setup.sh)" >&2; exit 2; }
done
if [ "$dev" = .device ]; then
  mkdir -p .git/info
  grep -qx '/.device/' .git/info/exclude 2>/dev/null || echo '/.device/' >>.git/info/exclude
fi
rm -rf "$dev"
mkdir -p "$dev/bin" "$dev/lib"
for b in vrambench tests/vrambench_gpu_tests bench/vrambench_gpu_bench; do
  strip -o "$dev/bin/$(basename "$b")" "$build/$b"
done
# Every library ldd resolves for a binary, but those a bare GPU machine has (the same pattern is
# in tests/test_gpu_prepare.sh, which checks the packing).
provided='^(linux-vdso|ld-linux|libc|libm|libdl|libpthread|librt|libstdc\+\+|libgcc_s|libcudart|libcudnn[a-z_]*|libcublas|libcublasLt)\.so'
for b in "$dev"/bin/*; do
  if ldd "$b" | grep -q 'not found'; then
    echo "gpu-prepare: $b links a library this machine lacks:" >&2
    ldd "$b" | grep 'not found' >&2
    exit 1
  fi
  ldd "$b" | awk '$2 == "=>" && $3 ~ /^\// { print $1, $3 }' | while read -r name path; do
    if ! [[ $name =~ $provided ]]; then cp -L "$path" "$dev/lib/$name"; fi
  done
done
if [ "$python_too" = 0 ]; then
  du -sh "$dev"
  exit 0
fi
mkdir -p "$dev/python"

python=${PYTHON:-$HOME/venv-torch/bin/python}
command -v "$python" >/dev/null || python=python3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$python" -m pip download --quiet "bitsandbytes==$bnb_version" --no-deps -d "$tmp"
"$python" - "$tmp"/bitsandbytes-*.whl "$dev/python" <<'PY'
import re, sys, zipfile
wheel, target = sys.argv[1], sys.argv[2]
with zipfile.ZipFile(wheel) as z:
    for name in z.namelist():
        lib = re.search(r"libbitsandbytes_(\w+)\.so$", name)
        if lib is None or lib.group(1) in ("cpu", "cuda130", "cuda132"):
            z.extract(name, target)
PY
du -sh "$dev"
echo "carry: [\".device\"]; then run: bash scripts/gpu-session.sh (docs/gpu-session.md)"

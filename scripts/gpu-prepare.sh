#!/usr/bin/env bash
# Packs what a GPU machine lacks into .device/ (ignored by git through .git/info/exclude), for a
# session that is lent one: the built binaries, stripped (the default build has sm_80 and sm_90
# code), the fmt library they link, and bitsandbytes cut to its CUDA 13 and CPU libraries (the
# whole wheel is 43 MB; a call carries 64 MiB). The GPU machine's Python has torch, transformers,
# peft and the CUDA 13 runtime, cuBLAS and cuDNN in its nvidia wheels; scripts/gpu-session.sh
# runs there and finds them. docs/gpu-session.md says how a session uses both.
#
#   scripts/gpu-prepare.sh [BUILD_DIR]     (default: build; scripts/setup.sh makes it)
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
dev=.device
bnb_version=0.50.2
for b in vrambench tests/vrambench_gpu_tests bench/vrambench_gpu_bench; do
  [ -x "$build/$b" ] || { echo "gpu-prepare: $build/$b is missing: build first (scripts/setup.sh)" >&2; exit 2; }
done
mkdir -p .git/info
grep -qx '/.device/' .git/info/exclude 2>/dev/null || echo '/.device/' >>.git/info/exclude
rm -rf "$dev"
mkdir -p "$dev/bin" "$dev/lib" "$dev/python"
for b in vrambench tests/vrambench_gpu_tests bench/vrambench_gpu_bench; do
  strip -o "$dev/bin/$(basename "$b")" "$build/$b"
done
fmt=$(ldd "$build/vrambench" | awk '/libfmt/ { print $3 }')
[ -n "$fmt" ] && cp -L "$fmt" "$dev/lib/"

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

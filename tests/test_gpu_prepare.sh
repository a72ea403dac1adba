#!/usr/bin/env bash
# scripts/gpu-prepare.sh packs what a bare GPU machine lacks: with the packed lib/ first on the
# search path, every library a packed binary links resolves either there or to what that machine
# has (the C and C++ runtime; CUDA's runtime and cuDNN, which its Python wheels carry). On the
# first GPU libbenchmark was missing, and the benchmark binary did not start.
#   tests/test_gpu_prepare.sh BUILD_DIR
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:?give the build folder}
dest=$(mktemp -d)
trap 'rm -rf "$dest"' EXIT
bash scripts/gpu-prepare.sh "$build" --dest "$dest/device" --no-python >/dev/null
bare='^(linux-vdso|ld-linux|libc|libm|libdl|libpthread|librt|libstdc\+\+|libgcc_s|libcudart|libcudnn[a-z_]*)\.so'
status=0
for b in vrambench vrambench_gpu_tests vrambench_gpu_bench; do
  [ -x "$dest/device/bin/$b" ] || { echo "not packed: $b"; status=1; continue; }
  while read -r name path; do
    [[ $name =~ $bare ]] && continue
    case $path in
      "$dest/device/lib/"*) ;;
      *) echo "$b links $name from $path, which was not packed"; status=1 ;;
    esac
  done < <(LD_LIBRARY_PATH="$dest/device/lib" ldd "$dest/device/bin/$b" |
           awk '$2 == "=>" { print $1, $3 }')
done
# The two the build links today are there by name.
for lib in libfmt libbenchmark; do
  ls "$dest/device/lib/$lib".so* >/dev/null 2>&1 || { echo "$lib is not packed"; status=1; }
done
[ "$status" = 0 ] && echo "gpu-prepare packs every library the binaries link beyond a bare machine's"
exit "$status"

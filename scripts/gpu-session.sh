#!/usr/bin/env bash
# The checks of one GPU session in one command, on the GPU machine, from what
# scripts/gpu-prepare.sh packed into .device/: the kernel self-test, the GPU tests, the step's
# benchmark, the quick reference tables and what PyTorch + transformers reach
# (scripts/torch_cuda_reference.py). Each step has its own time limit and its output goes to
# $OUT (at most 8 files come back): a step that fails or runs out of time leaves the rest to run.
# The limits add up to 560 s, inside one call's 600 s.
#
#   OUT=/path bash scripts/gpu-session.sh [STEP...]     steps: smi selftest torch tests quick bench
set -u
cd "$(dirname "$0")/.."
out=${OUT:?set OUT to the folder whose files come back}
dev=$PWD/.device
[ -x "$dev/bin/vrambench" ] || { echo "gpu-session: no $dev/bin/vrambench: run scripts/gpu-prepare.sh here first and carry .device" >&2; exit 2; }
site=$(python3 -c 'import site; print(site.getsitepackages()[0])')
nvlibs=$(find "$site/nvidia" -maxdepth 3 -type d -name lib 2>/dev/null | tr '\n' ':')
export LD_LIBRARY_PATH="$dev/lib:$nvlibs${LD_LIBRARY_PATH:-}"
export PYTHONPATH="$dev/python${PYTHONPATH:+:$PYTHONPATH}"
export VRAMBENCH="$dev/bin/vrambench"

# step NAME SECONDS COMMAND...: the output in $out/NAME.txt, its exit status on the last line.
step() {
  local name=$1 limit=$2
  shift 2
  local start=$SECONDS
  timeout "$limit" "$@" >"$out/$name.txt" 2>&1
  local status=$?
  echo "exit $status after $((SECONDS - start)) s" >>"$out/$name.txt"
  echo "== $name: exit $status after $((SECONDS - start)) s"
  tail -n 4 "$out/$name.txt"
}

steps=${*:-smi selftest torch tests quick bench}
for s in $steps; do
  case $s in
    # On stdout, which comes back whole, not a file: the steps' files fill the 8 that come back.
    smi) timeout 15 nvidia-smi --query-gpu=name,memory.total,memory.used,driver_version \
      --format=csv ;;
    selftest) step selftest 60 "$dev/bin/vrambench" selftest ;;
    # Written after each configuration: a timeout keeps what was measured.
    torch)
      # The allocator's history at each bisection's boundary (scripts/allocator_trace.py reads
      # it), packed into one file: at most 8 files come back.
      step torch 195 python3 scripts/torch_cuda_reference.py --out "$out/torch_cuda_reference.json" \
        --snapshots "$out/snapshots"
      tar czf "$out/snapshots.tgz" -C "$out" snapshots 2>/dev/null && rm -rf "$out/snapshots"
      # vrambench's hf predictions beside what was measured, after it in torch.txt (seconds, and
      # no GPU: it asks the simulated profile of the card).
      timeout 5 python3 scripts/torch_cuda_compare.py "$out/torch_cuda_reference.json" \
        >>"$out/torch.txt" 2>&1 ;;
    tests) step tests 120 "$dev/bin/vrambench_gpu_tests" --gtest_brief=1 ;;
    quick)
      step quick 120 scripts/gpu-reference.sh --quick --out "$out/tables"
      tar czf "$out/quick-tables.tgz" -C "$out" tables && rm -rf "$out/tables" ;;
    # A bare number: Debian's Google Benchmark (1.7) reads it, and so do later ones (seconds).
    bench) step bench 45 "$dev/bin/vrambench_gpu_bench" --benchmark_min_time=0.2 ;;
    *) echo "gpu-session: unknown step '$s' (smi selftest torch tests quick bench)" >&2; exit 2 ;;
  esac
done

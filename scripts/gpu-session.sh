#!/usr/bin/env bash
# The checks of one GPU session in one command, on the GPU machine, from what
# scripts/gpu-prepare.sh packed into .device/: the kernel self-test, the GPU tests, the step's
# benchmark, the quick reference tables and what PyTorch + transformers reach
# (scripts/torch_cuda_reference.py). Each step has its own time limit and its output goes to
# $OUT (at most 8 files come back): a step that fails or runs out of time leaves the rest to run.
# No step runs past SESSION_SECONDS (560 by default, inside one call's 600 s): the torch step, last
# by default, gets what the others leave, and its JSON keeps every configuration it finished.
# TORCH_ARGS adds options to scripts/torch_cuda_reference.py (a second call:
# TORCH_ARGS="--only ID,ID" for the configurations the first did not reach).
#
#   OUT=/path bash scripts/gpu-session.sh [STEP...]
#     steps: smi selftest tests quick bench torch (all of them, in this order, by default)
set -u
cd "$(dirname "$0")/.." || exit 2
out=${OUT:?set OUT to the folder whose files come back}
dev=$PWD/.device
[ -x "$dev/bin/vrambench" ] || { echo "gpu-session: no $dev/bin/vrambench: run scripts/gpu-prepare.sh here first and carry .device" >&2; exit 2; }
site=$(python3 -c 'import site; print(site.getsitepackages()[0])')
nvlibs=$(find "$site/nvidia" -maxdepth 3 -type d -name lib 2>/dev/null | tr '\n' ':')
export LD_LIBRARY_PATH="$dev/lib:$nvlibs${LD_LIBRARY_PATH:-}"
export PYTHONPATH="$dev/python${PYTHONPATH:+:$PYTHONPATH}"
export VRAMBENCH="$dev/bin/vrambench"

session_seconds=${SESSION_SECONDS:-560}
# Seconds kept after the torch step's measuring: packing the snapshots, the comparison.
torch_tail=12

# step NAME SECONDS COMMAND...: the output in $out/NAME.txt, its exit status on the last line; at
# most SECONDS, and never past the session's end.
step() {
  local name=$1 limit=$2
  shift 2
  local left=$((session_seconds - SECONDS))
  ((limit > left)) && limit=$left
  if ((limit < 5)); then
    echo "== $name: not run, the session's $session_seconds s are spent"
    return
  fi
  local start=$SECONDS
  timeout "$limit" "$@" >"$out/$name.txt" 2>&1
  local status=$?
  echo "exit $status after $((SECONDS - start)) s" >>"$out/$name.txt"
  echo "== $name: exit $status after $((SECONDS - start)) s"
  tail -n 4 "$out/$name.txt"
}

steps=${*:-smi selftest tests quick bench torch}
for s in $steps; do
  case $s in
    # On stdout, which comes back whole, not a file: the steps' files fill the 8 that come back.
    smi) timeout 15 nvidia-smi --query-gpu=name,memory.total,memory.used,driver_version \
      --format=csv ;;
    selftest) step selftest 60 "$dev/bin/vrambench" selftest ;;
    # Written after each configuration: a timeout keeps what was measured.
    torch)
      # The allocator's history at each search's boundary (scripts/allocator_trace.py reads it),
      # packed into one file: at most 8 files come back.
      # shellcheck disable=SC2086  # TORCH_ARGS is words
      step torch $((session_seconds - SECONDS - torch_tail)) \
        python3 scripts/torch_cuda_reference.py --out "$out/torch_cuda_reference.json" \
        --snapshots "$out/snapshots" ${TORCH_ARGS:-}
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
    *) echo "gpu-session: unknown step '$s' (smi selftest tests quick bench torch)" >&2; exit 2 ;;
  esac
done

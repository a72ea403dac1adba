#!/usr/bin/env bash
# Builds the engine benchmarks (bench/) Release in build-bench/, whatever build/ is configured as
# (tests may build Debug there), and runs them. Host-only: GPU kernel benchmarks are
# build/bench/vrambench_gpu_bench. Speed figures are for one core: run it on an idle machine.
# Usage: scripts/bench.sh [Google Benchmark flags], e.g.
#   scripts/bench.sh --benchmark_filter='Grid'      searches/s and estimates/s of issue 13's grid
set -euo pipefail
cd "$(dirname "$0")/.."
dir=build-bench
if [ ! -f "$dir/CMakeCache.txt" ]; then
  cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=Release -DVRAMBENCH_CUDA=OFF \
    -DVRAMBENCH_TESTS=OFF >/dev/null
fi
cmake --build "$dir" -j "${JOBS:-2}" --target vrambench_bench
exec taskset -c "${BENCH_CPU:-0}" "$dir/bench/vrambench_bench" "$@"

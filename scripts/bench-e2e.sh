#!/usr/bin/env bash
# The search end to end through the command line: a 640-configuration sim grid (8 models as
# Hugging Face transformers trains them x full training and LoRA x 5 sequence lengths x bf16 and
# fp32 x eager and flash x without and with gradient checkpointing, sim:h100-80gb), CSV written to
# a temporary folder, timed on BENCH_CORES cores (default 1; the new binary gets --jobs
# BENCH_CORES, an older one runs one configuration at a time). Prints configurations per second;
# with OLD_BINARY, the same grid with that binary first, so that two builds are compared in the
# same hour on the same cores.
# Usage: [BENCH_CORES=N] scripts/bench-e2e.sh [OLD_BINARY]   (VRAMBENCH=path picks the new one)
set -euo pipefail
cd "$(dirname "$0")/.."
new=${VRAMBENCH:-build/vrambench}
[ -x "$new" ] || { echo "bench-e2e: no $new: build first (scripts/setup.sh)" >&2; exit 2; }
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
grid=(--device sim:h100-80gb --framework hf
      --sweep preset=gpt2,gpt2-medium,llama3.2-1b,qwen2.5-0.5b,qwen3-0.6b,gemma3-1b,llama3.2-3b,qwen2.5-1.5b
      --sweep seq=512..8192 --sweep dtype=bf16,fp32 --sweep attention=eager,flash
      --sweep recompute=none,full --sweep finetune=full,lora)
configurations=$((8 * 5 * 2 * 2 * 2 * 2))
cores=${BENCH_CORES:-1}
run() {  # binary, label, extra arguments
  local start end binary=$1 label=$2
  shift 2
  start=$(date +%s.%N)
  taskset -c "0-$((cores - 1))" "$binary" search "${grid[@]}" --out "$out" --name "e2e-$label" \
    --format csv --quiet "$@" >/dev/null
  end=$(date +%s.%N)
  awk -v n="$configurations" -v s="$start" -v e="$end" -v l="$label" -v b="$binary" \
    -v c="$cores" 'BEGIN { printf "%-4s %s: %d configurations in %.2f s on %d core(s), %.0f configurations/s\n", l, b, n, e - s, c, n / (e - s) }'
}
if [ $# -ge 1 ]; then run "$1" old; fi
run "$new" new --jobs "$cores"

#!/usr/bin/env bash
# The search end to end through the command line: a 640-configuration sim grid (8 models as
# Hugging Face transformers trains them x full training and LoRA x 5 sequence lengths x bf16 and
# fp32 x eager and flash x without and with gradient checkpointing, sim:h100-80gb), CSV written to a temporary folder,
# timed on one core. Prints configurations per second; with OLD, the same grid with that binary
# first, so that two builds are compared in the same hour on the same core.
# Usage: scripts/bench-e2e.sh [OLD_BINARY]     (VRAMBENCH=path/to/vrambench picks the new one)
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
run() {  # binary, label
  local start end
  start=$(date +%s.%N)
  taskset -c "${BENCH_CPU:-0}" "$1" search "${grid[@]}" --out "$out" --name "e2e-$2" --format csv \
    --quiet >/dev/null
  end=$(date +%s.%N)
  awk -v n="$configurations" -v s="$start" -v e="$end" -v l="$2" -v b="$1" \
    'BEGIN { printf "%-4s %s: %d configurations in %.2f s, %.0f configurations/s\n", l, b, n, e - s, n / (e - s) }'
}
if [ $# -ge 1 ]; then run "$1" old; fi
run "$new" new

#!/usr/bin/env bash
# Measures the reference tables of the GPU in this machine and writes them to results/<gpu>/: the
# kernel self-test, then searches on the device next to the estimate and the sim replay.
#
#   scripts/gpu-reference.sh            the self-test and every reference sweep (about an hour)
#   scripts/gpu-reference.sh --quick    the self-test and the headline sweep (a few minutes)
#   scripts/gpu-reference.sh --out DIR  write DIR/<gpu>/ instead of results/<gpu>/
#   VRAMBENCH=path/to/vrambench scripts/gpu-reference.sh    a binary built elsewhere
#
# The sweeps: gpt2 and a Llama shape (llama3-8b, no optimizer state, as when the weights are
# frozen) over seq 512..8192, bf16 and fp16, eager and flash attention, recompute none and full;
# then the fine-tuning recipes people run: LoRA and QLoRA of llama3.2-1b with paged 8-bit AdamW and
# full recompute at seq 2048 (also in --quick), with adamw/8-bit/paged over seq 512..4096, with
# ranks and targets; QLoRA of llama2-7b with paged 8-bit AdamW and full recompute (the laptop
# recipe) over seq 512..8192.
# The folder gets README.md with the provenance (GPU, driver, library versions, git commit, UTC
# time, each command and how long it took); every CSV and JSON file carries it too.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"

quick=0
out=results
while (($#)); do
  case "$1" in
    --quick) quick=1; shift ;;
    --out) out="$2"; shift 2 ;;
    -h|--help) sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "gpu-reference: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done

bin="${VRAMBENCH:-build/vrambench}"
if [ ! -x "$bin" ]; then
  scripts/setup.sh
fi

# The folder is named after the GPU: "NVIDIA H100 80GB HBM3" -> h100-80gb-hbm3.
devices="$("$bin" devices)"
gpu_name="$(printf '%s\n' "$devices" | awk -F'|' '/^\| cuda:0 /{ gsub(/^ +| +$/, "", $3); print $3; exit }')"
if [ -z "$gpu_name" ]; then
  printf '%s\n' "$devices" | head -1 >&2
  echo "gpu-reference: no GPU to measure: run it on a machine with a CUDA GPU" >&2
  exit 1
fi
slug="$(printf '%s' "$gpu_name" | tr '[:upper:]' '[:lower:]' | sed -e 's/nvidia//g' -e 's/geforce//g' \
  -e 's/[^a-z0-9]\{1,\}/-/g' -e 's/^-//' -e 's/-$//')"
folder="$out/$slug"
mkdir -p "$folder"
echo "gpu-reference: $gpu_name -> $folder" >&2

source scripts/lib/table.sh
log="$(mktemp)"
trap 'rm -f "$log"' EXIT
# run NAME ARGS...: one table, timed, its command and outcome kept for the README.
run() {
  local name=$1 start status=0
  shift
  start=$(date +%s)
  echo "gpu-reference: $name ..." >&2
  table "$folder" "$name" --device cuda "$@" >/dev/null || status=$?
  printf '| `%s` | `vrambench %s` | %s s | %s |\n' "$name" "$*" "$(($(date +%s) - start))" \
    "$([ "$status" = 0 ] && echo ok || echo "exit $status")" >>"$log"
  tail -1 "$folder/$name.md" >&2
}

# The kernels first: a table measured with wrong kernels is worth nothing.
selftest_status=0
"$bin" selftest >"$folder/selftest.md" 2>&1 || selftest_status=$?
tail -1 "$folder/selftest.md" >&2
if [ "$selftest_status" != 0 ]; then
  echo "gpu-reference: the self-test failed (see $folder/selftest.md): no table is measured" >&2
  exit 1
fi

run headline-gpt2 --sweep seq=512..8192
run qlora-llama3.2-1b --preset llama3.2-1b --sweep finetune=lora,qlora \
  --optimizer paged-adamw-8bit --recompute full --seq 2048
if [ "$quick" = 0 ]; then
  run finetune-llama3.2-1b --preset llama3.2-1b --sweep finetune=lora,qlora \
    --sweep optimizer=adamw,adamw-8bit,paged-adamw-8bit --recompute full --sweep seq=512..4096
  run finetune-llama3.2-1b-targets --preset llama3.2-1b --finetune lora --sweep lora-rank=8,64 \
    --sweep lora-targets=attn,all-linear --sweep recompute=none,full --sweep attention=eager,flash \
    --seq 2048
  run qlora-llama2-7b --preset llama2-7b --finetune qlora --lora-targets all-linear \
    --optimizer paged-adamw-8bit --recompute full --sweep seq=512..8192
  run grid-gpt2 --sweep seq=512..8192 --sweep dtype=bf16,fp16 --sweep attention=eager,flash \
    --sweep recompute=none,full
  run grid-llama3-8b-no-optimizer --preset llama3-8b --optimizer none --sweep seq=512..8192 \
    --sweep dtype=bf16,fp16 --sweep attention=eager,flash --sweep recompute=none,full
fi

{
  echo "# $gpu_name"
  echo
  echo "Measured with \`scripts/gpu-reference.sh$([ "$quick" = 1 ] && echo ' --quick')\` at" \
    "$(date -u +%Y-%m-%dT%H:%M:%SZ), vrambench $("$bin" --version | sed 's/^vrambench //')."
  echo
  printf '%s\n' "$devices" | sed -n '/^GPUs:/,/^$/p' | sed '1,2d'
  echo
  echo "The self-test: $(tail -1 "$folder/selftest.md") ([selftest.md](selftest.md))."
  echo
  echo '| table | command | took | outcome |'
  echo '|---|---|---:|---|'
  cat "$log"
  echo
  echo 'Each table: `est` is the closed-form model, `sim` the step replayed on virtual memory of'
  echo 'this card, `meas` the same step run on the card; `meas vs sim` is how far the card is from'
  echo 'the replay. See [how to read a result](../../docs/reading-results.md).'
} >"$folder/README.md"
echo "gpu-reference: wrote $folder/" >&2

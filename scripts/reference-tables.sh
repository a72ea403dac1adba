#!/usr/bin/env bash
# Regenerates the committed reference tables under results/, or under ROOT when given:
#   scripts/reference-tables.sh [ROOT]        (VRAMBENCH=path/to/vrambench picks the binary)
# The sim tables are deterministic: scripts/check-reference-tables.sh (a ctest test) regenerates
# them into a temporary folder and compares them with `vrambench compare`, failing when the model,
# the program or the allocator changes what they say; a change that moves them must regenerate and
# explain them. GPU tables (results/<gpu>/) are written the same way with --device cuda on a
# machine with a GPU.
set -euo pipefail
cd "$(dirname "$0")/.."
root=${1:-results}
bin=${VRAMBENCH:-build/vrambench}
[ -x "$bin" ] || scripts/setup.sh

source scripts/lib/table.sh

table "$root/sim-h100-80gb" headline-gpt2 --device sim:h100-80gb --framework lean --sweep seq=512..8192
table "$root/sim-h100-80gb" grid-gpt2 --device sim:h100-80gb --framework lean \
  --sweep preset=gpt2,gpt2-medium --sweep seq=512..8192 --sweep dtype=fp32,bf16 \
  --sweep attention=eager,flash --sweep recompute=none,selective,full
table "$root/sim-rtx4090" llama3-8b-no-optimizer --device sim:rtx4090 --framework lean \
  --preset llama3-8b --optimizer none --recompute full --sweep seq=512..8192 --sweep attention=eager,flash
# What a Hugging Face transformers step on PyTorch holds (--framework hf) beside the lean one: the
# headline sweep, and full training of llama3.2-1b on a 24 GB card loaded in bf16 and under
# autocast (amp-bf16), eager and sdpa attention, with and without gradient checkpointing.
table "$root/sim-h100-80gb" headline-gpt2-hf --device sim:h100-80gb --framework hf \
  --sweep seq=512..8192
table "$root/sim-rtx4090" llama3.2-1b-hf --device sim:rtx4090 --preset llama3.2-1b --framework hf \
  --sweep dtype=bf16,amp-bf16 --sweep attention=eager,flash --sweep recompute=none,full \
  --sweep seq=512,2048
# Fine-tuning as transformers + PEFT + bitsandbytes run it (--framework hf): LoRA over a bf16
# llama3-8b and QLoRA (NF4, double quantisation, prepare_model_for_kbit_training, autocast bf16)
# with the optimizers people pair with them, with and without gradient checkpointing.
table "$root/sim-rtx4090" llama3-8b-finetune-hf --device sim:rtx4090 --preset llama3-8b \
  --framework hf --lora-rank 16 --sweep finetune=lora,qlora \
  --sweep optimizer=adamw,paged-adamw-8bit --sweep recompute=none,full --sweep seq=512,2048

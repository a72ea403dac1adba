#!/usr/bin/env python3
"""What PyTorch + Hugging Face really reach on a GPU: allocated, reserved and the largest batch.

For each configuration a training loop as transformers' Trainer runs it (forward with labels,
backward, optimizer step, zero_grad; two iterations, the second measured) records
torch.cuda.max_memory_allocated(), max_memory_reserved() and what the driver reports in use
(torch.cuda.mem_get_info: the CUDA context and the libraries' workspaces included), at batch 1, 2
and 4. For some configurations it then bisects the batch until torch.OutOfMemoryError, on the card
capped with torch.cuda.set_per_process_memory_fraction (24 GiB, or the whole card), and records
the largest batch that ran and the reserved peak at it.

Models are built from their configs with random weights on the GPU (no download); a QLoRA base is
built with bitsandbytes' Linear4bit (NF4, double quantisation, bf16 compute) in place of the
block linears, as from_pretrained(quantization_config=...) stores them, then
peft.prepare_model_for_kbit_training. The result, tests/data/torch_cuda_reference.json, is what
vrambench's hf profile is compared with (results/<gpu>/pytorch-vs-vrambench.md).

Nothing in the build or the tests needs this script, torch or a GPU: the JSON is committed.
"""

import argparse
import gc
import json
import os
import sys
import time

DEFAULT_OUT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..",
                                            "tests", "data", "torch_cuda_reference.json"))
GiB = 1 << 30

EXAMPLES = """
examples:
  on the GPU machine (bitsandbytes' wheel installed first; about 5 minutes on an H100):
    python3 scripts/torch_cuda_reference.py --out $OUT/torch_cuda_reference.json
  one configuration, no bisection:
    python3 scripts/torch_cuda_reference.py --only llama3.2-1b-lora --no-bisect --out /tmp/x.json
  the code paths on the CPU with tiny models, nothing measured (no GPU needed):
    ~/venv-torch/bin/python scripts/torch_cuda_reference.py --smoke
"""

# The models, as their config.json on the Hugging Face hub give them (the fields that shape
# memory; the config classes' defaults otherwise).
MODELS = {
    "gpt2": ("GPT2Config", {}),
    "llama3.2-1b": ("LlamaConfig", {
        "hidden_size": 2048, "intermediate_size": 8192, "num_hidden_layers": 16,
        "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 64,
        "vocab_size": 128256, "tie_word_embeddings": True, "max_position_embeddings": 131072}),
    "llama3-8b": ("LlamaConfig", {
        "hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32,
        "num_attention_heads": 32, "num_key_value_heads": 8, "vocab_size": 128256,
        "tie_word_embeddings": False, "max_position_embeddings": 8192}),
    "qwen2.5-7b": ("Qwen2Config", {
        "hidden_size": 3584, "intermediate_size": 18944, "num_hidden_layers": 28,
        "num_attention_heads": 28, "num_key_value_heads": 4, "vocab_size": 152064,
        "tie_word_embeddings": False, "max_position_embeddings": 32768}),
}

# What --smoke makes of each model: two small layers, the same kind of block.
SMOKE_SHAPE = {"hidden_size": 64, "intermediate_size": 176, "num_hidden_layers": 2,
               "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
               "vocab_size": 256}
SMOKE_GPT2 = {"n_embd": 64, "n_head": 4, "n_layer": 2, "vocab_size": 256, "n_positions": 256}

# base: bf16 (the model loaded in bf16), amp-bf16 (fp32 model under torch.autocast bf16, as
# Trainer runs bf16=True), nf4 (QLoRA: 4-bit NF4 base with double quantisation, bf16 compute,
# prepare_model_for_kbit_training, autocast bf16). adapter: none, or LoRA rank r on every block
# linear (PEFT's "all-linear", alpha 2r, no dropout). bisect: the caps (GiB; 0: the whole card)
# to bisect the largest batch under. The recipes people fine-tune with come first: a run that is
# stopped early has measured them.
CONFIGS = []
GPT2_CONFIGS = []
for _base in ["bf16", "amp-bf16"]:
    for _attention in ["eager", "sdpa"]:
        for _ckpt in ["off", "on"]:
            GPT2_CONFIGS.append({
                "id": f"gpt2-{_base}-{_attention}-ckpt-{_ckpt}", "model": "gpt2", "base": _base,
                "attention": _attention, "checkpointing": _ckpt, "adapter": "none",
                "optimizer": "adamw", "seq": 1024, "batches": [1, 2, 4],
                "bisect": [24] if (_base, _attention, _ckpt) == ("bf16", "sdpa", "off") else []})
CONFIGS += [
    {"id": "llama3.2-1b-full", "model": "llama3.2-1b", "base": "bf16", "attention": "sdpa",
     "checkpointing": "off", "adapter": "none", "optimizer": "adamw", "seq": 1024,
     "batches": [1, 2, 4], "bisect": [24]},
    {"id": "llama3.2-1b-lora", "model": "llama3.2-1b", "base": "bf16", "attention": "sdpa",
     "checkpointing": "off", "adapter": "lora-r16", "optimizer": "adamw", "seq": 1024,
     "batches": [1, 2, 4], "bisect": [24]},
    {"id": "llama3-8b-qlora-s512", "model": "llama3-8b", "base": "nf4", "attention": "sdpa",
     "checkpointing": "on", "adapter": "lora-r16", "optimizer": "paged_adamw_8bit", "seq": 512,
     "batches": [1, 2, 4], "bisect": [24]},
    {"id": "llama3-8b-qlora-s2048", "model": "llama3-8b", "base": "nf4", "attention": "sdpa",
     "checkpointing": "on", "adapter": "lora-r16", "optimizer": "paged_adamw_8bit", "seq": 2048,
     "batches": [1, 2, 4], "bisect": [24, 0]},
    {"id": "qwen2.5-7b-lora-ckpt", "model": "qwen2.5-7b", "base": "bf16", "attention": "sdpa",
     "checkpointing": "on", "adapter": "lora-r16", "optimizer": "adamw", "seq": 2048,
     "batches": [1, 2, 4], "bisect": [24]},
] + GPT2_CONFIGS


def fail(message):
    print(f"torch_cuda_reference.py: {message}", file=sys.stderr)
    sys.exit(2)


try:
    import torch
    import transformers
except ImportError as e:
    if __name__ == "__main__" and ("-h" in sys.argv or "--help" in sys.argv):
        torch = None
    else:
        fail(f"{e.name or e} is not importable ({e}); on the GPU machine its Python has torch and "
             "transformers; elsewhere use a virtual environment (~/venv-torch)")


def model_config(name, smoke):
    class_name, fields = MODELS[name]
    fields = dict(fields)
    if smoke:
        fields.update(SMOKE_GPT2 if name == "gpt2" else SMOKE_SHAPE)
    cfg = getattr(transformers, class_name)(**fields)
    if name == "gpt2":
        cfg.resid_pdrop = cfg.embd_pdrop = cfg.attn_pdrop = 0.0
    return cfg


# The adapters every LoRA configuration makes (PEFT's LoraConfig), as the JSON records them.
LORA_ALPHA_PER_RANK = 2
LORA_TARGETS = "all-linear"


def lora_rank(adapter):
    return int(adapter.split("-r")[1]) if adapter.startswith("lora-r") else 0


def quantize_block_linears(model, device):
    """Every nn.Linear of the decoder blocks (not the lm head) as bitsandbytes' Linear4bit: NF4,
    double quantisation, bf16 compute. As from_pretrained(quantization_config=...) loads them: the
    16-bit weight comes from the host and is quantised as it moves to the device. All 16-bit block
    weights leave the device first, so that the allocator's segments they filled are released
    before any 4-bit weight is made."""
    import bitsandbytes as bnb
    # (module, name, in, out, host weight, host bias) of each: no reference to a device tensor.
    specs = []
    for module_name, module in list(model.named_modules()):
        for child_name, child in list(module.named_children()):
            if isinstance(child, torch.nn.Linear) and ".layers." in f".{module_name}.":
                specs.append((module, child_name, child.in_features, child.out_features,
                              child.weight.data.to("cpu"),
                              None if child.bias is None else child.bias.data.to("cpu")))
                setattr(module, child_name, None)
    child = None
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
    for module, child_name, in_features, out_features, weight, bias in specs:
        q = bnb.nn.Linear4bit(in_features, out_features, bias=bias is not None,
                              compute_dtype=torch.bfloat16, compress_statistics=True,
                              quant_type="nf4", device="meta")
        q.weight = bnb.nn.Params4bit(weight, requires_grad=False, compress_statistics=True,
                                     quant_type="nf4")
        if bias is not None:
            q.bias = torch.nn.Parameter(bias, requires_grad=False)
        setattr(module, child_name, q.to(device))
    model.is_loaded_in_4bit = True


def build(c, device, smoke):
    import peft
    torch.manual_seed(0)
    cfg = model_config(c["model"], smoke)
    dtype = torch.float32 if c["base"] == "amp-bf16" else torch.bfloat16
    kwargs = {"dtype": dtype, "attn_implementation": c["attention"]}
    ckpt = c["checkpointing"] == "on"
    if c["base"] == "nf4":
        with torch.device(device):
            model = transformers.AutoModelForCausalLM.from_config(cfg, **kwargs)
        quantize_block_linears(model, device)
        model = peft.prepare_model_for_kbit_training(
            model, use_gradient_checkpointing=ckpt,
            gradient_checkpointing_kwargs={"use_reentrant": False} if ckpt else None)
    else:
        with torch.device(device):
            model = transformers.AutoModelForCausalLM.from_config(cfg, **kwargs)
        if ckpt:
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    rank = lora_rank(c["adapter"])
    if rank:
        model = peft.get_peft_model(model, peft.LoraConfig(
            task_type="CAUSAL_LM", r=rank, lora_alpha=LORA_ALPHA_PER_RANK * rank, lora_dropout=0.0,
            target_modules=LORA_TARGETS))
    model.train()
    return model, cfg


def make_optimizer(c, model, smoke):
    params = [p for p in model.parameters() if p.requires_grad]
    if c["optimizer"] == "adamw":
        return torch.optim.AdamW(params)
    import bitsandbytes as bnb
    if c["optimizer"] == "paged_adamw_8bit":
        # Paged state lives in CUDA managed memory; the CPU smoke run takes the unpaged kind.
        return bnb.optim.AdamW8bit(params) if smoke else bnb.optim.PagedAdamW8bit(params)
    raise ValueError(c["optimizer"])


def step(c, model, optimizer, cfg, batch, device):
    ids = torch.randint(0, cfg.vocab_size, (batch, c["seq"]), device=device)
    autocast = c["base"] in ("amp-bf16", "nf4")
    with torch.autocast(device_type=device.split(":")[0], dtype=torch.bfloat16, enabled=autocast):
        loss = model(input_ids=ids, labels=ids).loss
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return float(loss)


def cuda_figures():
    torch.cuda.synchronize()
    free, total = torch.cuda.mem_get_info()
    return {"allocated_peak_bytes": torch.cuda.max_memory_allocated(),
            "reserved_peak_bytes": torch.cuda.max_memory_reserved(),
            # In use as the driver sees it, after the step: what the process reserved and what
            # CUDA, cuBLAS and cuDNN hold besides (context, workspaces, module images).
            "driver_used_bytes": total - free,
            "outside_allocator_bytes": total - free - torch.cuda.memory_reserved()}


def release():
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def out_of_memory(e):
    return isinstance(e, torch.OutOfMemoryError) or "out of memory" in str(e).lower()


def measure_rows(c, model, optimizer, cfg, device, smoke):
    """Rows at each of the configuration's batches: the second iteration's figures."""
    rows = []
    for batch in c["batches"]:
        step(c, model, optimizer, cfg, batch, device)
        if not smoke:
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats()
        start = time.perf_counter()
        loss = step(c, model, optimizer, cfg, batch, device)
        seconds = time.perf_counter() - start
        row = {"config": c["id"], "batch": batch, "loss": round(loss, 3),
               "step_seconds": round(seconds, 3)}
        if not smoke:
            row.update(cuda_figures())
        rows.append(row)
        print(f"  {c['id']} B={batch}: " + ", ".join(
            f"{k} {v / GiB:.2f} GiB" if k.endswith("_bytes") else f"{k} {v}"
            for k, v in row.items() if k not in ("config", "batch")), file=sys.stderr, flush=True)
    return rows


def fits(c, model, optimizer, cfg, batch, device, smoke, steps=2):
    """Whether `steps` training steps at `batch` run on the model as it is (its optimizer state
    made already); the reserved peak where they do. The cache is emptied before and after."""
    release()
    if not smoke:
        torch.cuda.reset_peak_memory_stats()
    ok = True
    try:
        for _ in range(steps):
            step(c, model, optimizer, cfg, batch, device)
    except (torch.OutOfMemoryError, RuntimeError) as e:
        if not out_of_memory(e):
            raise
        ok = False
    # Out of the except clause: the exception's frames no longer hold the step's tensors.
    optimizer.zero_grad(set_to_none=True)
    reserved = 0 if smoke or not ok else torch.cuda.max_memory_reserved()
    release()
    return ok, reserved


def bisect(c, model, optimizer, cfg, cap_gib, device, smoke):
    """The largest batch that runs under the cap: doubling from 1, then halving the gap."""
    if not smoke:
        total = torch.cuda.get_device_properties(0).total_memory
        fraction = 1.0 if cap_gib == 0 else min(1.0, cap_gib * GiB / total)
        torch.cuda.set_per_process_memory_fraction(fraction)
    good, reserved_at_good, bad, trials = 0, 0, None, 0
    batch = 1
    while bad is None or bad - good > 1:
        ok, reserved = fits(c, model, optimizer, cfg, batch, device, smoke)
        trials += 1
        print(f"  {c['id']} cap {cap_gib or 'card'} B={batch}: {'fits' if ok else 'OOM'}",
              file=sys.stderr, flush=True)
        if ok:
            good, reserved_at_good = batch, reserved
        else:
            bad = batch
        if bad is None and smoke and trials >= 3:
            break
        batch = batch * 2 if bad is None else (good + bad) // 2
    if not smoke:
        torch.cuda.set_per_process_memory_fraction(1.0)
    return {"config": c["id"], "cap_bytes": cap_gib * GiB if cap_gib else None,
            "largest_batch": good, "first_oom_batch": bad,
            "reserved_at_largest_bytes": reserved_at_good, "trials": trials}


def environment(device):
    import importlib.metadata as md
    env = {}
    for package in ["torch", "transformers", "peft", "bitsandbytes", "accelerate"]:
        try:
            env[package] = md.version(package)
        except md.PackageNotFoundError:
            env[package] = None
    if device.startswith("cuda"):
        p = torch.cuda.get_device_properties(0)
        env.update({"gpu": p.name, "gpu_total_bytes": p.total_memory,
                    "compute_capability": f"{p.major}.{p.minor}", "cuda": torch.version.cuda,
                    "cudnn": torch.backends.cudnn.version()})
        try:
            import subprocess
            env["driver"] = subprocess.run(
                ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                capture_output=True, text=True, check=True).stdout.strip()
        except (OSError, subprocess.CalledProcessError):
            env["driver"] = None
    return env


def main():
    ap = argparse.ArgumentParser(
        description="Measures what PyTorch + transformers (+ PEFT, bitsandbytes) allocate, reserve "
        "and reach on a GPU for the configurations vrambench's hf profile predicts.",
        epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=DEFAULT_OUT, help="the JSON to write (default: %(default)s)")
    ap.add_argument("--only", default="", help="comma-separated configuration ids")
    ap.add_argument("--no-bisect", action="store_true", help="skip the largest-batch bisection")
    ap.add_argument("--smoke", action="store_true",
                    help="run every code path on the CPU with tiny models; measures nothing, "
                    "writes nothing")
    ap.add_argument("--list", action="store_true", help="print the configuration ids and stop")
    args = ap.parse_args()

    configs = [c for c in CONFIGS if not args.only or c["id"] in args.only.split(",")]
    if not configs:
        fail(f"--only {args.only!r} names no configuration; --list shows them")
    if args.list:
        for c in configs:
            print(c["id"])
        return 0
    device = "cpu" if args.smoke else "cuda"
    if not args.smoke and not torch.cuda.is_available():
        fail("no CUDA device: run it on the GPU machine, or --smoke to try the code paths here")
    if args.smoke:
        for c in configs:
            c["batches"] = c["batches"][:1]
            c["seq"] = 32

    started = time.time()
    rows, bisections = [], []

    def document():
        # What a comparison needs to rebuild each configuration without this script: the models'
        # config.json (what `vrambench --model` reads), the adapters, where autocast was on.
        described = []
        for c in configs:
            d = {k: v for k, v in c.items() if k not in ("batches", "bisect")}
            rank = lora_rank(c["adapter"])
            d.update({"autocast_bf16": c["base"] in ("amp-bf16", "nf4"),
                      "lora": {"rank": rank, "alpha": LORA_ALPHA_PER_RANK * rank, "dropout": 0.0,
                               "targets": LORA_TARGETS} if rank else None,
                      "quantization": {"quant_type": "nf4", "double_quant": True,
                                       "compute_dtype": "bf16"} if c["base"] == "nf4" else None})
            described.append(d)
        models = {name: model_config(name, args.smoke).to_dict()
                  for name in sorted({c["model"] for c in configs})}
        return {"environment": environment(device), "models": models, "configs": described,
                "rows": rows, "bisections": bisections,
                "seconds": round(time.time() - started, 1)}

    def write():
        doc = document()
        os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
        with open(args.out, "w") as f:
            json.dump(doc, f, indent=1)
            f.write("\n")

    for c in configs:
        print(f"{c['id']}", file=sys.stderr, flush=True)
        model, cfg = build(c, device, args.smoke)
        optimizer = make_optimizer(c, model, args.smoke)
        rows += measure_rows(c, model, optimizer, cfg, device, args.smoke)
        if not args.no_bisect:
            for cap in c["bisect"]:
                bisections.append(bisect(c, model, optimizer, cfg, cap, device, args.smoke))
        del model, optimizer
        release()
        if not args.smoke:  # after each configuration: a run stopped early keeps what it measured
            write()
    if args.smoke:
        json.dumps(document())  # the document serialises, though a smoke run writes none
        print(f"smoke: {len(configs)} configurations ran on the CPU in {time.time() - started:.0f} s",
              file=sys.stderr)
        return 0
    print(f"wrote {len(rows)} rows and {len(bisections)} bisections to {args.out} in "
          f"{time.time() - started:.0f} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())

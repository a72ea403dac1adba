#!/usr/bin/env python3
"""What PyTorch + Hugging Face really reach on a GPU: allocated, reserved and the largest batch.

For each configuration a training run as transformers' Trainer runs it (forward with labels,
backward, optimizer step, zero_grad; --steps of them, 2 by default, from a fresh optimizer whose
state the first step makes, without empty_cache() between them) records at batch 1, 2 and 4
torch.cuda.max_memory_allocated() and max_memory_reserved() over the run (its steady state, what
vrambench predicts) and over its first step, and what the driver reports in use after it
(torch.cuda.mem_get_info: the CUDA context and the libraries' workspaces included). For some
configurations it then bisects the batch until torch.OutOfMemoryError, each trial such a run, on
the card capped with torch.cuda.set_per_process_memory_fraction (24 GiB, or the whole card), and
records the largest batch that ran and the reserved peak at it; for some it also searches the
longest sequence at batch 1 under a cap (doubling, then halving the gap to SEQ_STEP tokens). With
--snapshots DIR it also runs each search's boundary (what ran last and the first that failed) once
more, records the allocator's history over the last step
(torch.cuda.memory._record_memory_history) and pickles torch.cuda.memory._snapshot() into DIR with
an index, snapshots.json, which scripts/allocator_trace.py converts.

The configurations come in two groups (--group): `core`, the first reference's, and `families`,
each model family vrambench reads (Qwen3, Mistral, Gemma 2 and 3, Phi-3) and each recipe (full
fine-tuning under autocast, gradient accumulation) with the longest-sequence searches. A run of
several configurations is one process, whose memory outside the allocator grows as it loads
kernels: each row records its configuration's place in it (process_order). Inside the allocator
each run starts as in a fresh process: the cache emptied and cuBLAS's workspaces dropped
(release), so that only the model's weights are placed when its first step begins.

Models are built from their configs with random weights on the GPU (no download); a QLoRA base is
built with bitsandbytes' Linear4bit (NF4, double quantisation, bf16 compute) in place of the
block linears, as from_pretrained(quantization_config=...) stores them, then
peft.prepare_model_for_kbit_training. The result, tests/data/torch_cuda_reference.json, is what
vrambench's hf profile is compared with (scripts/torch_cuda_compare.py).

Nothing in the build or the tests needs this script, torch or a GPU: the JSON is committed.
"""

import argparse
import gc
import json
import os
import sys
import time

import reference_rows  # pure standard library, beside this script

DEFAULT_OUT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..",
                                            "tests", "data", "torch_cuda_reference.json"))
GiB = 1 << 30

EXAMPLES = """
examples:
  on the GPU machine (bitsandbytes' wheel installed first; about 5 minutes on an H100):
    python3 scripts/torch_cuda_reference.py --out $OUT/torch_cuda_reference.json
  one configuration, no bisection:
    python3 scripts/torch_cuda_reference.py --only llama3.2-1b-lora --no-bisect --out /tmp/x.json
  the allocator's history at the boundary of each search, for scripts/allocator_trace.py:
    python3 scripts/torch_cuda_reference.py --only llama3-8b-qlora-s512 --snapshots $OUT/snap
  the model families and recipes alone:
    python3 scripts/torch_cuda_reference.py --group families --out $OUT/families.json
  the code paths on the CPU with tiny models, nothing measured (no GPU needed):
    ~/venv-torch/bin/python scripts/torch_cuda_reference.py --smoke --snapshots /tmp/snap
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
    "qwen3-1.7b": ("Qwen3Config", {
        "hidden_size": 2048, "intermediate_size": 6144, "num_hidden_layers": 28,
        "num_attention_heads": 16, "num_key_value_heads": 8, "head_dim": 128,
        "vocab_size": 151936, "tie_word_embeddings": True, "max_position_embeddings": 40960}),
    "mistral-7b": ("MistralConfig", {
        "hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32,
        "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128,
        "vocab_size": 32768, "tie_word_embeddings": False, "max_position_embeddings": 32768,
        "sliding_window": None}),
    "gemma2-2b": ("Gemma2Config", {
        "hidden_size": 2304, "intermediate_size": 9216, "num_hidden_layers": 26,
        "num_attention_heads": 8, "num_key_value_heads": 4, "head_dim": 256,
        "vocab_size": 256000, "tie_word_embeddings": True, "max_position_embeddings": 8192,
        "sliding_window": 4096, "query_pre_attn_scalar": 256, "attn_logit_softcapping": 50.0,
        "final_logit_softcapping": 30.0, "hidden_activation": "gelu_pytorch_tanh"}),
    "gemma3-1b": ("Gemma3TextConfig", {
        "hidden_size": 1152, "intermediate_size": 6912, "num_hidden_layers": 26,
        "num_attention_heads": 4, "num_key_value_heads": 1, "head_dim": 256,
        "vocab_size": 262144, "tie_word_embeddings": True, "max_position_embeddings": 32768,
        "sliding_window": 512, "query_pre_attn_scalar": 256,
        "hidden_activation": "gelu_pytorch_tanh"}),
    "phi3.5-mini": ("Phi3Config", {
        "hidden_size": 3072, "intermediate_size": 8192, "num_hidden_layers": 32,
        "num_attention_heads": 32, "num_key_value_heads": 32, "vocab_size": 32064,
        "tie_word_embeddings": False, "max_position_embeddings": 131072}),
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
     "batches": [1, 2, 4], "bisect": [24], "longest_seq": [24]},
    {"id": "llama3-8b-qlora-s512", "model": "llama3-8b", "base": "nf4", "attention": "sdpa",
     "checkpointing": "on", "adapter": "lora-r16", "optimizer": "paged_adamw_8bit", "seq": 512,
     "batches": [1, 2, 4], "bisect": [24]},
    {"id": "llama3-8b-qlora-s2048", "model": "llama3-8b", "base": "nf4", "attention": "sdpa",
     "checkpointing": "on", "adapter": "lora-r16", "optimizer": "paged_adamw_8bit", "seq": 2048,
     "batches": [1, 2, 4], "bisect": [24]},
    {"id": "qwen2.5-7b-lora-ckpt", "model": "qwen2.5-7b", "base": "bf16", "attention": "sdpa",
     "checkpointing": "on", "adapter": "lora-r16", "optimizer": "adamw", "seq": 2048,
     "batches": [1, 2, 4], "bisect": [24]},
] + GPT2_CONFIGS
for _c in CONFIGS:
    _c["group"] = "core"
# Each model family vrambench reads and each recipe, the largest batch under a 24 GiB cap and
# (longest_seq) the longest sequence at batch 1 under a cap: the second group, measured by its own
# call on the GPU machine (scripts/gpu-session.sh's `families` step). grad_accum: micro-batches a
# step, as Trainer's gradient_accumulation_steps runs them.
_FAMILY = {"attention": "sdpa", "checkpointing": "off", "adapter": "lora-r16", "base": "bf16",
           "optimizer": "adamw", "seq": 2048, "batches": [1, 2, 4], "bisect": [24],
           "longest_seq": [24], "group": "families"}
CONFIGS += [dict(_FAMILY, **c) for c in [
    {"id": "gemma3-1b-lora", "model": "gemma3-1b"},
    {"id": "mistral-7b-qlora", "model": "mistral-7b", "base": "nf4", "checkpointing": "on",
     "optimizer": "paged_adamw_8bit", "longest_seq": [12]},
    {"id": "phi3.5-mini-lora-ckpt", "model": "phi3.5-mini", "checkpointing": "on",
     "longest_seq": [16]},
    {"id": "gemma2-2b-lora-ckpt", "model": "gemma2-2b", "attention": "eager",
     "checkpointing": "on"},
    {"id": "qwen3-1.7b-lora-accum4", "model": "qwen3-1.7b", "seq": 1024, "grad_accum": 4,
     "batches": [1, 2], "longest_seq": []},
    {"id": "qwen3-1.7b-full-amp", "model": "qwen3-1.7b", "base": "amp-bf16", "adapter": "none",
     "seq": 1024, "bisect": [48], "longest_seq": [48]},
    {"id": "mistral-7b-lora", "model": "mistral-7b", "seq": 1024, "bisect": [],
     "longest_seq": [24]},
]]
# Granularity of the longest-sequence search: the bracket [longest, first_oom) is at most this wide.
SEQ_STEP = 256


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
    if smoke:  # the special tokens of a real vocabulary are out of a smoke model's
        for token in ("pad_token_id", "bos_token_id", "eos_token_id"):
            if (getattr(cfg, token, None) or 0) >= cfg.vocab_size:
                setattr(cfg, token, None)
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


def step(c, model, optimizer, cfg, batch, device, seq):
    """One optimizer step: grad_accum micro-batches of `batch` sequences, each forward and
    backward (the gradients accumulate), then the update."""
    autocast = c["base"] in ("amp-bf16", "nf4")
    accum = c.get("grad_accum", 1)
    for _ in range(accum):
        ids = torch.randint(0, cfg.vocab_size, (batch, seq), device=device)
        with torch.autocast(device_type=device.split(":")[0], dtype=torch.bfloat16,
                            enabled=autocast):
            loss = model(input_ids=ids, labels=ids).loss / accum
        loss.backward()
        del ids
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return float(loss.detach()) * accum


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
    """Before each run: what the last one left goes, the cache is emptied, and cuBLAS's
    workspaces (one per handle and stream, made through the caching allocator at a thread's first
    GEMM and kept by the handle pool, which empty_cache() leaves) are dropped, so that every run
    makes its own at its first GEMM as a fresh process does. Kept, the first run's workspace would
    pin whatever segment it landed in for all later ones, a segment that depends on what the
    process ran before, likely one reason the boundary moved between processes."""
    gc.collect()
    if torch.cuda.is_available():
        clear = getattr(torch._C, "_cuda_clearCublasWorkspaces", None)
        if clear is not None:
            torch.cuda.synchronize()
            clear()
        torch.cuda.empty_cache()


def out_of_memory(e):
    return isinstance(e, torch.OutOfMemoryError) or "out of memory" in str(e).lower()


class Run:
    """A training run at one batch, as the Trainer makes it: a fresh optimizer (the last one's
    state freed, the cache emptied), then `steps` steps without empty_cache() between them. The
    optimizer lives on for the next run's release."""

    def __init__(self, c, model, cfg, device, smoke, steps):
        self.c, self.model, self.cfg, self.device, self.smoke = c, model, cfg, device, smoke
        self.steps = steps
        self.optimizer = None

    def fresh(self):
        if self.optimizer is not None:
            self.optimizer.zero_grad(set_to_none=True)
        self.optimizer = None
        self.model.zero_grad(set_to_none=True)
        release()
        self.optimizer = make_optimizer(self.c, self.model, self.smoke)
        if not self.smoke:
            torch.cuda.reset_peak_memory_stats()

    def __call__(self, batch, record=None, seq=None):
        """Runs it (at the configuration's sequence, or `seq`); the loss of the last step and the
        first step's peaks (CUDA). `record`, when given, is called before the last step (the
        allocator's history starts there)."""
        self.fresh()
        first, loss = {}, None
        for i in range(self.steps):
            if record is not None and i == self.steps - 1:
                record()
            loss = step(self.c, self.model, self.optimizer, self.cfg, batch, self.device,
                        seq or self.c["seq"])
            if i == 0 and not self.smoke:
                torch.cuda.synchronize()
                first = {"first_step_allocated_peak_bytes": torch.cuda.max_memory_allocated(),
                         "first_step_reserved_peak_bytes": torch.cuda.max_memory_reserved()}
        return loss, first


def measure_rows(c, run):
    """Rows at each of the configuration's batches: a run's peaks over all its steps (the steady
    state) and over its first, and what the driver holds after it."""
    rows = []
    for batch in c["batches"]:
        start = time.perf_counter()
        loss, first = run(batch)
        seconds = (time.perf_counter() - start) / run.steps
        row = {"config": c["id"], "batch": batch, "steps": run.steps, "loss": round(loss, 3),
               "step_seconds": round(seconds, 3)}
        if not run.smoke:
            row.update(cuda_figures())
            row.update(first)
        rows.append(row)
        print(f"  {c['id']} B={batch}: " + ", ".join(
            f"{k} {v / GiB:.2f} GiB" if k.endswith("_bytes") else f"{k} {v}"
            for k, v in row.items() if k not in ("config", "batch")), file=sys.stderr, flush=True)
    return rows


def fits(run, batch, record=None, recorded=None, seq=None):
    """Whether a run at `batch` fits; its reserved peak and allocated peak where it does, and the
    error where it does not. The cache is emptied after it. `record` is called before the run's
    last step, `recorded` right after the run (an out-of-memory's frames released), before the
    gradients go and the cache is emptied."""
    ok, error = True, None
    try:
        run(batch, record, seq)
    except (torch.OutOfMemoryError, RuntimeError) as e:
        if not out_of_memory(e):
            raise
        ok, error = False, str(e)
    # Out of the except clause: the exception's frames no longer hold the step's tensors.
    if recorded is not None:
        recorded()
    run.optimizer.zero_grad(set_to_none=True)
    figures = {"reserved": 0, "allocated": 0}
    if not run.smoke:
        figures = {"reserved": torch.cuda.max_memory_reserved(),
                   "allocated": torch.cuda.max_memory_allocated()}
    release()
    return ok, error, figures


def set_cap(run, cap_gib):
    """The allocator's cap (GiB; 0: the whole card)."""
    if not run.smoke:
        total = torch.cuda.get_device_properties(0).total_memory
        torch.cuda.set_per_process_memory_fraction(
            1.0 if cap_gib == 0 else min(1.0, cap_gib * GiB / total))


def bisect(c, run, cap_gib):
    """The largest batch that runs under the cap: doubling from 1, then halving the gap."""
    set_cap(run, cap_gib)
    good, reserved_at_good, bad, trials = 0, 0, None, 0
    batch = 1
    while bad is None or bad - good > 1:
        ok, _, figures = fits(run, batch)
        trials += 1
        print(f"  {c['id']} cap {cap_gib or 'card'} B={batch}: {'fits' if ok else 'OOM'}",
              file=sys.stderr, flush=True)
        if ok:
            good, reserved_at_good = batch, figures["reserved"]
        else:
            bad = batch
        if bad is None and run.smoke and trials >= 3:
            break
        batch = batch * 2 if bad is None else (good + bad) // 2
    set_cap(run, 0)
    return {"config": c["id"], "cap_bytes": cap_gib * GiB if cap_gib else None,
            "largest_batch": good, "first_oom_batch": bad,
            "reserved_at_largest_bytes": reserved_at_good, "steps": run.steps, "trials": trials}


def longest_seq(c, run, cap_gib):
    """The longest sequence that runs at batch 1 under the cap, to SEQ_STEP tokens: doubling from
    the configuration's sequence (halving while that fails), then halving the gap."""
    set_cap(run, cap_gib)
    good, reserved_at_good, bad, trials = 0, 0, None, 0
    seq = c["seq"]
    while bad is None or bad - good > SEQ_STEP:
        ok, _, figures = fits(run, 1, seq=seq)
        trials += 1
        print(f"  {c['id']} cap {cap_gib or 'card'} B=1 seq={seq}: {'fits' if ok else 'OOM'}",
              file=sys.stderr, flush=True)
        if ok:
            good, reserved_at_good = seq, figures["reserved"]
        else:
            bad = seq
        if run.smoke and trials >= 3:
            break
        if bad is None:
            seq *= 2
        elif good == 0:
            if seq <= SEQ_STEP:
                break
            seq //= 2
        else:
            seq = (good + bad) // 2 // SEQ_STEP * SEQ_STEP
    set_cap(run, 0)
    return {"config": c["id"], "cap_bytes": cap_gib * GiB if cap_gib else None, "batch": 1,
            "longest_seq": good, "first_oom_seq": bad, "granularity": SEQ_STEP,
            "reserved_at_longest_bytes": reserved_at_good, "steps": run.steps, "trials": trials}


def site(frames):
    """Where in the model's code a request was made, from its Python frames (innermost first):
    the innermost frame outside torch (transformers', PEFT's, bitsandbytes' line) and, where it
    differs, the innermost of all (the torch function it called), as 'file:line function'.
    Empty for requests with no Python frame (autograd's backward runs in C++)."""
    def fmt(frame):
        return f"{os.path.basename(frame['filename'])}:{frame['line']} {frame['name']}"

    outside = next((f for f in frames if f"{os.sep}torch{os.sep}" not in f["filename"]), None)
    names = [fmt(f) for f in (outside, frames[0] if frames else None) if f is not None]
    return "; ".join(dict.fromkeys(names))


def snapshot_boundary(c, run, search, cap_gib, folder):
    """A bisection's largest batch and the first that failed (or, for a longest-sequence search,
    the longest sequence and the first that failed, at batch 1), each run once more with
    the allocator's history recorded over its last step; each snapshot pickled into `folder` (each
    request's stack frames reduced to its `site`), an entry of snapshots.json per case."""
    import pickle
    cases = []
    set_cap(run, cap_gib)

    def record():
        if not run.smoke:
            torch.cuda.memory._record_memory_history(enabled="all", context="alloc",
                                                     stacks="python")

    taken = []

    def recorded():
        if not run.smoke:
            taken.append(torch.cuda.memory._snapshot())
            torch.cuda.memory._record_memory_history(enabled=None)

    over_seq = "longest_seq" in search
    ends = ((search["longest_seq"], search["first_oom_seq"]) if over_seq
            else (search["largest_batch"], search["first_oom_batch"]))
    for end in [e for e in ends if e]:
        batch, seq = (1, end) if over_seq else (end, c["seq"])
        start = time.perf_counter()
        name = (f"{c['id']}-S{seq}-cap{cap_gib}.pickle" if over_seq
                else f"{c['id']}-B{batch}-cap{cap_gib}.pickle")
        taken.clear()
        ok, error, figures = fits(run, batch, record, recorded, seq)
        snap = taken[0] if taken else None
        if snap is not None:
            for segment in snap["segments"]:
                segment["frames"] = []
                for block in segment["blocks"]:
                    block.pop("frames", None)
            for trace in snap["device_traces"]:
                for event in trace:
                    where = site(event.pop("frames", None) or [])
                    if where:
                        event["site"] = where
            with open(os.path.join(folder, name), "wb") as f:
                pickle.dump(snap, f)
        cases.append({"config": c["id"], "batch": batch, "seq": seq, "cap_gib": cap_gib,
                      "fits": ok,
                      "error": None if error is None else error[:400],
                      "allocated_peak_bytes": figures["allocated"],
                      "reserved_peak_bytes": figures["reserved"], "steps": run.steps,
                      "seconds": round(time.perf_counter() - start, 1),
                      "snapshot": name if snap is not None else None})
        print(f"  {c['id']} cap {cap_gib or 'card'} B={batch} seq={seq}: snapshot, "
              f"{'fits' if ok else 'OOM'}", file=sys.stderr, flush=True)
    set_cap(run, 0)
    return cases


def environment(device):
    env = {package: reference_rows.package_version(package)
           for package in ["torch", "transformers", "peft", "bitsandbytes", "accelerate"]}
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
    ap.add_argument("--group", choices=["all", "core", "families"], default="all",
                    help="core: the first reference's configurations; families: each model "
                    "family and recipe, with the longest sequence (default: %(default)s)")
    ap.add_argument("--no-bisect", action="store_true",
                    help="skip the searches: the largest batch and the longest sequence")
    ap.add_argument("--smoke", action="store_true",
                    help="run every code path on the CPU with tiny models; measures nothing, "
                    "writes nothing")
    ap.add_argument("--list", action="store_true", help="print the configuration ids and stop")
    ap.add_argument("--steps", type=int, default=2,
                    help="training steps per run, each row's and each bisection trial's "
                    "(default: %(default)s; vrambench's sim replays two)")
    ap.add_argument("--snapshots", metavar="DIR",
                    help="after each search (of the core group, or of the configurations "
                    "--only names), the allocator's history over the last step at the largest "
                    "batch (or longest sequence) and the first that failed, pickled into DIR with "
                    "DIR/snapshots.json (smoke: the index alone)")
    args = ap.parse_args()
    if args.steps < 1:
        fail(f"--steps {args.steps}: a run takes at least one step")

    configs = [c for c in CONFIGS if (not args.only or c["id"] in args.only.split(","))
               and args.group in ("all", c["group"])]
    if not configs:
        fail(f"--only {args.only!r} --group {args.group} names no configuration; --list shows "
             "them")
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
    rows, bisections, longest, snapshots = [], [], [], []
    if args.snapshots:
        os.makedirs(args.snapshots, exist_ok=True)

    def document():
        # What a comparison needs to rebuild each configuration without this script: the models'
        # config.json (what `vrambench --model` reads), the adapters, where autocast was on.
        described = []
        for c in configs:
            d = {k: v for k, v in c.items() if k not in ("batches", "bisect", "longest_seq")}
            rank = lora_rank(c["adapter"])
            d.update({"grad_accum": c.get("grad_accum", 1),
                      "autocast_bf16": c["base"] in ("amp-bf16", "nf4"),
                      "lora": {"rank": rank, "alpha": LORA_ALPHA_PER_RANK * rank, "dropout": 0.0,
                               "targets": LORA_TARGETS} if rank else None,
                      "quantization": {"quant_type": "nf4", "double_quant": True,
                                       "compute_dtype": "bf16"} if c["base"] == "nf4" else None})
            described.append(d)
        models = {name: model_config(name, args.smoke).to_dict()
                  for name in sorted({c["model"] for c in configs})}
        return {"environment": environment(device), "models": models, "configs": described,
                "protocol": f"each row and bisection trial a training run of {args.steps} steps "
                            "from a fresh optimizer, the cache emptied before it",
                "rows": rows, "bisections": bisections, "longest_seqs": longest,
                "seconds": round(time.time() - started, 1)}

    def write_json(path, doc):
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        with open(path + ".partial", "w") as f:
            json.dump(doc, f, indent=1)
            f.write("\n")
        os.replace(path + ".partial", path)

    def write_index():
        env = environment(device)
        write_json(os.path.join(args.snapshots, "snapshots.json"),
                   {"torch": env.get("torch"), "gpu": env.get("gpu"), "cases": snapshots})

    def write():
        write_json(args.out, document())
        if args.snapshots:
            write_index()

    for order, c in enumerate(configs):
        print(f"{c['id']}", file=sys.stderr, flush=True)
        model, cfg = build(c, device, args.smoke)
        run = Run(c, model, cfg, device, args.smoke, args.steps)
        # The families' searches are many and long: their boundaries are recorded when named.
        snapshot = args.snapshots and (c["group"] == "core" or args.only)
        # Its place in this process (0: the first): the memory a process holds outside the
        # allocator grows with the kernels it has loaded.
        rows += [dict(r, process_order=order) for r in measure_rows(c, run)]
        if not args.no_bisect:
            for cap in c["bisect"]:
                bisections.append(bisect(c, run, cap))
                if snapshot:
                    snapshots.extend(
                        snapshot_boundary(c, run, bisections[-1], cap, args.snapshots))
            for cap in c.get("longest_seq", []):
                longest.append(longest_seq(c, run, cap))
                if snapshot:
                    snapshots.extend(snapshot_boundary(c, run, longest[-1], cap, args.snapshots))
        del model, run
        release()
        if not args.smoke:  # after each configuration: a run stopped early keeps what it measured
            write()
    if args.snapshots and args.smoke:  # the index alone: there is no allocator history on a CPU
        write_index()
    if args.smoke:
        json.dumps(document())  # the document serialises, though a smoke run writes none
        print(f"smoke: {len(configs)} configurations ran on the CPU in {time.time() - started:.0f} s",
              file=sys.stderr)
        return 0
    print(f"wrote {len(rows)} rows, {len(bisections)} bisections and {len(longest)} longest "
          f"sequences to {args.out} in "
          f"{time.time() - started:.0f} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())

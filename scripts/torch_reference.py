#!/usr/bin/env python3
"""Measures the memory of one Hugging Face transformers training step without a GPU.

Each row builds a model with transformers' AutoModelForCausalLM.from_config under PyTorch's
FakeTensorMode (no real memory), runs two training iterations under PyTorch's MemTracker and
records the second iteration's peak, by tensor category. The result,
tests/data/torch_reference.json, is the reference a framework profile of vrambench is checked
against; tests/data/README.md says what every field means and where it differs from a GPU run.

Nothing in the build or the tests needs this script or torch: the JSON is committed.
"""

import argparse
import gc
import json
import os
import sys
import time

import reference_rows

DEFAULT_OUT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..",
                                            "tests", "data", "torch_reference.json"))

# The versions the committed JSON was measured with; another version may legitimately differ.
PINNED = "torch==2.15.0 transformers==5.23.0 peft==0.21.2"

EXAMPLES = f"""
examples:
  measure everything and (re)write tests/data/torch_reference.json (about 40 minutes on 2 cores):
    ~/venv-torch/bin/python scripts/torch_reference.py
  re-measure and compare with the committed JSON, exit 1 on any byte of difference:
    ~/venv-torch/bin/python scripts/torch_reference.py --check
  only some rows: every space-separated term is a regular expression that must match one
  field of the row id in full (field=value, as printed in the progress lines):
    scripts/torch_reference.py --check --only 'model=gpt2 seq=1024'
    scripts/torch_reference.py --only 'dtype=(bf16|fp32) attention=sdpa batch=1' --out /tmp/x.json
    scripts/torch_reference.py --list --only 'adapter=lora.*'
  row id fields: model dtype attention checkpointing dropout seq optimizer adapter loop batch

setup (torch is never needed by the build or the tests; keep it out of the repository):
  python3 -m venv ~/venv-torch
  ~/venv-torch/bin/pip install {PINNED}
"""


fail = reference_rows.failing("torch_reference.py")


try:
    import torch
    import transformers
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.distributed._tools import mem_tracker as _mem_tracker
except ImportError as e:
    reference_rows.import_failed(
        e, fail, __name__ == "__main__",
        reference_rows.venv_setup(PINNED) +
        ", then run ~/venv-torch/bin/python scripts/torch_reference.py")
    torch = None  # --help works without torch

# ---------------------------------------------------------------------------------------------
# The grid.

# The configurations, as passed to the config classes. gpt2 is the real GPT-2 small (124M, the
# library defaults are its config); its learned position table grows to max(n_positions, seq)
# rows for longer sequences, as vrambench's estimate does. llama-small is a small llama shape with
# grouped-query attention (8 query heads, 2 key/value heads), SwiGLU, RMSNorm and RoPE.
MODELS = {
    "gpt2": ("GPT2Config", {}),
    "llama-small": ("LlamaConfig", {
        "hidden_size": 512,
        "intermediate_size": 1408,
        "num_attention_heads": 8,
        "num_key_value_heads": 2,
        "num_hidden_layers": 4,
        "vocab_size": 32000,
        "max_position_embeddings": 4096,
    }),
}

# The other families at llama-small's sizes (head_dim 64, as the config classes would default
# otherwise): Qwen3's q/k norms; Gemma 2's (1 + w) fp32 norms, scaled embeddings, GeGLU, four
# norms a block and soft-capping (eager only: transformers' Gemma 2 has no sdpa path); Gemma 3's
# q/k and four norms; Phi-3's fused qkv_proj and gate_up_proj (its attention's q, k and v are views
# of one output, its MLP chunks one output into gate and up); Gemma 3 with a 256-token window, which
# S=512 reaches. Each at S=512, batches 1 and 2, fp32 and bf16, with and without checkpointing,
# AdamW, no dropout.
_SMALL = {"hidden_size": 512, "intermediate_size": 1408, "num_attention_heads": 8,
          "num_key_value_heads": 2, "head_dim": 64, "num_hidden_layers": 4, "vocab_size": 32000,
          "max_position_embeddings": 4096}
FAMILY_MODELS = {
    "qwen3-small": ("Qwen3Config", dict(_SMALL, tie_word_embeddings=False)),
    "gemma2-small": ("Gemma2Config", dict(_SMALL)),
    "gemma3-small": ("Gemma3TextConfig", dict(_SMALL)),
    # pad_token_id: Phi3Config's default (32000) is outside the small vocabulary.
    "phi3-small": ("Phi3Config", dict(_SMALL, tie_word_embeddings=False, pad_token_id=0)),
    # Gemma 3 with a window shorter than the sequence: sdpa's sliding layers get a mask.
    "gemma3-window": ("Gemma3TextConfig", dict(_SMALL, sliding_window=256)),
}
MODELS.update(FAMILY_MODELS)

DTYPES = ["fp32", "bf16", "autocast-bf16"]   # autocast-bf16: fp32 model under torch.autocast
ATTENTIONS = ["eager", "sdpa"]
CHECKPOINTING = ["off", "on"]
DROPOUTS = [0.0, 0.1]
SEQS = [512, 2048]
OPTIMIZERS = ["adamw", "none"]
BATCHES = [1, 2, 4]

# The project's earlier per-sample activation figures are for gpt2 at S=1024; these rows sit
# beside them (dtype, attention, checkpointing, dropout).
COMPARISON_S1024 = [
    ("fp32", "eager", "off", 0.0),
    ("fp32", "eager", "off", 0.1),
    ("bf16", "eager", "off", 0.0),
    ("bf16", "sdpa", "off", 0.0),
    ("bf16", "sdpa", "on", 0.0),
]

# The training loop: "trainer" keeps only the loss past the forward, as transformers' Trainer does
# (its compute_loss returns the loss and drops the output object); "outputs" is the loop of
# transformers' "train in native PyTorch" guide, `outputs = model(**batch); outputs.loss.backward()`,
# which keeps the output object (logits included) through backward and into the next forward.
LOOPS = ["trainer", "outputs"]

# LoRA (PEFT defaults: r=8, alpha=8, the library's default target modules per model type; AdamW
# over the adapter weights only), dropout 0.
LORA = {"r": 8, "lora_alpha": 8, "lora_dropout": 0.0}
LORA_NAME = "lora-r8"

FIELDS = ["model", "dtype", "attention", "checkpointing", "dropout", "seq", "optimizer", "adapter",
          "loop", "batch"]


def grid():
    """Every row key (a dict of FIELDS) that a full run measures, in sorted order."""
    keys = []
    for model in FAMILY_MODELS:
        for dtype in ["fp32", "bf16"]:
            for attention in ["eager"] if model == "gemma2-small" else ATTENTIONS:
                for ckpt in CHECKPOINTING:
                    for batch in [1, 2]:
                        keys.append(row_key(model, dtype, attention, ckpt, 0.0, 512, "adamw",
                                            "none", "trainer", batch))
    for model in ["gpt2", "llama-small"]:
        for dtype in DTYPES:
            for attention in ATTENTIONS:
                for ckpt in CHECKPOINTING:
                    for seq in SEQS:
                        for batch in BATCHES:
                            for dropout in DROPOUTS:
                                for optimizer in OPTIMIZERS:
                                    keys.append(row_key(model, dtype, attention, ckpt, dropout, seq,
                                                        optimizer, "none", "trainer", batch))
                            keys.append(row_key(model, dtype, attention, ckpt, 0.0, seq, "adamw",
                                                LORA_NAME, "trainer", batch))
                            if seq == max(SEQS):
                                keys.append(row_key(model, dtype, attention, ckpt, 0.0, seq, "adamw",
                                                    "none", "outputs", batch))
    for dtype, attention, ckpt, dropout in COMPARISON_S1024:
        for batch in BATCHES:
            for loop in LOOPS:
                keys.append(row_key("gpt2", dtype, attention, ckpt, dropout, 1024, "adamw", "none",
                                    loop, batch))
    keys.sort(key=sort_key)
    return keys


def row_key(model, dtype, attention, checkpointing, dropout, seq, optimizer, adapter, loop, batch):
    return {"model": model, "dtype": dtype, "attention": attention, "checkpointing": checkpointing,
            "dropout": dropout, "seq": seq, "optimizer": optimizer, "adapter": adapter,
            "loop": loop, "batch": batch}


def sort_key(row):
    return reference_rows.sort_key(row, FIELDS)


def row_id(row):
    return reference_rows.row_id(row, FIELDS)


def matches(row, pattern):
    return reference_rows.matches(row, pattern, FIELDS)


# ---------------------------------------------------------------------------------------------
# Measuring.

if torch is not None:
    _MemTracker = _mem_tracker.MemTracker
    _TOTAL = _mem_tracker._TOTAL_KEY

    class _NoHook:
        def remove(self):
            pass

    class PeakTracker(_MemTracker):
        """MemTracker that keeps only the global peak, and where it happened.

        The stock tracker also updates the peak of every active module on every operator, which
        is most of its cost; the global figures are the same. It also notes the phase (forward,
        backward, optimizer) and the innermost module at the moment of the peak, and which fused
        attention kernel ran.
        """

        def __init__(self):
            super().__init__()
            self.peak_phase = None
            self.peak_module = None
            self.attention_ops = set()

        def _update_peak_stats(self, peak_state):
            for dev, snap in self._curr_mem_snap.items():
                if self._peak_mem.get(dev, 0) < snap[_TOTAL]:
                    self._peak_mem[dev] = snap[_TOTAL]
                    self._peak_mem_snap[dev] = dict(snap)
                    if self._in_opt:
                        self.peak_phase = "optimizer"
                    else:
                        self.peak_phase = "backward" if self._mod_tracker.is_bw else "forward"
                    parents = [p for p in self._mod_tracker.parents if p != "Global"]
                    self.peak_module = max(parents, key=lambda p: (p.count("."), p), default="")

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            name = func.__name__
            if "scaled_dot_product" in name and "backward" not in name:
                self.attention_ops.add(name.split(".")[0])
            return super().__torch_dispatch__(func, types, args, kwargs)

        def skip_frozen(self, module):
            # The tracker puts a gradient hook on every parameter, which autograd refuses on a
            # frozen one; a placeholder handle makes it pass those by.
            for p in module.parameters():
                if not p.requires_grad:
                    self._param_to_grad_hook_handles[p] = (_NoHook(), _NoHook())

        def reset_peak(self):
            # reset_mod_stats() clears only the per-module figures; the global peak starts again
            # from what is live now, so that it is the next iteration's alone.
            self.reset_mod_stats()
            self._peak_mem_snap = {d: dict(s) for d, s in self._curr_mem_snap.items()}
            self._peak_mem = {d: s[_TOTAL] for d, s in self._curr_mem_snap.items()}
            self.peak_phase = None
            self.peak_module = None


def model_config(name, dropout, seq):
    class_name, fields = MODELS[name]
    cfg = getattr(transformers, class_name)(**fields)
    if name == "gpt2":
        cfg.resid_pdrop = cfg.embd_pdrop = cfg.attn_pdrop = dropout
        cfg.n_positions = max(cfg.n_positions, seq)
    else:
        cfg.attention_dropout = dropout
    return cfg


def config_dict(name):
    """The full config of a model as transformers reports it, before a row sets its dropout (and
    for gpt2 its position table), without fields that name the library version."""
    class_name, fields = MODELS[name]
    cfg = getattr(transformers, class_name)(**fields)
    d = cfg.to_dict()
    for k in ["transformers_version", "_attn_implementation_autoset", "dtype", "torch_dtype",
              "architectures", "_name_or_path"]:
        d.pop(k, None)
    return json.loads(json.dumps(d, sort_keys=True, default=str))


def _fakeify(module, fake_mode):
    """Replaces the real parameters and buffers of a module by fake ones, keeping tied weights
    tied (one fake per real tensor)."""
    memo = {}

    def fake(t):
        if id(t) not in memo:
            memo[id(t)] = fake_mode.from_tensor(t.detach())
        return memo[id(t)]

    for m in module.modules():
        for name, p in list(m._parameters.items()):
            if p is not None:
                if id(p) not in memo:
                    memo[id(p)] = torch.nn.Parameter(fake(p), requires_grad=p.requires_grad)
                m._parameters[name] = memo[id(p)]
        for name, b in list(m._buffers.items()):
            if b is not None:
                m._buffers[name] = fake(b)


def build(row, fake_mode):
    torch_dtype = torch.bfloat16 if row["dtype"] == "bf16" else torch.float32
    cfg = model_config(row["model"], row["dropout"], row["seq"])
    kwargs = {"dtype": torch_dtype, "attn_implementation": row["attention"]}
    if row["adapter"] == "none":
        with fake_mode:
            model = transformers.AutoModelForCausalLM.from_config(cfg, **kwargs)
    else:
        # PEFT moves each new adapter weight to its base layer's device, which fails under
        # FakeTensorMode; the adapters are built on real CPU tensors and then made fake.
        import peft
        model = transformers.AutoModelForCausalLM.from_config(cfg, **kwargs)
        model = peft.get_peft_model(model, peft.LoraConfig(task_type="CAUSAL_LM", **LORA))
        _fakeify(model, fake_mode)
        gc.collect()
    if row["checkpointing"] == "on":
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    model.train()
    return model, cfg


def measure(row):
    """Peak of the second of two training iterations, by category, in bytes."""
    gc.collect()
    fake_mode = FakeTensorMode()
    model, cfg = build(row, fake_mode)
    params = sum(p.numel() for p in model.parameters())
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    autocast = row["dtype"] == "autocast-bf16"
    with fake_mode:
        optimizer = None
        if row["optimizer"] == "adamw":
            optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad])
        tracker = PeakTracker()
        tracker.skip_frozen(model)
        tracker.track_external(model, optimizer)
        with tracker:
            for iteration in range(2):
                ids = torch.randint(0, cfg.vocab_size, (row["batch"], row["seq"]))
                with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
                    if row["loop"] == "outputs":
                        # The previous output object lives until this assignment.
                        outputs = model(input_ids=ids, labels=ids)
                        loss = outputs.loss
                    else:
                        # Only the loss outlives the forward: the output object with its logits
                        # (and key/value cache) is dropped before backward.
                        loss = model(input_ids=ids, labels=ids).loss
                loss.backward()
                if optimizer is not None:
                    optimizer.step()
                    optimizer.zero_grad(set_to_none=True)
                else:
                    model.zero_grad(set_to_none=True)
                del loss
                if iteration == 0:
                    tracker.reset_peak()
        snap = tracker.get_tracker_snapshot("peak")
    (device, by_ref), = snap.items()
    by_category = {ref.name: int(by_ref.get(ref, 0)) for ref in _mem_tracker._MemRefType}
    if row["attention"] == "eager":
        kernel = "eager"
    elif tracker.attention_ops:
        kernel = ",".join(sorted(tracker.attention_ops))
    else:
        kernel = "math"
    out = dict(row)
    out.update({
        "params": params,
        "trainable_params": trainable,
        "peak_bytes": int(by_ref[_TOTAL]),
        "by_category": by_category,
        "phase": tracker.peak_phase,
        "peak_module": tracker.peak_module,
        "attention_kernel": kernel,
    })
    return out, str(device)


def _quiet():
    # Deprecation and use_cache notices from transformers would drown the progress lines.
    import warnings
    warnings.filterwarnings("ignore")
    transformers.logging.set_verbosity_error()


def _worker(row):
    torch.set_num_threads(1)
    t0 = time.monotonic()
    out, device = measure(row)
    return out, device, time.monotonic() - t0


def run(rows, jobs):
    """Measures rows, in parallel processes, printing progress on stderr."""
    return reference_rows.measure_rows(
        rows, jobs, _worker, _quiet,
        lambda out: f"{out['peak_bytes'] / 2**20:.1f} MiB peak in {out['phase']}", FIELDS)


# ---------------------------------------------------------------------------------------------
# The JSON: fixed key order, one row a line, so that a re-run diffs cleanly.

def document(rows, devices):
    import importlib.metadata as md
    try:
        peft_version = md.version("peft")
    except md.PackageNotFoundError:
        peft_version = None
    return {
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "peft": peft_version,
        "device": ",".join(sorted(devices)),
        "autocast_device": "cpu",
        "tracker": "torch.distributed._tools.mem_tracker.MemTracker under FakeTensorMode",
        "models": {name: config_dict(name) for name in MODELS},
        "rows": rows,
    }


def main():
    ap = argparse.ArgumentParser(
        description="Measure the peak memory of a Hugging Face transformers training step with "
        "PyTorch's MemTracker on fake tensors (no GPU, no real memory), over a grid of models, "
        "dtypes, attention kernels, checkpointing, dropout, sequence lengths, optimizers and batch "
        "sizes, and write tests/data/torch_reference.json.",
        epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    reference_rows.add_arguments(ap, DEFAULT_OUT)
    args = ap.parse_args()

    rows = reference_rows.select(grid(), args, FIELDS, fail)
    if rows is None:
        return 0

    measured, devices = run(rows, args.jobs)
    doc = document(measured, devices)
    if args.check:
        ok = reference_rows.check(measured, args.out, doc, FIELDS, ["torch", "transformers", "peft"],
                                  fail)
        return 0 if ok else 1
    reference_rows.write(doc, args.out, FIELDS, bool(args.only))
    return 0


if __name__ == "__main__":
    sys.exit(main())

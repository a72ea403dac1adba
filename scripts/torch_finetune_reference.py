#!/usr/bin/env python3
"""Measures the memory of one Hugging Face fine-tuning step (PEFT LoRA, bitsandbytes QLoRA) on
real CPU tensors.

PEFT and bitsandbytes do not run under FakeTensorMode, so unlike scripts/torch_reference.py these
rows are measured on real tensors: a small model built from its config with random weights, two
Trainer-style iterations (forward with labels, backward, optimizer step, zero_grad), the second
one measured by a TorchDispatchMode that follows every tensor storage by weak reference. The
result, tests/data/torch_finetune_reference.json, is the reference the fine-tuning part of the
`--framework hf` profile is checked against; tests/data/README.md says what every field means.

Nothing in the build or the tests needs this script or torch: the JSON is committed.
"""

import argparse
import collections
import gc
import os
import sys
import tempfile
import time
import weakref

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import reference_rows  # noqa: E402  (pure standard library)

DEFAULT_OUT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..",
                                            "tests", "data", "torch_finetune_reference.json"))

PINNED = "torch==2.15.0 transformers==5.23.0 peft==0.21.2 bitsandbytes==0.50.2"

EXAMPLES = f"""
examples:
  measure everything and (re)write tests/data/torch_finetune_reference.json:
    ~/venv-torch/bin/python scripts/torch_finetune_reference.py
  re-measure and compare with the committed JSON, exit 1 on any byte of difference:
    ~/venv-torch/bin/python scripts/torch_finetune_reference.py --check
  only some rows (each space-separated term is a regular expression matching one field=value of
  the row id in full):
    scripts/torch_finetune_reference.py --check --only 'model=llama-small base=bf16'
    scripts/torch_finetune_reference.py --list --only 'base=nf4'
  row id fields: {' '.join(['model', 'base', 'lora_r', 'lora_dropout', 'targets', 'checkpointing',
                            'optimizer', 'seq', 'batch', 'attention'])}

setup (torch is never needed by the build or the tests; keep it out of the repository):
  python3 -m venv ~/venv-torch
  ~/venv-torch/bin/pip install {PINNED}
"""


fail = reference_rows.failing("torch_finetune_reference.py")


try:
    import torch
    import transformers
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_flatten
    import torch_reference as _ref
except ImportError as e:
    reference_rows.import_failed(e, fail, __name__ == "__main__", reference_rows.venv_setup(PINNED))
    torch = None
    TorchDispatchMode = object

# ---------------------------------------------------------------------------------------------
# The grid.

# The same two shapes as torch_reference.py (gpt2 = GPT-2 small, llama-small = hidden 512, 4
# layers, GQA 8/2 heads, vocab 32000), with model dropout 0 and sdpa attention, the library's
# default attention (EAGER below adds a few eager rows).
MODEL_NAMES = ["llama-small", "gpt2"]
ATTENTION = "sdpa"
MODEL_DROPOUT = 0.0

# base: how the frozen base model is held and computed.
#   bf16           the model built in bf16, no autocast (adapters in fp32: PEFT's
#                  autocast_adapter_dtype=True)
#   autocast-bf16  the model in fp32, forward and loss under torch.autocast("cpu", bf16), as
#                  Trainer does with bf16=True
#   nf4            QLoRA: from_pretrained with BitsAndBytesConfig(load_in_4bit, nf4, double
#                  quantisation, compute dtype bf16) and peft.prepare_model_for_kbit_training
#                  (which casts every non-4-bit bf16 parameter to fp32), under autocast bf16 as
#                  Trainer does with bf16=True
BASES = ["bf16", "autocast-bf16", "nf4"]

# checkpointing: off; non-reentrant (torch.utils.checkpoint use_reentrant=False); reentrant
# (use_reentrant=True, with model.enable_input_require_grads() so that the embedding output
# requires grad, as prepare_model_for_kbit_training and the PEFT recipes do).
CHECKPOINTING = ["off", "non-reentrant", "reentrant"]

BASELINE = {"base": "bf16", "lora_r": 8, "lora_dropout": 0.0, "targets": "default",
            "optimizer": "adamw"}

# One factor at a time around the baseline (LoRA r8, alpha 2r, PEFT's default target modules, no
# LoRA dropout, bf16 base, torch AdamW), each for every model, checkpointing kind, seq and batch.
VARIANTS = [
    {},
    {"lora_r": 16},
    {"lora_r": 64},
    {"targets": "all-linear"},
    {"lora_dropout": 0.05},
    {"base": "autocast-bf16"},
    {"optimizer": "adamw8bit"},
    {"base": "nf4"},
    {"base": "nf4", "targets": "all-linear"},
    {"base": "nf4", "targets": "all-linear", "optimizer": "adamw8bit"},
]
SEQS = [512]
BATCHES = [1, 2]
# Beyond that, llama-small (a step costs seconds) also at batch 4 (S=512) and at S=2048 (batch 1
# and 2), every variant and checkpointing kind.
EXTRA = [("llama-small", 512, [4]), ("llama-small", 2048, [1, 2])]
# Phi-3 (torch_reference.py's phi3-small: its fused qkv_proj and gate_up_proj are one adapter
# each) with the variants that name their targets: PEFT has no default for phi3.
FUSED_MODELS = ["phi3-small"]
FUSED_VARIANTS = [v for v in VARIANTS if v.get("targets") == "all-linear"]
# Eager attention, where the attention's output is a copy that only an o_proj that trains keeps:
# llama-small's baseline without checkpointing.
EAGER = [("llama-small", 512, [1, 2])]

FIELDS = ["model", "base", "lora_r", "lora_dropout", "targets", "checkpointing", "optimizer", "seq",
          "batch", "attention"]


def grid():
    keys = []
    plan = [(model, seq, BATCHES) for model in MODEL_NAMES + FUSED_MODELS for seq in SEQS] + EXTRA
    for model, seq, batches in plan:
        for variant in FUSED_VARIANTS if model in FUSED_MODELS else VARIANTS:
            for ckpt in CHECKPOINTING:
                for batch in batches:
                    k = dict(BASELINE)
                    k.update(variant)
                    k.update({"model": model, "checkpointing": ckpt, "seq": seq, "batch": batch,
                              "attention": ATTENTION})
                    keys.append({f: k[f] for f in FIELDS})
    for model, seq, batches in EAGER:
        for batch in batches:
            k = dict(BASELINE)
            k.update({"model": model, "checkpointing": "off", "seq": seq, "batch": batch,
                      "attention": "eager"})
            keys.append({f: k[f] for f in FIELDS})
    uniq = {row_id(k): k for k in keys}
    return sorted(uniq.values(), key=sort_key)


def sort_key(row):
    return reference_rows.sort_key(row, FIELDS)


def row_id(row):
    return reference_rows.row_id(row, FIELDS)


def matches(row, pattern):
    return reference_rows.matches(row, pattern, FIELDS)


# ---------------------------------------------------------------------------------------------
# The tracker.

class StorageTracker(TorchDispatchMode):
    """Counts live tensor storage bytes: every storage an operator returns is followed by a weak
    reference until it is freed, and tagged with what made it.

    Tags: the model state alive when tracking starts is sorted by what holds it (param_trainable,
    param_frozen, buffer, quant_state, opt_state); every storage made later is tagged by
    the phase it was made in (act: forward; backward: backward, the recomputation of
    checkpointed layers included; opt: the optimizer step). A parameter's gradient is retagged
    grad when autograd accumulates it, and the optimizer state made in the first step is retagged
    opt_state after it. Temporaries inside one operator (a fused kernel's workspace) are not seen.
    """

    def __init__(self):
        super().__init__()
        self.live = {}          # storage key -> [weakref, nbytes, tag]
        self.totals = collections.Counter()
        self.total = 0
        self.phase = "act"
        self.reset_peak()
        self.attention_ops = set()

    def reset_peak(self):
        self.peak = self.total
        self.peak_by = dict(self.totals)
        self.peak_phase = None
        self.peak_op = None

    def _freed(self, key, _ref=None):
        entry = self.live.pop(key, None)
        if entry is not None:
            self.totals[entry[2]] -= entry[1]
            self.total -= entry[1]

    def track(self, t, tag):
        if not isinstance(t, torch.Tensor) or t.device.type == "meta":
            return
        try:
            st = t.untyped_storage()
        except (RuntimeError, NotImplementedError):
            return
        key = st._cdata
        n = st.nbytes()
        entry = self.live.get(key)
        if entry is None:
            ref = weakref.ref(st, lambda r, k=key: self._freed(k))
            self.live[key] = [ref, n, tag]
            self.totals[tag] += n
            self.total += n
        elif entry[1] != n:             # resized in place
            self.totals[entry[2]] += n - entry[1]
            self.total += n - entry[1]
            entry[1] = n

    def retag(self, t, tag):
        try:
            key = t.untyped_storage()._cdata
        except (RuntimeError, NotImplementedError):
            return
        entry = self.live.get(key)
        if entry is not None and entry[2] != tag:
            self.totals[entry[2]] -= entry[1]
            self.totals[tag] += entry[1]
            entry[2] = tag

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        name = func.__name__
        if "scaled_dot_product" in name and "backward" not in name:
            self.attention_ops.add(name.split(".")[0])
        for t in tree_flatten(out)[0]:
            self.track(t, self.phase)
        if self.total > self.peak:
            self.peak = self.total
            self.peak_by = dict(self.totals)
            self.peak_phase = self.phase
            self.peak_op = str(func)
        return out


def _tensors_of(obj):
    if isinstance(obj, torch.Tensor):
        yield obj
    elif isinstance(obj, dict):
        for v in obj.values():
            yield from _tensors_of(v)
    elif isinstance(obj, (list, tuple)):
        for v in obj:
            yield from _tensors_of(v)


def _quant_state_tensors(model):
    for m in model.modules():
        qs = getattr(getattr(m, "weight", None), "quant_state", None)
        while qs is not None:
            for v in vars(qs).values():
                if isinstance(v, torch.Tensor):
                    yield v
            qs = getattr(qs, "state2", None)


def track_existing(tracker, model, optimizer):
    """Tags the model state alive now, by what holds it. Other tensors alive in the process (a
    library's constant tables, what an earlier row left) are not counted: which of them exist
    depends on what the process ran before, and the rows must not."""
    for p in model.parameters():
        tracker.track(p, "param_trainable" if p.requires_grad else "param_frozen")
        if p.grad is not None:
            tracker.track(p.grad, "grad")
    for b in model.buffers():
        tracker.track(b, "buffer")
    for t in _quant_state_tensors(model):
        tracker.track(t, "quant_state")
    if optimizer is not None:
        for t in _tensors_of(list(optimizer.state.values())):
            tracker.track(t, "opt_state")


# ---------------------------------------------------------------------------------------------
# Building a model.

_SAVED = {}


def _saved_model(model_name, seq):
    """A random model saved to a temporary directory, so that from_pretrained can quantise it."""
    key = (model_name, seq)
    if key not in _SAVED:
        torch.manual_seed(0)
        cfg = _ref.model_config(model_name, MODEL_DROPOUT, seq)
        model = transformers.AutoModelForCausalLM.from_config(cfg, dtype=torch.bfloat16)
        d = tempfile.mkdtemp(prefix=f"ftref-{model_name}-")
        model.save_pretrained(d)
        del model
        _SAVED[key] = d
    return _SAVED[key]


def build(row):
    import peft
    torch.manual_seed(0)
    cfg = _ref.model_config(row["model"], MODEL_DROPOUT, row["seq"])
    ckpt = row["checkpointing"]
    ckpt_kwargs = {"use_reentrant": ckpt == "reentrant"}
    if row["base"] == "nf4":
        bnb_cfg = transformers.BitsAndBytesConfig(
            load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_use_double_quant=True,
            bnb_4bit_compute_dtype=torch.bfloat16)
        model = transformers.AutoModelForCausalLM.from_pretrained(
            _saved_model(row["model"], row["seq"]), quantization_config=bnb_cfg,
            dtype=torch.bfloat16, device_map="cpu", attn_implementation=row["attention"])
        model = peft.prepare_model_for_kbit_training(
            model, use_gradient_checkpointing=ckpt != "off",
            gradient_checkpointing_kwargs=ckpt_kwargs if ckpt != "off" else None)
    else:
        dtype = torch.bfloat16 if row["base"] == "bf16" else torch.float32
        model = transformers.AutoModelForCausalLM.from_config(cfg, dtype=dtype,
                                                              attn_implementation=row["attention"])
        if ckpt != "off":
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=ckpt_kwargs)
            if ckpt == "reentrant":
                model.enable_input_require_grads()
    lora = peft.LoraConfig(task_type="CAUSAL_LM", r=row["lora_r"], lora_alpha=2 * row["lora_r"],
                           lora_dropout=row["lora_dropout"],
                           target_modules="all-linear" if row["targets"] == "all-linear" else None)
    model = peft.get_peft_model(model, lora)
    model.train()
    return model, cfg, lora


def make_optimizer(row, params):
    if row["optimizer"] == "adamw8bit":
        import bitsandbytes as bnb
        return bnb.optim.AdamW8bit(params)
    return torch.optim.AdamW(params)


def measure(row):
    gc.collect()
    model, cfg, lora = build(row)
    params = list(model.parameters())
    trainable = [p for p in params if p.requires_grad]
    optimizer = make_optimizer(row, trainable)
    autocast = row["base"] in ("autocast-bf16", "nf4")
    dtypes = collections.Counter()
    for p in params:
        dtypes[f"{'trainable' if p.requires_grad else 'frozen'}:{str(p.dtype).replace('torch.', '')}"] \
            += p.numel()
    torch.manual_seed(1)
    tracker = StorageTracker()
    got_grad = set()

    def on_grad(p):
        tracker.retag(p.grad, "grad")
        got_grad.add(id(p))

    for p in trainable:
        p.register_post_accumulate_grad_hook(on_grad)
    track_existing(tracker, model, optimizer)
    start_bytes = tracker.total
    with tracker:
        for iteration in range(2):
            tracker.phase = "input"
            ids = torch.randint(0, cfg.vocab_size, (row["batch"], row["seq"]))
            tracker.phase = "act"
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
                loss = model(input_ids=ids, labels=ids).loss
            tracker.phase = "backward"
            loss.backward()
            tracker.phase = "opt"
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            del loss, ids
            if iteration == 0:
                # track, not only retag: bitsandbytes' 8-bit optimizers share their quantisation
                # maps (2 KB) between instances in a process, made by whichever came first
                for t in _tensors_of(list(optimizer.state.values())):
                    tracker.track(t, "opt_state")
                    tracker.retag(t, "opt_state")
                steady_bytes = tracker.total
                tracker.reset_peak()
                got_grad.clear()
        end_bytes = tracker.total
    out = dict(row)
    targets = lora.target_modules
    out.update({
        "lora_alpha": lora.lora_alpha,
        "target_modules": sorted(targets) if isinstance(targets, (set, list)) else targets,
        "model_dtype": "fp32" if row["base"] == "autocast-bf16" else "bf16",
        "autocast": "bf16" if autocast else "off",
        "quant": "nf4, double quantisation, compute bf16" if row["base"] == "nf4" else "none",
        "attention": row["attention"],
        "attention_kernel": ",".join(sorted(tracker.attention_ops)) or "math",
        "params": sum(p.numel() for p in params),
        "trainable_params": sum(p.numel() for p in trainable),
        # parameter tensors that received a gradient in the measured iteration, of how many are
        # trainable: equal, or the adapters were cut off from the loss
        "trainable_tensors_with_grad": f"{len(got_grad)}/{len(trainable)}",
        "params_by_dtype": dict(sorted(dtypes.items())),
        "peak_bytes": int(tracker.peak),
        "by_category": {k: int(v) for k, v in sorted(tracker.peak_by.items()) if v},
        "phase": {"act": "forward", "backward": "backward", "opt": "optimizer"}.get(
            tracker.peak_phase, tracker.peak_phase),
        "peak_op": tracker.peak_op,
        "start_bytes": int(start_bytes),
        "steady_bytes": int(steady_bytes),
        "end_bytes": int(end_bytes),
    })
    return out


def measure_memtracker(row):
    """The same step under PyTorch's MemTracker (on the same real tensors): its peak and
    categories, for --cross-check."""
    gc.collect()
    model, cfg, _ = build(row)
    trainable = [p for p in model.parameters() if p.requires_grad]
    optimizer = make_optimizer(row, trainable)
    autocast = row["base"] in ("autocast-bf16", "nf4")
    torch.manual_seed(1)
    tracker = _ref.PeakTracker()
    tracker.skip_frozen(model)      # its gradient hooks fail on frozen parameters
    tracker.track_external(model, optimizer)
    with tracker:
        for iteration in range(2):
            ids = torch.randint(0, cfg.vocab_size, (row["batch"], row["seq"]))
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
                loss = model(input_ids=ids, labels=ids).loss
            loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            del loss, ids
            if iteration == 0:
                tracker.reset_peak()    # reset_mod_stats() alone keeps the global peak
    (_, by_ref), = tracker.get_tracker_snapshot("peak").items()
    by_category = {ref.name: int(by_ref.get(ref, 0)) for ref in _ref._mem_tracker._MemRefType}
    return int(by_ref[_ref._TOTAL]), {k: v for k, v in by_category.items() if v}


def _cross_worker(row):
    torch.set_num_threads(1)
    try:
        ours = measure(row)
        theirs, by_category = measure_memtracker(row)
        return (f"{row_id(row)}: StorageTracker {ours['peak_bytes']}, MemTracker {theirs} "
                f"({theirs - ours['peak_bytes']:+d} bytes) {by_category}")
    except Exception as e:
        return f"{row_id(row)}: ERROR {type(e).__name__}: {e}"[:400]


def cross_check(rows, jobs):
    import multiprocessing
    with multiprocessing.get_context("spawn").Pool(max(1, jobs), initializer=_quiet,
                                                   maxtasksperchild=1) as pool:
        for line in pool.imap(_cross_worker, rows):
            print(line, flush=True)


def _quiet():
    import logging
    import warnings
    warnings.filterwarnings("ignore")
    transformers.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    os.environ["HF_HUB_DISABLE_PROGRESS_BARS"] = "1"
    # bitsandbytes says once per process that an optional kernel package is missing
    logging.getLogger("bitsandbytes").setLevel(logging.ERROR)


def _worker(row):
    torch.set_num_threads(1)
    t0 = time.monotonic()
    try:
        out = measure(row)
    except Exception as e:   # a failing configuration is reported, not fatal to the others
        out = dict(row)
        out["error"] = f"{type(e).__name__}: {e}"[:300]
    return out, time.monotonic() - t0


def run(rows, jobs):
    results = []
    t0 = time.monotonic()

    def report(i, out, seconds):
        results.append(out)
        what = (f"ERROR {out['error']}" if "error" in out else
                f"{out['peak_bytes'] / 2**20:.1f} MiB peak in {out['phase']}")
        print(f"[{i}/{len(rows)}] {row_id(out)}: {what} ({seconds:.1f} s)", file=sys.stderr,
              flush=True)

    if jobs <= 1:
        _quiet()
        for i, row in enumerate(rows, 1):
            report(i, *_worker(row))
    else:
        import multiprocessing
        with multiprocessing.get_context("spawn").Pool(jobs, initializer=_quiet,
                                                       maxtasksperchild=4) as pool:
            for i, res in enumerate(pool.imap_unordered(_worker, rows), 1):
                report(i, *res)
    print(f"{len(rows)} rows in {time.monotonic() - t0:.0f} s", file=sys.stderr)
    results.sort(key=sort_key)
    return results


# ---------------------------------------------------------------------------------------------
# The JSON.

def document(rows):
    return {
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "peft": reference_rows.package_version("peft"),
        "bitsandbytes": reference_rows.package_version("bitsandbytes"),
        "device": "cpu",
        "autocast_device": "cpu",
        "tracker": "TorchDispatchMode following every tensor storage by weak reference, real CPU "
                   "tensors (scripts/torch_finetune_reference.py StorageTracker)",
        "loop": "trainer: loss = model(input_ids, labels=input_ids).loss; loss.backward(); "
                "optimizer.step(); optimizer.zero_grad(set_to_none=True); two iterations, the "
                "second measured",
        "models": {name: _ref.config_dict(name) for name in MODEL_NAMES + FUSED_MODELS},
        "model_overrides": {"dropout": MODEL_DROPOUT, "attn_implementation": ATTENTION + " (eager "
                            "where a row says so)"},
        "rows": rows,
    }


def main():
    ap = argparse.ArgumentParser(
        description="Measure the peak of live tensor bytes of a PEFT LoRA / bitsandbytes QLoRA "
        "fine-tuning step on real CPU tensors and write tests/data/torch_finetune_reference.json.",
        epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--check", action="store_true",
                    help="re-measure and compare with the committed JSON; exit 1 on any difference")
    ap.add_argument("--only", metavar="PATTERN", default="",
                    help="only the rows whose id matches (space-separated field=value regexes)")
    ap.add_argument("--out", metavar="PATH", default=DEFAULT_OUT,
                    help="the JSON to write, or with --check to compare with")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1,
                    help="processes measuring in parallel (default: the number of cores)")
    ap.add_argument("--list", action="store_true", help="print the row ids that would run, and stop")
    ap.add_argument("--cross-check", action="store_true",
                    help="measure the rows also under PyTorch's MemTracker and print both peaks; "
                    "writes nothing")
    args = ap.parse_args()

    rows = reference_rows.select(grid(), args, FIELDS, fail)
    if rows is None:
        return 0
    if args.cross_check:
        cross_check(rows, args.jobs)
        return 0

    measured = run(rows, args.jobs)
    doc = document(measured)
    if args.check:
        return 0 if reference_rows.check(measured, args.out, doc, FIELDS,
                                         ["torch", "transformers", "peft", "bitsandbytes"], fail,
                                         ignore=["per_sample_bytes"]) else 1
    reference_rows.merge_subset(doc, args.out, FIELDS, bool(args.only))
    reference_rows.add_per_sample(doc["rows"], FIELDS)
    reference_rows.write(doc, args.out, FIELDS, False, sort_keys=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

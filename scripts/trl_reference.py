#!/usr/bin/env python3
"""Measures the memory of one TRL preference-training step (DPOTrainer, KTOTrainer) on real CPU
tensors.

The measurement is scripts/torch_finetune_reference.py's, imported from it (its StorageTracker,
which follows every tensor storage by weak reference, and track_existing). What runs is TRL's own
trainer: a real `trl.DPOTrainer` / `trl.KTOTrainer` (TRL 1.16.0) built with `DPOConfig` /
`KTOConfig` on a small synthetic text dataset that a local word-level tokenizer turns into exactly
`prompt` + (`seq` - `prompt`) tokens per sequence (the completion text has seq - prompt - 1 words,
TRL appends the EOS token), so that no row pads. One batch is taken from
`trainer.get_train_dataloader()`, the optimizer is `trainer.create_optimizer()` (transformers'
default `adamw_torch_fused`: torch AdamW with fused=True), gradient checkpointing is switched on
the way `Trainer.train()` does it, and two iterations of

    loss = trainer.training_step(model, batch)   # TRL's compute_loss, then accelerator.backward
    optimizer.step(); optimizer.zero_grad(set_to_none=True)

run, the second one measured. `Trainer.training_step` does nothing that allocates besides
`loss / gradient_accumulation_steps` (one scalar) before the backward. The result is
tests/data/trl_reference.json.

The grid: model (llama-small, gpt2: torch_reference.py's shapes, sdpa, dropout 0) x trainer (dpo,
kto) x finetune (full: the bf16 model, every parameter trained; lora: the same bf16 base,
LoraConfig(task_type="CAUSAL_LM", r=8, lora_alpha=16, lora_dropout=0.0) with PEFT's default target
modules, passed to the trainer as `peft_config`, adapters in fp32 as PEFT makes them) x reference
(copy: an explicit bf16 `ref_model` built like the policy's base, frozen, without adapters;
adapters: lora only, `ref_model=None`, TRL disables the adapters for the reference forward;
precomputed: `precompute_ref_log_probs=True`, `ref_model=None`, the reference log-probs computed
at trainer init and read from the batch) x checkpointing (off; non-reentrant:
`gradient_checkpointing=True`, `gradient_checkpointing_kwargs={"use_reentrant": False}`) x batch.
seq 512, prompt 128 everywhere.

batch is `per_device_train_batch_size`: for DPO a batch of pairs (the policy sees 2*batch
sequences: chosen then rejected), for KTO a batch of examples (the policy sees batch sequences,
plus as many KL sequences: each prompt with the completion of its neighbour in the batch, rotated
by one). KTO refuses a batch of 1 (its KL term needs a mismatched pair within the batch: "Actual
(not effective) batch size must be > 1"), so KTO is measured at batch 2 and 4, DPO at 1 and 2.
KTO's labels alternate desirable, undesirable, ... from the first example.

Per row, besides the peak and its categories: the phase of the peak (forward: the policy's
forward with grad and the loss; nograd: a forward under torch.no_grad, that is the reference
forwards and KTO's KL forward; backward; optimizer), `phase_peaks` (the highest total seen in each
phase), `forward_bytes` (live when compute_loss returns the loss, before the backward) and
`forwards`: each model forward of the measured step in call order, with the live bytes when it
starts, its highest total and the live bytes when it returns. Storages made in a no-grad forward
are tagged `nograd` (rather than `act`); the phase switches by forward pre/post hooks on the
policy (and reference) model that look at torch.is_grad_enabled() when the forward is called.
torch.is_grad_enabled() inside __torch_dispatch__ would not do: a torch.autograd.Function's
forward runs with grad mode off, so TRL's fused LM head in the policy forward would read as no-grad.

Nothing in the build or the tests needs this script or torch: the JSON is committed.
"""

import argparse
import collections
import gc
import os
import random
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import reference_rows  # noqa: E402  (pure standard library)

DEFAULT_OUT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..",
                                            "tests", "data", "trl_reference.json"))

PINNED = "torch==2.15.0 transformers==5.23.0 peft==0.21.2 trl==1.16.0"

FIELDS = ["model", "trainer", "finetune", "reference", "checkpointing", "seq", "prompt", "batch"]

EXAMPLES = f"""
examples:
  measure everything and (re)write tests/data/trl_reference.json (about 50 CPU minutes: 25
  minutes with --jobs 2 on 2 idle cores; one fresh process a row):
    ~/venv-torch/bin/python scripts/trl_reference.py --jobs 2
  re-measure and compare with the committed JSON, exit 1 on any byte of difference:
    ~/venv-torch/bin/python scripts/trl_reference.py --check
  only some rows (each space-separated term is a regular expression matching one field=value of
  the row id in full):
    scripts/trl_reference.py --check --only 'model=llama-small'
    scripts/trl_reference.py --list --only 'trainer=kto reference=(copy|adapters)'
  row id fields: {' '.join(FIELDS)}

setup (torch is never needed by the build or the tests; keep it out of the repository; nothing is
downloaded: the models are built from their configs, the tokenizer locally):
  python3 -m venv ~/venv-torch
  ~/venv-torch/bin/pip install {PINNED}
"""


fail = reference_rows.failing("trl_reference.py")


try:
    import torch
    import transformers
except ImportError as e:
    reference_rows.import_failed(e, fail, __name__ == "__main__", reference_rows.venv_setup(PINNED))
    torch = None
if torch is not None:
    import torch_finetune_reference as ft
    _ref = ft._ref

# ---------------------------------------------------------------------------------------------
# The grid.

MODEL_NAMES = ["llama-small", "gpt2"]
ATTENTION = "sdpa"
MODEL_DROPOUT = 0.0
TRAINERS = ["dpo", "kto"]
REFERENCES = {"full": ["copy", "precomputed"], "lora": ["copy", "adapters", "precomputed"]}
CHECKPOINTING = ["off", "non-reentrant"]
SEQ, PROMPT = 512, 128
# KTO needs at least two examples a batch for its KL term
BATCHES = {"dpo": [1, 2], "kto": [2, 4]}
LORA = {"r": 8, "lora_alpha": 16, "lora_dropout": 0.0}
DATA_SEED = 1234


def grid():
    keys = []
    for model in MODEL_NAMES:
        for trainer in TRAINERS:
            for finetune, references in REFERENCES.items():
                for reference in references:
                    for ckpt in CHECKPOINTING:
                        for batch in BATCHES[trainer]:
                            keys.append(dict(zip(FIELDS, [model, trainer, finetune, reference, ckpt,
                                                          SEQ, PROMPT, batch])))
    return sorted(keys, key=sort_key)


def sort_key(row):
    return reference_rows.sort_key(row, FIELDS)


def row_id(row):
    return reference_rows.row_id(row, FIELDS)


# ---------------------------------------------------------------------------------------------
# The tracker: torch_finetune_reference's, with a no-grad forward phase and the highest total of
# each phase and of each model forward.

if torch is not None:
    class PhaseTracker(ft.StorageTracker):
        """StorageTracker, plus: phase "nograd" (set by the forward hooks of measure()), the highest
        total seen in each phase (phase_peaks) and in the current window (a model forward)."""

        def __init__(self):
            super().__init__()
            self.phase_peaks = {}
            self.window_peak = None

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = super().__torch_dispatch__(func, types, args, kwargs)
            if self.total > self.phase_peaks.get(self.phase, -1):
                self.phase_peaks[self.phase] = self.total
            if self.window_peak is not None and self.total > self.window_peak:
                self.window_peak = self.total
            return out

        def reset_peak(self):
            super().reset_peak()
            self.phase_peaks = {}


PHASE_NAMES = {"act": "forward", "nograd": "nograd", "backward": "backward", "opt": "optimizer"}


# ---------------------------------------------------------------------------------------------
# Data: a word-level tokenizer over the model's vocabulary (word i is token i) and text whose
# token counts are exact.

SPECIAL = ["<unk>", "<s>", "</s>"]


def tokenizer(vocab_size):
    from tokenizers import Tokenizer, models, pre_tokenizers
    vocab = {t: i for i, t in enumerate(SPECIAL)}
    vocab.update({f"t{i}": i for i in range(len(SPECIAL), vocab_size)})
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    # no post-processor: no BOS is added; "</s>" is a special token, so TRL's EOS appended to a
    # completion ("... t17</s>") is a token of its own
    return transformers.PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>",
                                                bos_token="<s>", eos_token="</s>")


def dataset(row, vocab_size):
    """`batch` examples: a prompt of `prompt` words, completions of seq - prompt - 1 words (TRL
    appends the EOS token), each word a random token."""
    import datasets
    rng = random.Random(DATA_SEED)
    first = len(SPECIAL)

    def words(n):
        return " ".join(f"t{rng.randrange(first, vocab_size)}" for _ in range(n))

    n, completion = row["batch"], row["seq"] - row["prompt"] - 1
    prompts = [words(row["prompt"]) for _ in range(n)]
    if row["trainer"] == "dpo":
        return datasets.Dataset.from_dict({
            "prompt": prompts,
            "chosen": [" " + words(completion) for _ in range(n)],
            "rejected": [" " + words(completion) for _ in range(n)]})
    return datasets.Dataset.from_dict({
        "prompt": prompts,
        "completion": [" " + words(completion) for _ in range(n)],
        "label": [i % 2 == 0 for i in range(n)]})


# ---------------------------------------------------------------------------------------------
# Building the trainer and measuring its step.

def _base_model(cfg):
    torch.manual_seed(0)
    return transformers.AutoModelForCausalLM.from_config(cfg, dtype=torch.bfloat16,
                                                         attn_implementation=ATTENTION)


def build(row, workdir):
    import peft
    import trl
    cfg = _ref.model_config(row["model"], MODEL_DROPOUT, row["seq"])
    model = _base_model(cfg)
    ref_model = None
    if row["reference"] == "copy":
        ref_model = _base_model(cfg)            # the same weights, storages of its own
        ref_model.requires_grad_(False)
        ref_model.eval()
    ckpt = row["checkpointing"] != "off"
    common = dict(
        output_dir=workdir, report_to=[], use_cpu=True, bf16=False,
        per_device_train_batch_size=row["batch"], gradient_checkpointing=ckpt,
        gradient_checkpointing_kwargs={"use_reentrant": False} if ckpt else None,
        max_length=2 * row["seq"], precompute_ref_log_probs=row["reference"] == "precomputed",
        logging_steps=10**6, save_strategy="no", dataloader_num_workers=0,
        remove_unused_columns=True)
    config_cls, trainer_cls = ((trl.DPOConfig, trl.DPOTrainer) if row["trainer"] == "dpo" else
                               (trl.KTOConfig, trl.KTOTrainer))
    args = config_cls(**common)
    lora = peft.LoraConfig(task_type="CAUSAL_LM", **LORA) if row["finetune"] == "lora" else None
    trainer = trainer_cls(model=model, ref_model=ref_model, args=args,
                          train_dataset=dataset(row, cfg.vocab_size),
                          processing_class=tokenizer(cfg.vocab_size), peft_config=lora)
    # what Trainer.train() does before the loop: activation checkpointing
    if trainer.args.activation_checkpointing:
        gc_kwargs = dict(trainer.args.activation_checkpointing_kwargs or {})
        every_n_layers = gc_kwargs.pop("every_n_layers", 1)
        offload = gc_kwargs.pop("offload", False)
        trainer.model.activation_checkpointing_enable(
            activation_checkpointing_kwargs=gc_kwargs or None, every_n_layers=every_n_layers,
            offload=offload)
    trainer.current_gradient_accumulation_steps = 1
    return trainer, cfg, lora


def _dtype(t):
    return str(t.dtype).replace("torch.", "")


def _check_batch(row, batch):
    sequences = 2 * row["batch"] if row["trainer"] == "dpo" else row["batch"]
    names = ["input_ids"] + (["KL_input_ids"] if row["trainer"] == "kto" else [])
    for name in names:
        shape = tuple(batch[name].shape)
        if shape != (sequences, row["seq"]):
            raise RuntimeError(f"{name} is {shape}, not ({sequences}, {row['seq']})")
        completion = batch[name.replace("input_ids", "completion_mask")].sum(-1).tolist()
        if completion != [row["seq"] - row["prompt"]] * sequences:
            raise RuntimeError(f"completion lengths {completion}, not {row['seq'] - row['prompt']}")
    return sequences


def measure(row):
    gc.collect()
    with tempfile.TemporaryDirectory(prefix="trlref-") as workdir:
        return _measure(row, workdir)


def _measure(row, workdir):
    trainer, cfg, lora = build(row, workdir)
    model, ref_model = trainer.model, trainer.ref_model
    loader = trainer.get_train_dataloader()
    batch = dict(next(iter(loader)))
    del loader
    sequences = _check_batch(row, batch)
    optimizer = trainer.create_optimizer()
    named = list(model.named_parameters())
    params = [p for _, p in named]
    trainable = [p for p in params if p.requires_grad]
    ref_params = list(ref_model.parameters()) if ref_model is not None else []
    dtypes = collections.Counter()
    for p in params:
        dtypes[f"{'trainable' if p.requires_grad else 'frozen'}:{_dtype(p)}"] += p.numel()

    torch.manual_seed(1)
    tracker = PhaseTracker()
    got_grad = set()

    def on_grad(p):
        tracker.retag(p.grad, "grad")
        got_grad.add(id(p))

    for p in trainable:
        p.register_post_accumulate_grad_hook(on_grad)

    # the forwards: a forward called with grad mode off (reference, KL) is phase "nograd"
    forwards = []

    def pre_hook(which):
        def hook(module, args):
            grad = torch.is_grad_enabled()
            if not grad and tracker.phase == "act":
                tracker.phase = "nograd"
            forwards.append({"model": which, "grad": grad, "start_bytes": tracker.total})
            tracker.window_peak = tracker.total
        return hook

    def post_hook(module, args, output):
        forwards[-1].update({"peak_bytes": tracker.window_peak, "end_bytes": tracker.total})
        tracker.window_peak = None
        if tracker.phase == "nograd":
            tracker.phase = "act"

    hooked = [(model, "policy")] + ([(ref_model, "ref")] if ref_model is not None else [])
    for module, which in hooked:
        module.register_forward_pre_hook(pre_hook(which))
        module.register_forward_hook(post_hook)

    # the end of the forward: when compute_loss returns the loss, before training_step's backward
    marks = {}
    compute_loss = trainer.compute_loss

    def compute_loss_marked(*args, **kwargs):
        loss = compute_loss(*args, **kwargs)
        marks["forward_bytes"] = tracker.total
        tracker.phase = "backward"
        return loss

    trainer.compute_loss = compute_loss_marked

    ft.track_existing(tracker, model, optimizer)
    for p in ref_params:
        tracker.track(p, "ref_param")
    if ref_model is not None:
        for b in ref_model.buffers():
            tracker.track(b, "ref_buffer")
    for t in ft._tensors_of(batch):
        tracker.track(t, "input")
    start_bytes = tracker.total
    with tracker:
        for iteration in range(2):
            forwards.clear()
            tracker.phase = "act"
            loss = trainer.training_step(model, batch)
            tracker.phase = "opt"
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            del loss
            if iteration == 0:
                for t in ft._tensors_of(list(optimizer.state.values())):
                    tracker.retag(t, "opt_state")
                steady_bytes = tracker.total
                tracker.reset_peak()
                got_grad.clear()
        end_bytes = tracker.total
    for f in forwards:
        f["sequences"] = sequences
    opt_group = optimizer.param_groups[0]
    out = dict(row)
    out.update({
        "rows": sequences,
        "model_dtype": "bf16",
        "lora": None if lora is None else {
            "r": lora.r, "lora_alpha": lora.lora_alpha, "lora_dropout": lora.lora_dropout,
            "target_modules": sorted(lora.target_modules)},
        "optimizer": (f"{type(optimizer).__module__}.{type(optimizer).__name__}"
                      f"(fused={opt_group.get('fused')}, foreach={opt_group.get('foreach')})"),
        "attention_kernel": ",".join(sorted(tracker.attention_ops)) or "math",
        "params": sum(p.numel() for p in params),
        "trainable_params": sum(p.numel() for p in trainable),
        "ref_params": sum(p.numel() for p in ref_params),
        "trainable_tensors_with_grad": f"{len(got_grad)}/{len(trainable)}",
        "params_by_dtype": dict(sorted(dtypes.items())),
        "peak_bytes": int(tracker.peak),
        "by_category": {k: int(v) for k, v in sorted(tracker.peak_by.items()) if v},
        "phase": PHASE_NAMES.get(tracker.peak_phase, tracker.peak_phase),
        "peak_op": tracker.peak_op,
        "start_bytes": int(start_bytes),
        "forward_bytes": int(marks["forward_bytes"]),
        "steady_bytes": int(steady_bytes),
        "end_bytes": int(end_bytes),
        "phase_peaks": {PHASE_NAMES.get(k, k): int(v) for k, v in tracker.phase_peaks.items()},
        "forwards": [{k: f[k] for k in ["model", "grad", "sequences", "start_bytes", "peak_bytes",
                                        "end_bytes"]} for f in forwards],
    })
    return out


def _worker(row):
    torch.set_num_threads(1)
    t0 = time.monotonic()
    try:
        out = measure(row)
    except Exception as e:   # a failing configuration is reported, not fatal to the others
        out = dict(row)
        out["error"] = f"{type(e).__name__}: {e}"[:300]
    return out, "cpu", time.monotonic() - t0


def _line(out):
    if "error" in out:
        return f"ERROR {out['error']}"
    return f"{out['peak_bytes'] / 2**20:.1f} MiB peak in {out['phase']}"


def _keep_heap():
    """glibc malloc: no mmap, no trimming, so that the [tokens, vocabulary] fp32 temporaries of the
    fused LM head reuse pages rather than fault fresh ones in every time (a third of the run
    time). Speed only: the tracker counts tensor storage bytes, not what malloc holds."""
    try:
        import ctypes
        libc = ctypes.CDLL("libc.so.6")
    except OSError:
        return
    M_TRIM_THRESHOLD, M_MMAP_MAX = -1, -4
    libc.mallopt(M_MMAP_MAX, 0)
    libc.mallopt(M_TRIM_THRESHOLD, 2**31 - 1)


def _quiet():
    import logging
    _keep_heap()
    os.environ["HF_HUB_OFFLINE"] = "1"
    os.environ["HF_DATASETS_DISABLE_PROGRESS_BARS"] = "1"
    os.environ["TQDM_DISABLE"] = "1"
    ft._quiet()
    import datasets
    datasets.disable_progress_bars()
    datasets.logging.set_verbosity_error()
    for name in ["trl", "accelerate", "peft"]:
        logging.getLogger(name).setLevel(logging.ERROR)


def _order(row):
    """Large rows first, so that the pool does not end on one alone."""
    return (row["model"] != "gpt2", row["finetune"] != "full", -row["batch"], row_id(row))


def add_per_sample(rows):
    """per_sample_bytes: reference_rows.add_per_sample's (peak(B) - peak(1)) / (B - 1) for DPO;
    KTO has no batch 1, so there (peak(B) - peak(2)) / (B - 2): bytes per pair for DPO, per
    example (and its KL sequence) for KTO."""
    reference_rows.add_per_sample(rows, FIELDS)
    by_id = {row_id(r): r for r in rows}
    for r in rows:
        first = min(BATCHES[r["trainer"]])
        if first > 1 and r["batch"] > first and "peak_bytes" in r:
            base = by_id.get(row_id(dict(r, batch=first)))
            if base is not None and "peak_bytes" in base:
                r["per_sample_bytes"] = (r["peak_bytes"] - base["peak_bytes"]) // (r["batch"] - first)


# ---------------------------------------------------------------------------------------------
# The JSON: torch_finetune_reference.py's layout.

def document(rows):
    from trl.kernels import chunked_logprob
    from trl.trainer import utils as trl_utils
    return {
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "peft": reference_rows.package_version("peft"),
        "trl": reference_rows.package_version("trl"),
        "accelerate": reference_rows.package_version("accelerate"),
        "device": "cpu",
        "tracker": "TorchDispatchMode following every tensor storage by weak reference, real CPU "
                   "tensors (scripts/torch_finetune_reference.py StorageTracker, imported by "
                   "scripts/trl_reference.py, which adds the phase nograd and phase_peaks)",
        "loop": "trainer = trl.DPOTrainer/KTOTrainer(model, ref_model, DPOConfig/KTOConfig(...), "
                "train_dataset, processing_class, peft_config); model.activation_checkpointing_"
                "enable(...) as Trainer.train() does where checkpointing is on; batch = "
                "next(iter(trainer.get_train_dataloader())); optimizer = "
                "trainer.create_optimizer(); then twice: loss = trainer.training_step(model, "
                "batch) (compute_loss, loss / 1, accelerator.backward(loss)); optimizer.step(); "
                "optimizer.zero_grad(set_to_none=True); the second iteration measured",
        "trainer_config": {
            "common": "output_dir a temporary directory, report_to=[], use_cpu=True, bf16=False "
                      "(the model is bf16 already: no autocast), per_device_train_batch_size="
                      "batch, max_length=2*seq (nothing truncated), logging_steps=10**6, "
                      "save_strategy='no', dataloader_num_workers=0, remove_unused_columns=True, "
                      "the trainers' defaults otherwise (DPO loss_type sigmoid, KTO loss_type kto "
                      "with its KL term, disable_dropout, seed 42, optim adamw_torch_fused, "
                      "learning_rate 1e-6, weight_decay 0)",
            "checkpointing": {"off": "gradient_checkpointing=False",
                              "non-reentrant": "gradient_checkpointing=True, "
                                               "gradient_checkpointing_kwargs={'use_reentrant': "
                                               "False}"},
            "reference": {"copy": "ref_model: a second bf16 model built like the policy's base "
                                  "(no adapters), requires_grad_(False), eval()",
                          "adapters": "ref_model=None with a LoRA policy: TRL disables the "
                                      "adapters for the reference forward",
                          "precomputed": "ref_model=None, precompute_ref_log_probs=True: the "
                                         "reference log-probs are computed at trainer init and "
                                         "read from the batch"},
            "finetune": {"full": "every parameter of the bf16 model trained",
                         "lora": f"peft_config=LoraConfig(task_type='CAUSAL_LM', {LORA}), PEFT's "
                                 f"default target modules, adapters fp32"},
        },
        "dataset": f"batch examples of text over a word-level tokenizer (word tN is token N), "
                   f"prompt {PROMPT} tokens, completions {SEQ - PROMPT - 1} tokens plus the EOS "
                   f"TRL appends: every sequence exactly seq={SEQ} tokens, no padding. DPO: "
                   f"prompt/chosen/rejected; KTO: prompt/completion/label, labels True, False, "
                   f"True, ...; its KL sequences are the prompts with the completions rotated by "
                   f"one within the batch, {SEQ} tokens too",
        "fused_lm_head": {
            "triton_on_cpu": bool(chunked_logprob._use_triton(torch.device("cpu"))),
            "token_chunk": chunked_logprob.TOKEN_CHUNK_SIZE,
            "vocab_chunk": trl_utils._CHUNKED_LOGPROB_CHUNK_SIZE,
            "scored_positions": "every position: rows * (seq - 1) (only the labelled ones with "
                                "Triton)",
        },
        "models": {name: _ref.config_dict(name) for name in MODEL_NAMES},
        "model_overrides": {"dropout": MODEL_DROPOUT, "attn_implementation": ATTENTION},
        "fields": {
            "rows": "sequences the policy's forward with grad sees (DPO 2*batch, KTO batch)",
            "phase": "of the peak: forward (the policy forward with grad and the loss), nograd (a "
                     "forward under no_grad: reference, KTO KL), backward, optimizer",
            "phase_peaks": "the highest live total seen in each phase of the measured iteration",
            "forward_bytes": "live when compute_loss returns the loss, before the backward",
            "forwards": "each model forward of the measured iteration in call order: which model, "
                        "grad mode, sequences, live bytes at its call, its highest, at its return",
            "by_category": "at the peak: param_trainable, param_frozen, buffer, ref_param, "
                           "ref_buffer, input (the batch), opt_state, grad, act (made in the "
                           "forward with grad), nograd (made in a no-grad forward), backward, opt",
            "per_sample_bytes": "(peak(B) - peak(B0)) / (B - B0), B0 the smallest batch (DPO 1, "
                                "KTO 2)",
        },
        "rows": rows,
    }


def main():
    ap = argparse.ArgumentParser(
        description="Measure the peak of live tensor bytes of a TRL DPO / KTO training step (full "
        "or LoRA, reference model, adapters off or precomputed reference log-probs) on real CPU "
        "tensors and write tests/data/trl_reference.json.",
        epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    reference_rows.add_arguments(ap, DEFAULT_OUT)
    args = ap.parse_args()

    rows = reference_rows.select(grid(), args, FIELDS, fail)
    if rows is None:
        return 0

    measured, _ = reference_rows.measure_rows(rows, args.jobs, _worker, _quiet, _line, FIELDS,
                                              order=_order, tasks_per_process=1)
    _quiet()
    doc = document(measured)
    if args.check:
        return 0 if reference_rows.check(measured, args.out, doc, FIELDS,
                                         ["torch", "transformers", "peft", "trl"], fail,
                                         ignore=["per_sample_bytes"]) else 1
    reference_rows.merge_subset(doc, args.out, FIELDS, bool(args.only))
    add_per_sample(doc["rows"])
    reference_rows.write(doc, args.out, FIELDS, False, sort_keys=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

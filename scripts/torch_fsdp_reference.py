#!/usr/bin/env python3
"""Measures the per-rank memory of one FSDP2 training step of a Hugging Face model without a GPU.

Each row builds a model with transformers' AutoModelForCausalLM.from_config (bf16 weights, sdpa
attention) under PyTorch's FakeTensorMode (no real memory), optionally wraps it in a PEFT LoRA
adapter and enables gradient checkpointing, shards it with FSDP2 (torch.distributed.fsdp.
fully_shard) over a fake process group of N ranks, and runs two training iterations under
PyTorch's FSDPMemTracker (torch.distributed._tools.fsdp2_mem_tracker), the way torchtitan's
scripts/estimate/estimation.py does. It records rank 0's peak of the second iteration (and of
the first), by the tracker's categories. The result, tests/data/torch_fsdp_reference.json, is the
reference a sharded (FSDP) profile of vrambench is checked against.

How a row is set up (what torch 2.15 needs for this to run on a CPU-only machine):

- Process group: torch.distributed.init_process_group("fake", rank=0, world_size=N,
  store=FakeStore()) (FakeStore from torch.testing._internal.distributed.fake_pg). Collectives
  return at once and move no data; rank 0 stands for every rank (all ranks hold the same shapes,
  up to FSDP's padding of dim 0 to a multiple of N). The group is destroyed after each row, so one
  process measures rows of different world sizes.
- Device mesh: init_device_mesh("cpu", (N,)), created *outside* FakeTensorMode: DeviceMesh's
  constructor calls .tolist() on its rank tensor, which a fake tensor refuses
  (DataDependentOutputException). Fake tensors live on "cpu" as in scripts/torch_reference.py
  (fake cuda tensors cannot run backward without a GPU).
- Model: AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16, attn_implementation=
  "sdpa") under FakeTensorMode. No MixedPrecisionPolicy: parameters, gradients, all-gather and
  reduce-scatter buffers and AdamW state are all in the parameters' dtype.
- LoRA (adapter=lora-r16): PEFT moves each new adapter weight to its base layer's device, which
  fails under FakeTensorMode, and a llama3-8b built on real tensors would need 16 GB of RAM and
  minutes of random init. So the model is built on the meta device, get_peft_model(task_type
  CAUSAL_LM, r=16, lora_alpha=32, lora_dropout=0.0, PEFT's default target modules: q_proj and
  v_proj for llama) is applied there, and every meta parameter and buffer is then replaced by an
  empty fake cpu tensor of the same shape and dtype (tied weights stay tied). PEFT's default
  autocast_adapter_dtype=True makes the adapter weights fp32 on the bf16 base, so with LoRA each
  FSDP unit mixes bf16 frozen and fp32 trainable parameters (FSDP2 accepts this without a
  MixedPrecisionPolicy); their gradients and AdamW state are fp32.
- Checkpointing (checkpointing=on): model.gradient_checkpointing_enable(
  gradient_checkpointing_kwargs={"use_reentrant": False}), before sharding (Trainer enables it
  before accelerate prepares the model).
- FSDP2: fully_shard(layer, mesh=mesh) for every decoder layer (model.model.layers; under PEFT the
  base model's layers), then fully_shard(model, mesh=mesh) on the root (the PeftModel under PEFT),
  reshard_after_forward left at its default (None: layers reshard after forward, the root, found
  at lazy init, does not). The root unit holds what no layer holds: the embedding, the final norm
  and the lm_head, so it stays unsharded from the forward to the end of backward. Note:
  accelerate 1.15's fsdp2_prepare_model additionally carves the input embedding into its own
  unit (resharded after forward) and [final norm, lm_head] into one unit with
  reshard_after_forward=False; these rows use the plain per-layer + root wrapping.
- Optimizer: torch.optim.AdamW(trainable parameters, foreach=False) on the sharded (DTensor)
  parameters, so its state is per-rank shards. AdamW creates its state lazily, in the first step.
- Loop, as transformers' Trainer: loss = model(input_ids=ids, labels=ids).loss; loss.backward();
  optimizer.step(); optimizer.zero_grad(set_to_none=True); the output object is dropped before
  backward. One batch of token ids is made before the tracker starts and tagged with
  tracker.track_inputs, and both iterations use it.
- DTensor's sharding propagation: for an op on DTensors (here only AdamW's step on the sharded
  parameters) DTensor computes the output's global shape by running the op on global-shape fake
  tensors, under `detect_fake_mode() or FakeTensorMode()`, i.e. under *our* FakeTensorMode.
  FSDPMemTracker skips those ops only if they run under another fake mode than the one active
  at its entry (pytorch/pytorch#183970), so as torchtitan runs it, it counts them: transient
  global-shape tensors (up to 3 x the full embedding, 2.7 GiB for llama3-8b at world 4) in the
  optimizer step, only the first time a process meets an op signature (the propagation is
  lru_cached process-wide), so a first iteration's peak depended on which rows the process had
  measured before. While measuring, torch.distributed.tensor._sharding_prop.detect_fake_mode is
  patched to return None: the propagation runs under a fresh FakeTensorMode of its own and the
  tracker skips it, as it intends. (It never touched a second iteration's peak: the cache is
  warm by then.)
- Tracker: FSDPMemTracker(model, optimizer), entered inside FakeTensorMode (as torchtitan does).
  After the first iteration its module stats are reset (reset_mod_stats(), which the tracker
  demands before a second forward of the root) and its global peak restarts from what is live, so
  the row's peak is the second iteration's alone. A subclass notes, at the moment of the peak, the
  phase (forward, backward, optimizer), the module the step was in (peak_module), the last FSDP
  hook entered and its unit (fsdp_hook, e.g. "pre_backward FSDPLlamaForCausalLM.model.layers.1"),
  the tracker's FSDP state (PRE_FW, FW, POST_FW, PRE_BW, BW, POST_BW) and whether the peak came
  during the recomputation of a checkpointed unit (in_recompute).

A row: its id fields (model, seq, world, adapter, checkpointing, batch); params and
trainable_params (elements); param_bytes (the unsharded parameters) and sharded_param_bytes
(rank 0's local shards, param_bytes / world up to dim-0 padding); peak_bytes and by_category at
the second iteration's peak (the tracker's categories: SHARDED_PARAM, UNSHARDED_PARAM, BUFFER,
SHARDED_GRAD, UNSHARDED_GRAD, ACT, TEMP, ALL_GATHER, REDUCE_SCATTER, OPT, INP; live storage bytes,
exact on cpu, no allocator rounding); phase, peak_module, fsdp_hook, fsdp_state, in_recompute
(where that peak was); first_iteration (the same for the first iteration, before AdamW's state
exists).

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
                                            "tests", "data", "torch_fsdp_reference.json"))

# The versions the committed JSON was measured with; another version may legitimately differ.
PINNED = "torch==2.15.0 transformers==5.23.0 peft==0.21.2"

EXAMPLES = f"""
examples:
  measure everything and (re)write tests/data/torch_fsdp_reference.json (about 13 minutes on 2
  cores: a llama3-8b row takes 20-85 s, a llama-small row 2-5 s):
    ~/venv-torch/bin/python scripts/torch_fsdp_reference.py
  re-measure and compare with the committed JSON, exit 1 on any byte of difference:
    ~/venv-torch/bin/python scripts/torch_fsdp_reference.py --check
  only some rows: every space-separated term is a regular expression that must match one
  field of the row id in full (field=value, as printed in the progress lines):
    scripts/torch_fsdp_reference.py --check --only 'model=llama-small world=8'
    scripts/torch_fsdp_reference.py --only 'model=llama3-8b adapter=none' --out /tmp/x.json
    scripts/torch_fsdp_reference.py --list --only 'adapter=lora.*'
  row id fields: model seq world adapter checkpointing batch

setup (torch is never needed by the build or the tests; keep it out of the repository):
  python3 -m venv ~/venv-torch
  ~/venv-torch/bin/pip install {PINNED}
"""


fail = reference_rows.failing("torch_fsdp_reference.py")


try:
    import torch
    import torch.distributed as dist
    import transformers
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.distributed._tools import fsdp2_mem_tracker as _fsdp_tracker
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    from torch.distributed.tensor import _sharding_prop
    from torch.testing._internal.distributed.fake_pg import FakeStore
except ImportError as e:
    reference_rows.import_failed(
        e, fail, __name__ == "__main__",
        reference_rows.venv_setup(PINNED) +
        ", then run ~/venv-torch/bin/python scripts/torch_fsdp_reference.py")
    torch = None  # --help works without torch

# ---------------------------------------------------------------------------------------------
# The grid.

# The configurations, as passed to the config classes. llama-small is scripts/torch_reference.py's
# (GQA 8/2 heads, SwiGLU, RMSNorm, RoPE, untied embeddings, 44M parameters); llama3-8b is Llama 3
# 8B's shape (8.03B parameters, untied 128256-token embeddings).
MODELS = {
    "llama-small": ("LlamaConfig", {
        "hidden_size": 512,
        "intermediate_size": 1408,
        "num_attention_heads": 8,
        "num_key_value_heads": 2,
        "num_hidden_layers": 4,
        "vocab_size": 32000,
        "max_position_embeddings": 4096,
    }),
    "llama3-8b": ("LlamaConfig", {
        "hidden_size": 4096,
        "intermediate_size": 14336,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "num_hidden_layers": 32,
        "vocab_size": 128256,
        "max_position_embeddings": 8192,
        "rope_theta": 500000,
        "tie_word_embeddings": False,
    }),
}

SEQ = {"llama-small": 512, "llama3-8b": 2048}
WORLDS = [2, 4, 8]
BATCHES = [1, 2]
CHECKPOINTING = ["off", "on"]

# LoRA: task_type CAUSAL_LM, PEFT's default target modules for the model type; AdamW over the
# adapter weights only.
LORA = {"r": 16, "lora_alpha": 32, "lora_dropout": 0.0}
LORA_NAME = "lora-r16"
ADAPTERS = ["none", LORA_NAME]

FIELDS = ["model", "seq", "world", "adapter", "checkpointing", "batch"]

# What every row shares (written to the JSON header).
SETTINGS = {
    "dtype": "bf16 (from_config dtype=torch.bfloat16; no MixedPrecisionPolicy; LoRA adapter "
             "weights fp32 by PEFT's default autocast_adapter_dtype)",
    "attention": "sdpa",
    "optimizer": "torch.optim.AdamW(trainable params, foreach=False)",
    "loop": "trainer: loss = model(input_ids=ids, labels=ids).loss; loss.backward(); "
            "optimizer.step(); optimizer.zero_grad(set_to_none=True)",
    "fsdp": "fully_shard(decoder layer) for each layer, then fully_shard(root), default "
            "reshard_after_forward (layers True, root False), 1-D mesh of world ranks, device cpu",
    "process_group": "fake (FakeStore), rank 0",
    "lora": dict(LORA, task_type="CAUSAL_LM", target_modules="PEFT default"),
}


def grid():
    """Every row key (a dict of FIELDS) that a full run measures, in sorted order."""
    keys = []
    for model in MODELS:
        for world in WORLDS:
            for adapter in ADAPTERS:
                for ckpt in CHECKPOINTING:
                    for batch in BATCHES:
                        keys.append(row_key(model, SEQ[model], world, adapter, ckpt, batch))
    keys.sort(key=sort_key)
    return keys


def row_key(model, seq, world, adapter, checkpointing, batch):
    return {"model": model, "seq": seq, "world": world, "adapter": adapter,
            "checkpointing": checkpointing, "batch": batch}


def sort_key(row):
    return reference_rows.sort_key(row, FIELDS)


def row_id(row):
    return reference_rows.row_id(row, FIELDS)


# ---------------------------------------------------------------------------------------------
# Measuring.

if torch is not None:
    _FSDPMemTracker = _fsdp_tracker.FSDPMemTracker
    _RefType = _fsdp_tracker._FSDPRefType
    _TOTAL = _fsdp_tracker._TOTAL_KEY

    class PeakTracker(_FSDPMemTracker):
        """FSDPMemTracker that also notes where its global peak happened.

        The stock tracker keeps the global peak's snapshot (by category) and each FSDP unit's
        local peaks; this one adds, at the moment the global peak rises, the phase (forward,
        backward, optimizer), the module most recently entered (forward or backward) of those
        still active, the last FSDP hook entered and its unit, the tracker's FSDP state and
        whether a checkpointed unit was being recomputed.

        The module comes from the tracker's ModTracker, whose set of active modules keeps stale
        entries in backward (a module whose backward exit hook never fires, e.g. with
        checkpointing); the most recently entered one of them is where the step is.
        """

        def __init__(self, mod, optm=None):
            super().__init__(mod, optm)
            self.where = {}
            self._seq = 0
            self._entered = {}
            self._last_hook = ""

        def _note_entry(self, module, _args):
            if module is not None:
                self._seq += 1
                self._entered[self._mod_tracker.get_known_fqn(module)] = self._seq

        def _noting(self, hook, fsdp_mod, inner):
            def noted(*args, **kwargs):
                self._last_hook = f"{hook} {self._mod_tracker.get_known_fqn(fsdp_mod)}"
                return inner(*args, **kwargs)
            return noted

        def _fsdp_state_pre_forward(self, fsdp_mod, orig):
            return self._noting("pre_forward", fsdp_mod,
                                super()._fsdp_state_pre_forward(fsdp_mod, orig))

        def _fsdp_state_post_forward(self, fsdp_mod, orig):
            return self._noting("post_forward", fsdp_mod,
                                super()._fsdp_state_post_forward(fsdp_mod, orig))

        def _fsdp_param_group_pre_backward(self, fsdp_mod, orig):
            return self._noting("pre_backward", fsdp_mod,
                                super()._fsdp_param_group_pre_backward(fsdp_mod, orig))

        def _fsdp_param_group_post_backward(self, fsdp_mod, orig):
            return self._noting("post_backward", fsdp_mod,
                                super()._fsdp_param_group_post_backward(fsdp_mod, orig))

        def __enter__(self):
            if self._depth == 0:
                self._mod_tracker.register_user_hooks(pre_fw_hook=self._note_entry,
                                                      pre_bw_hook=self._note_entry)
            return super().__enter__()

        def __exit__(self, *args):
            super().__exit__(*args)
            if self._depth == 0:
                self._mod_tracker.clear_user_hooks()

        def _update_peak_stats(self, peak_state):
            before = dict(self._peak_mem)
            super()._update_peak_stats(peak_state)
            if self._peak_mem != before:
                if self._in_opt:
                    phase = "optimizer"
                else:
                    phase = "backward" if self._mod_tracker.is_bw else "forward"
                parents = [p for p in self._mod_tracker.parents if p != "Global"]
                self.where = {
                    "phase": phase,
                    "peak_module": max(parents, key=lambda p: self._entered.get(p, -1),
                                       default=""),
                    "fsdp_hook": self._last_hook,
                    "fsdp_state": self._fsdp_state.name,
                    "in_recompute": bool(self._in_ac),
                }

        def peak(self):
            """The peak so far: total bytes, bytes by category, and where it happened."""
            (device, snap), = self._peak_mem_snap.items()
            by_category = {ref.name: int(snap.get(ref, 0)) for ref in _RefType}
            return int(snap[_TOTAL]), by_category, dict(self.where), str(device)

        def reset_peak(self):
            # reset_mod_stats() clears only the per-unit figures (and lets the root run forward
            # again); the global peak starts again from what is live now, so that it is the next
            # iteration's alone.
            self.reset_mod_stats()
            self._peak_mem_snap = {d: dict(s) for d, s in self._curr_mem_snap.items()}
            self._peak_mem = {d: s[_TOTAL] for d, s in self._curr_mem_snap.items()}
            self.where = {}


def model_config(name):
    class_name, fields = MODELS[name]
    return getattr(transformers, class_name)(**fields)


def config_dict(name):
    """The full config of a model as transformers reports it, without fields that name the
    library version."""
    d = model_config(name).to_dict()
    for k in ["transformers_version", "_attn_implementation_autoset", "dtype", "torch_dtype",
              "architectures", "_name_or_path"]:
        d.pop(k, None)
    return json.loads(json.dumps(d, sort_keys=True, default=str))


def _fakeify_meta(module, fake_mode):
    """Replaces the meta parameters and buffers of a module by empty fake cpu tensors of the same
    shape and dtype, keeping tied weights tied (one fake per meta tensor)."""
    memo = {}

    def fake(t):
        if id(t) not in memo:
            with fake_mode:
                memo[id(t)] = torch.empty(t.shape, dtype=t.dtype, device="cpu")
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
    for m in module.modules():
        for name, v in vars(m).items():
            if isinstance(v, torch.Tensor) and v.device.type == "meta":
                raise RuntimeError(f"{type(m).__name__}.{name} stays on meta")


def build(row, fake_mode):
    cfg = model_config(row["model"])
    kwargs = {"dtype": torch.bfloat16, "attn_implementation": "sdpa"}
    if row["adapter"] == "none":
        with fake_mode:
            model = transformers.AutoModelForCausalLM.from_config(cfg, **kwargs)
        layers = model.model.layers
    else:
        # PEFT moves each new adapter weight to its base layer's device, which fails under
        # FakeTensorMode: built on meta, then made fake.
        import peft
        with torch.device("meta"):
            model = transformers.AutoModelForCausalLM.from_config(cfg, **kwargs)
        model = peft.get_peft_model(model, peft.LoraConfig(task_type="CAUSAL_LM", **LORA))
        _fakeify_meta(model, fake_mode)
        layers = model.get_base_model().model.layers
    if row["checkpointing"] == "on":
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    model.train()
    return model, layers, cfg


def measure(row):
    """Rank 0's peak of the second of two FSDP2 training iterations, by category, in bytes."""
    gc.collect()
    world = row["world"]
    dist.init_process_group("fake", rank=0, world_size=world, store=FakeStore())
    # DTensor's shape propagation under a fake mode of its own, which the tracker skips (see the
    # docstring).
    saved_detect = _sharding_prop.detect_fake_mode
    _sharding_prop.detect_fake_mode = lambda *args, **kwargs: None
    try:
        mesh = init_device_mesh("cpu", (world,))
        fake_mode = FakeTensorMode()
        model, layers, cfg = build(row, fake_mode)
        params = sum(p.numel() for p in model.parameters())
        trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
        param_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
        with fake_mode:
            for layer in layers:
                fully_shard(layer, mesh=mesh)
            fully_shard(model, mesh=mesh)
            sharded_bytes = sum(p.to_local().numel() * p.element_size() for p in model.parameters())
            optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad],
                                          foreach=False)
            tracker = PeakTracker(model, optimizer)
            ids = torch.randint(0, cfg.vocab_size, (row["batch"], row["seq"]))
            tracker.track_inputs((ids,))
            first = None
            with tracker:
                for iteration in range(2):
                    # Only the loss outlives the forward: the output object with its logits is
                    # dropped before backward, as in transformers' Trainer.
                    loss = model(input_ids=ids, labels=ids).loss
                    loss.backward()
                    optimizer.step()
                    optimizer.zero_grad(set_to_none=True)
                    del loss
                    if iteration == 0:
                        first = tracker.peak()
                        tracker.reset_peak()
            peak_bytes, by_category, where, device = tracker.peak()
    finally:
        _sharding_prop.detect_fake_mode = saved_detect
        dist.destroy_process_group()
    if by_category["SHARDED_PARAM"] != sharded_bytes:
        print(f"warning: {row_id(row)}: tracker's sharded params {by_category['SHARDED_PARAM']} B, "
              f"local shards {sharded_bytes} B", file=sys.stderr)
    out = dict(row)
    out.update({
        "params": params,
        "trainable_params": trainable,
        "param_bytes": param_bytes,
        "sharded_param_bytes": sharded_bytes,
        "peak_bytes": peak_bytes,
        "by_category": by_category,
    })
    out.update(where)
    out["first_iteration"] = dict({"peak_bytes": first[0], "by_category": first[1]}, **first[2])
    return out, device


def _quiet():
    # Deprecation notices from transformers and PEFT would drown the progress lines.
    import logging
    import warnings
    warnings.filterwarnings("ignore")
    transformers.logging.set_verbosity_error()
    logging.disable(logging.WARNING)


def _worker(row):
    torch.set_num_threads(1)
    t0 = time.monotonic()
    out, device = measure(row)
    return out, device, time.monotonic() - t0


def run(rows, jobs):
    """Measures rows, in parallel processes (large rows first), printing progress on stderr."""
    return reference_rows.measure_rows(
        rows, jobs, _worker, _quiet,
        lambda out: f"{out['peak_bytes'] / 2**20:.1f} MiB peak in {out['phase']} at "
                    f"{out['peak_module'] or '-'}",
        FIELDS, order=lambda r: -len(r["model"]) * r["seq"] * r["batch"], tasks_per_process=4)


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
        "tracker": "torch.distributed._tools.fsdp2_mem_tracker.FSDPMemTracker under "
                   "FakeTensorMode, fake process group, rank 0",
        "settings": SETTINGS,
        "models": {name: config_dict(name) for name in MODELS},
        "rows": rows,
    }


def main():
    ap = argparse.ArgumentParser(
        description="Measure rank 0's peak memory of an FSDP2 (fully_shard) training step of a "
        "Hugging Face transformers model with PyTorch's FSDPMemTracker on fake tensors and a fake "
        "process group (no GPU, no real memory), over models, world sizes, LoRA, checkpointing "
        "and batch sizes, and write tests/data/torch_fsdp_reference.json.",
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

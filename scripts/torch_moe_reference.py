#!/usr/bin/env python3
"""Measures the memory of one Hugging Face training step of small mixture-of-experts models
(transformers' Mixtral, Qwen3-MoE, OLMoE) on real CPU tensors.

The measurement is scripts/torch_finetune_reference.py's, imported from it: a small model built
from its config with random weights, two Trainer-style iterations (forward with labels, backward,
optimizer step, zero_grad), the second one measured by its StorageTracker. The recipes are full
fine-tuning, LoRA on the attention projections, LoRA on the attention and on the 3-D expert
weights (PEFT's ParamWrapper), and QLoRA. Each row also records the routing of its measured
iteration (tokens per expert, per MoE layer), and the file a diagnostic that runs one row again
with every token sent to experts 0 and 1. The result is tests/data/torch_moe_reference.json.

Nothing in the build or the tests needs this script or torch: the JSON is committed.
"""

import argparse
import collections
import gc
import os
import re
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import reference_rows  # noqa: E402  (pure standard library)

DEFAULT_OUT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..",
                                            "tests", "data", "torch_moe_reference.json"))

PINNED = "torch==2.15.0 transformers==5.23.0 peft==0.21.2 bitsandbytes==0.50.2"

FIELDS = ["model", "recipe", "checkpointing", "aux", "seq", "batch"]

EXAMPLES = f"""
examples:
  measure everything and (re)write tests/data/torch_moe_reference.json:
    ~/venv-torch/bin/python scripts/torch_moe_reference.py --jobs 2
  re-measure and compare with the committed JSON, exit 1 on any byte of difference:
    ~/venv-torch/bin/python scripts/torch_moe_reference.py --check
  only some rows (each space-separated term is a regular expression matching one field=value of
  the row id in full):
    scripts/torch_moe_reference.py --check --only 'model=mixtral-small recipe=full'
    scripts/torch_moe_reference.py --list --only 'recipe=(qlora|lora-experts) batch=1'
  row id fields: {' '.join(FIELDS)}
  the routing diagnostic (routing_check) runs with the row {{model=mixtral-small recipe=full
  checkpointing=off aux=off seq=512 batch=1}}, when that row is selected

setup (torch is never needed by the build or the tests; keep it out of the repository):
  python3 -m venv ~/venv-torch
  ~/venv-torch/bin/pip install {PINNED}
"""


fail = reference_rows.failing("torch_moe_reference.py")


try:
    import torch
    import transformers
    from torch.utils._python_dispatch import _disable_current_modes
except ImportError as e:
    reference_rows.import_failed(e, fail, __name__ == "__main__", reference_rows.venv_setup(PINNED))
    torch = None
if torch is not None:
    import torch_finetune_reference as ft
    _ref = ft._ref

# ---------------------------------------------------------------------------------------------
# The grid.

# Small MoE shapes (hidden 512, 4 layers, vocabulary 32000, untied embeddings), their MoE layers
# on transformers' default experts implementation. qwen3moe-dense0 is qwen3moe-small with a dense
# MLP (intermediate 1408) in layer 0. Every dropout is 0 (attention_dropout, set by
# torch_reference.model_config), attention is sdpa, and output_router_logits is false unless a
# row says aux=on.
_COMMON = {"hidden_size": 512, "num_attention_heads": 8, "num_hidden_layers": 4,
           "vocab_size": 32000, "tie_word_embeddings": False, "output_router_logits": False}
_QWEN3MOE = dict(_COMMON, intermediate_size=1408, moe_intermediate_size=256, num_key_value_heads=2,
                 head_dim=64, num_experts=16, num_experts_per_tok=4, norm_topk_prob=True,
                 decoder_sparse_step=1, mlp_only_layers=[])
MODELS = {
    "mixtral-small": ("MixtralConfig", dict(
        _COMMON, intermediate_size=704, num_key_value_heads=2, head_dim=64, num_local_experts=8,
        num_experts_per_tok=2, router_jitter_noise=0.0)),
    "qwen3moe-small": ("Qwen3MoeConfig", _QWEN3MOE),
    "qwen3moe-dense0": ("Qwen3MoeConfig", dict(_QWEN3MOE, mlp_only_layers=[0])),
    "olmoe-small": ("OlmoeConfig", dict(
        _COMMON, intermediate_size=256, num_key_value_heads=8, num_experts=16,
        num_experts_per_tok=4, norm_topk_prob=False, clip_qkv=None)),
}
if torch is not None:
    _ref.MODELS.update(MODELS)  # so that torch_reference's model_config and config_dict build them
ATTENTION = "sdpa"

# recipe: full (bf16 model, every parameter trained); lora-attn (bf16 model, LoRA r 8, alpha 16,
# no dropout, on q/k/v/o_proj); lora-experts (lora-attn plus LoRA on the experts' 3-D
# gate_up_proj and down_proj, PEFT's ParamWrapper); qlora (the model saved, reloaded with nf4,
# double quantisation, compute bf16, prepare_model_for_kbit_training, lora-attn's LoRA, forward and
# loss under autocast bf16). torch AdamW over the trainable parameters in all.
RECIPES = ["full", "lora-attn", "lora-experts", "qlora"]
LORA = {"r": 8, "lora_alpha": 16, "lora_dropout": 0.0,
        "target_modules": ["q_proj", "k_proj", "v_proj", "o_proj"]}
EXPERT_PARAMETERS = ["experts.gate_up_proj", "experts.down_proj"]
CHECKPOINTING = ["off", "non-reentrant"]
# The row the routing diagnostic runs again with every token routed to experts 0 and 1.
ROUTING_CHECK_ROW = {"model": "mixtral-small", "recipe": "full", "checkpointing": "off",
                     "aux": "off", "seq": 512, "batch": 1}


def grid():
    def key(model, recipe, ckpt, aux, seq, batch):
        return dict(zip(FIELDS, [model, recipe, ckpt, aux, seq, batch]))
    keys = [key(m, r, c, "off", 512, b) for m in MODELS for r in RECIPES for c in CHECKPOINTING
            for b in [1, 2]]
    keys += [key(m, r, "off", "on", 512, b) for m in ["mixtral-small", "olmoe-small"]
             for r in ["full", "lora-attn"] for b in [1, 2]]
    keys += [key("mixtral-small", "full", "off", "off", 1024, b) for b in [1, 2]]
    return sorted(keys, key=sort_key)


def sort_key(row):
    return reference_rows.sort_key(row, FIELDS)


def row_id(row):
    return reference_rows.row_id(row, FIELDS)


# ---------------------------------------------------------------------------------------------
# Building a model and measuring its step.

def build(row):
    import peft
    # the saved model first: making it (once a process) draws random numbers, which must not move
    # the LoRA initialisation that follows
    saved = ft._saved_model(row["model"], row["seq"]) if row["recipe"] == "qlora" else None
    torch.manual_seed(0)
    cfg = _ref.model_config(row["model"], 0.0, row["seq"])
    cfg.output_router_logits = row["aux"] == "on"
    ckpt = row["checkpointing"] != "off"
    ckpt_kwargs = {"use_reentrant": False}
    if row["recipe"] == "qlora":
        bnb_cfg = transformers.BitsAndBytesConfig(
            load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_use_double_quant=True,
            bnb_4bit_compute_dtype=torch.bfloat16)
        model = transformers.AutoModelForCausalLM.from_pretrained(
            saved, quantization_config=bnb_cfg, dtype=torch.bfloat16, device_map="cpu",
            attn_implementation=ATTENTION)
        model = peft.prepare_model_for_kbit_training(
            model, use_gradient_checkpointing=ckpt,
            gradient_checkpointing_kwargs=ckpt_kwargs if ckpt else None)
    else:
        model = transformers.AutoModelForCausalLM.from_config(cfg, dtype=torch.bfloat16,
                                                              attn_implementation=ATTENTION)
        if ckpt:
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=ckpt_kwargs)
    lora = None
    if row["recipe"] != "full":
        targets = EXPERT_PARAMETERS if row["recipe"] == "lora-experts" else None
        lora = peft.LoraConfig(task_type="CAUSAL_LM", target_parameters=targets, **LORA)
        model = peft.get_peft_model(model, lora)
        if targets and not any(".experts." in n and ".lora_" in n and p.requires_grad
                               for n, p in model.named_parameters()):
            raise RuntimeError("no LoRA weight on the experts is trainable")
    model.train()
    return model, cfg, lora


def _dtype(t):
    return str(t.dtype).replace("torch.", "")


def _pattern(name):
    """A parameter name with its layer index and PEFT's prefixes generalised."""
    return re.sub(r"\.layers\.\d+\.", ".layers.*.", name.replace("base_model.model.", ""))


def measure(row, force_experts=None):
    """The measured iteration's figures; force_experts (a list of top_k expert ids) makes every
    layer's router send every token there (the routing diagnostic)."""
    gc.collect()
    model, cfg, lora = build(row)
    named = list(model.named_parameters())
    params = [p for _, p in named]
    trainable = [p for p in params if p.requires_grad]
    optimizer = torch.optim.AdamW(trainable)
    autocast = row["recipe"] == "qlora"
    dtypes = collections.Counter()
    for p in params:
        dtypes[f"{'trainable' if p.requires_grad else 'frozen'}:{_dtype(p)}"] += p.numel()
    experts_dtype = sorted({_dtype(p) for n, p in named
                            if re.search(r"experts\.(base_layer\.)*(gate_up_proj|down_proj)$", n)})
    routers = [m for m in model.modules() if type(m).__name__.endswith("TopKRouter")]
    counts = [None] * len(routers)
    recording = [False]

    def hook(layer):
        def on_router(module, args, output):
            logits, scores, index = output
            if force_experts is not None:
                index = torch.zeros_like(index)     # the same bytes as the index it replaces
                for k, e in enumerate(force_experts):
                    index[:, k] = e
            if recording[0]:
                with _disable_current_modes():      # not seen by the tracker
                    counts[layer] = torch.bincount(index.reshape(-1),
                                                   minlength=module.num_experts).tolist()
            return logits, scores, index
        return on_router

    for i, m in enumerate(routers):
        m.register_forward_hook(hook(i))
    torch.manual_seed(1)
    tracker = ft.StorageTracker()
    got_grad = set()

    def on_grad(p):
        tracker.retag(p.grad, "grad")
        got_grad.add(id(p))

    for p in trainable:
        p.register_post_accumulate_grad_hook(on_grad)
    ft.track_existing(tracker, model, optimizer)
    start_bytes = tracker.total
    with tracker:
        for iteration in range(2):
            recording[0] = iteration == 1
            tracker.phase = "input"
            ids = torch.randint(0, cfg.vocab_size, (row["batch"], row["seq"]))
            tracker.phase = "act"
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
                loss = model(input_ids=ids, labels=ids).loss
            forward_bytes = tracker.total
            tracker.phase = "backward"
            loss.backward()
            tracker.phase = "opt"
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            del loss, ids
            if iteration == 0:
                for t in ft._tensors_of(list(optimizer.state.values())):
                    tracker.retag(t, "opt_state")
                steady_bytes = tracker.total
                tracker.reset_peak()
                got_grad.clear()
        end_bytes = tracker.total
    out = dict(row)
    out.update({
        "lora": None if lora is None else {
            "r": lora.r, "lora_alpha": lora.lora_alpha, "lora_dropout": lora.lora_dropout,
            "target_modules": sorted(lora.target_modules),
            "target_parameters": sorted(lora.target_parameters or [])},
        "autocast": "bf16" if autocast else "off",
        "quantized_4bit": sorted({_pattern(n) for n, p in named if p.dtype == torch.uint8}),
        "experts_dtype": ",".join(experts_dtype),
        "experts_implementation": model.config._experts_implementation,
        "aux_loss_coef": cfg.router_aux_loss_coef if row["aux"] == "on" else None,
        "attention_kernel": ",".join(sorted(tracker.attention_ops)) or "math",
        "params": sum(p.numel() for p in params),
        "trainable_params": sum(p.numel() for p in trainable),
        "experts_lora_params": sum(p.numel() for n, p in named
                                   if p.requires_grad and ".experts." in n and ".lora_" in n),
        "trainable_tensors_with_grad": f"{len(got_grad)}/{len(trainable)}",
        "params_by_dtype": dict(sorted(dtypes.items())),
        "routing": {"max_expert_tokens": [max(c) for c in counts],
                    "min_expert_tokens": [min(c) for c in counts],
                    "tokens_x_topk": sum(counts[0]) if counts else 0},
        "peak_bytes": int(tracker.peak),
        "by_category": {k: int(v) for k, v in sorted(tracker.peak_by.items()) if v},
        "phase": {"act": "forward", "backward": "backward", "opt": "optimizer"}.get(
            tracker.peak_phase, tracker.peak_phase),
        "peak_op": tracker.peak_op,
        "start_bytes": int(start_bytes),
        "forward_bytes": int(forward_bytes),    # live after the measured forward: what it saved
        "steady_bytes": int(steady_bytes),
        "end_bytes": int(end_bytes),
    })
    return out


def _worker(row):
    torch.set_num_threads(1)
    t0 = time.monotonic()
    force = row.get("force_experts")
    try:
        out = measure({f: row[f] for f in FIELDS}, force)
        if force is not None:
            out["force_experts"] = force
    except Exception as e:   # a failing configuration is reported, not fatal to the others
        out = dict(row)
        out["error"] = f"{type(e).__name__}: {e}"[:300]
    return out, "cpu", time.monotonic() - t0


def _line(out):
    if "error" in out:
        return f"ERROR {out['error']}"
    forced = f", experts {out['force_experts']} forced" if "force_experts" in out else ""
    return f"{out['peak_bytes'] / 2**20:.1f} MiB peak in {out['phase']}{forced}"


def _routing_check(measured, skewed):
    rand = next(r for r in measured if row_id(r) == row_id(ROUTING_CHECK_ROW))
    check = {"row": row_id(ROUTING_CHECK_ROW), "skewed_routing": skewed.get("routing"),
             "how": "a forward hook on every layer's router replaces its top-k expert indices by "
                    "[0, 1] for every token (a zeros_like of the index, filled: the same bytes); "
                    "the router's logits and weights are left as computed"}
    for k in ["peak_bytes", "forward_bytes"]:
        check[f"random_{k}"], check[f"skewed_{k}"] = rand.get(k), skewed.get(k)
    print(f"routing check: random routing peak {check['random_peak_bytes']} bytes, every token to "
          f"experts 0 and 1: {check['skewed_peak_bytes']} bytes", file=sys.stderr)
    return check


# ---------------------------------------------------------------------------------------------
# The JSON: torch_finetune_reference.py's layout.

def document(rows, routing_check):
    doc = ft.document(rows)
    doc["tracker"] = doc["tracker"].replace(")", ", imported by scripts/torch_moe_reference.py)")
    doc["models"] = {name: _ref.config_dict(name) for name in MODELS}
    doc["model_overrides"] = {"attention_dropout": 0.0, "attn_implementation": ATTENTION,
                              "output_router_logits": "true where a row says aux=on"}
    if routing_check is not None:
        doc["routing_check"] = routing_check
    return doc


def check(measured, path, doc):
    def routing(committed):
        if "routing_check" in doc and doc["routing_check"] != committed.get("routing_check"):
            print(f"differs: routing_check: {committed.get('routing_check')} -> "
                  f"{doc['routing_check']}")
            return 1
        return 0
    return reference_rows.check(measured, path, doc, FIELDS,
                                ["torch", "transformers", "peft", "bitsandbytes"], fail,
                                ignore=["per_sample_bytes"], also=routing)


def main():
    ap = argparse.ArgumentParser(
        description="Measure the peak of live tensor bytes of a training step of small "
        "mixture-of-experts models (full, LoRA, LoRA on the experts, QLoRA) on real CPU tensors "
        "and write tests/data/torch_moe_reference.json.",
        epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    reference_rows.add_arguments(ap, DEFAULT_OUT)
    args = ap.parse_args()

    rows = reference_rows.select(grid(), args, FIELDS, fail)
    if rows is None:
        return 0

    # the routing diagnostic runs as one more task, beside its row with random routing
    forced = [dict(ROUTING_CHECK_ROW, force_experts=[0, 1])] if ROUTING_CHECK_ROW in rows else []
    measured, _ = reference_rows.measure_rows(rows + forced, args.jobs, _worker, ft._quiet, _line,
                                              FIELDS, tasks_per_process=4)
    skewed = [r for r in measured if "force_experts" in r]
    measured = [r for r in measured if "force_experts" not in r]
    routing_check = _routing_check(measured, skewed[0]) if skewed else None
    ft._quiet()
    doc = document(measured, routing_check)
    if args.check:
        return 0 if check(measured, args.out, doc) else 1
    old = reference_rows.merge_subset(doc, args.out, FIELDS, bool(args.only))
    if old is not None and routing_check is None and "routing_check" in old:
        doc["routing_check"] = old["routing_check"]
    reference_rows.add_per_sample(doc["rows"], FIELDS)
    reference_rows.write(doc, args.out, FIELDS, False, sort_keys=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

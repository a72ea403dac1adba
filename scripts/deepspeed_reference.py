#!/usr/bin/env python3
"""Records DeepSpeed's own ZeRO memory estimates for vrambench's model presets, without a GPU.

DeepSpeed ships closed-form estimators of the "model states" memory of ZeRO training (parameters,
gradients, optimizer states; no activations, no temporary buffers):
deepspeed.runtime.zero.stage_1_and_2.estimate_zero2_model_states_mem_needs and
deepspeed.runtime.zero.stage3.estimate_zero3_model_states_mem_needs. Their *_all_live wrappers
take a model and count its parameters with model_to_params. For every preset of
src/model/families.cpp (its config.json text, verbatim), this script builds the transformers model
on the meta device (no memory), counts total_params and largest_layer_params as model_to_params
does, and calls the two estimators for 1, 2, 4 and 8 GPUs on one node, with no offload, with the
optimizer offloaded, and (ZeRO-3) with the optimizer and the parameters offloaded. The result,
tests/data/deepspeed_reference.json, holds the figures, the counts and the formulas, so that a C++
test can set vrambench's ZeRO figures beside DeepSpeed's.

The counting: model_to_params sums p.numel() over model.parameters() keyed by p.data_ptr() (a
tensor shared under two names counts once) and takes, as the largest layer, the maximum over
model.modules() of the numel summed over the module's own parameters (recurse=False). On the meta
device every data_ptr() is 0, so the count here keys by the Parameter object instead, which is
what data_ptr() tells apart on a real device (transformers ties weights by sharing one
Parameter). Each model small enough is also built for real on the CPU and counted by DeepSpeed's
own model_to_params (both stages' copies), and the run stops if the two counts differ.

Nothing in the build or the tests needs this script, deepspeed or torch: the JSON is committed.
"""

import argparse
import json
import os
import re
import sys

import reference_rows

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, ".."))
DEFAULT_OUT = os.path.join(ROOT, "tests", "data", "deepspeed_reference.json")
FAMILIES = os.path.join(ROOT, "src", "model", "families.cpp")

# The versions the committed JSON was made with; another DeepSpeed may have other formulas, another
# transformers other parameter counts.
PINNED = "deepspeed==0.19.8 torch==2.15.0 transformers==5.23.0"

EXAMPLES = f"""
examples:
  compute everything and (re)write tests/data/deepspeed_reference.json (about a minute):
    ~/venv-ds/bin/python scripts/deepspeed_reference.py
  recompute and compare with the committed JSON, exit 1 on any difference:
    ~/venv-ds/bin/python scripts/deepspeed_reference.py --check
  only some rows: every space-separated term is a regular expression that must match one
  field of the row id in full (field=value, as --list prints them):
    scripts/deepspeed_reference.py --list --only 'model=llama3-8b offload=none'
    scripts/deepspeed_reference.py --check --only 'model=(llama2|llama3)-.* stage=3'
  row id fields: model stage offload gpus_per_node

setup (DeepSpeed beside the torch of ~/venv-torch, without touching that environment; DeepSpeed's
ops are not built, which the estimators do not need; keep all of it out of the repository):
  python3 -m venv ~/venv-torch && ~/venv-torch/bin/pip install torch==2.15.0 transformers==5.23.0
  ~/venv-torch/bin/python -m venv ~/venv-ds
  echo ~/venv-torch/lib/python3.11/site-packages \\
      > ~/venv-ds/lib/python3.11/site-packages/zz_venv_torch.pth
  ~/venv-ds/bin/pip install --upgrade pip setuptools wheel
  ~/venv-ds/bin/pip install einops hjson msgpack ninja py-cpuinfo nvidia-ml-py
  DS_BUILD_OPS=0 ~/venv-ds/bin/pip install --no-deps --no-build-isolation deepspeed==0.19.8
  (pydantic, psutil, numpy, packaging and tqdm come from ~/venv-torch through the .pth file)
"""


fail = reference_rows.failing("deepspeed_reference.py")


# DeepSpeed picks an accelerator at import time; without a GPU it falls back to the CPU with a
# warning, which naming it up front avoids.
os.environ.setdefault("DS_ACCELERATOR", "cpu")

try:
    import torch
    import transformers
    import deepspeed
    from deepspeed.runtime.zero import stage_1_and_2 as ds_zero2
    from deepspeed.runtime.zero import stage3 as ds_zero3
except ImportError as e:
    reference_rows.import_failed(
        e, fail, __name__ == "__main__",
        f"see the setup in scripts/deepspeed_reference.py --help ({PINNED}), then run "
        "~/venv-ds/bin/python scripts/deepspeed_reference.py")
    torch = None  # --help works without them

# ---------------------------------------------------------------------------------------------
# The grid.

GPUS_PER_NODE = [1, 2, 4, 8]
NUM_NODES = 1
# DeepSpeed's defaults for what the grid does not vary.
ADDITIONAL_BUFFER_FACTOR = 1.5
ZERO_INIT = True

# offload name -> (cpu_offload, cpu_offload_params), by stage.
OFFLOADS = {
    2: {"none": (False, False), "optimizer": (True, False)},
    3: {"none": (False, False), "optimizer": (True, False), "optimizer+params": (True, True)},
}

FIELDS = ["model", "stage", "offload", "gpus_per_node"]

# What the two estimators compute (deepspeed/runtime/zero/stage_1_and_2.py and stage3.py, 0.19.8),
# in bytes; P = total_params, L = largest_layer_params, G = num_nodes * num_gpus_per_node (all the
# GPUs), g = num_gpus_per_node, N = num_nodes, f = additional_buffer_factor; int() truncates.
FORMULAS = {
    "zero2": {
        "function": "deepspeed.runtime.zero.stage_1_and_2.estimate_zero2_model_states_mem_needs("
                    "total_params, num_gpus_per_node=1, num_nodes=1, cpu_offload=True, "
                    "additional_buffer_factor=1.5) -> (cpu_mem, gpu_mem)",
        "gpu_bytes, no offload": "2*P + int(18*P / G): the whole 16-bit model on every GPU, plus "
                                 "that GPU's 1/G share of 16-bit grads (2), fp32 grads (4), fp32 "
                                 "master params (4) and Adam momentum and variance (8)",
        "cpu_bytes, no offload": "int(P * 4 * g * f): room on the host to load the fp32 model once "
                                 "per local GPU",
        "gpu_bytes, offload optimizer": "2*P: only the 16-bit model stays on the GPU",
        "cpu_bytes, offload optimizer": "int(P * max(4*G, 16) * f): the fp32 master params, Adam "
                                        "states and grads on the host, or the fp32 model per GPU "
                                        "if that is more",
    },
    "zero3": {
        "function": "deepspeed.runtime.zero.stage3.estimate_zero3_model_states_mem_needs("
                    "total_params, largest_layer_params, num_gpus_per_node=1, num_nodes=1, "
                    "cpu_offload=True, cpu_offload_params=True, zero_init=True, "
                    "additional_buffer_factor=1.5) -> (cpu_mem, gpu_mem, largest_layer_memory)",
        "largest_layer_memory": "4*L: the largest layer gathered whole, counted at 4 bytes an "
                                "element (a 16-bit parameter and its 16-bit gradient)",
        "gpu_bytes, no offload": "4*L + int(18*P / G): the gathered largest layer plus the GPU's "
                                 "1/G share of 16-bit params and grads, fp32 master params and "
                                 "Adam states (18 bytes a parameter, the 16-bit params counted in "
                                 "the 18 here, unlike ZeRO-2's separate 2*P)",
        "cpu_bytes, no offload": "zero_init: int(L * 4 * g * f); otherwise int(P * 4 * g * f)",
        "gpu_bytes, offload optimizer": "4*L + int(2*P / G): the gathered largest layer plus the "
                                        "GPU's share of the 16-bit params",
        "cpu_bytes, offload optimizer": "zero_init: int(P * 16 / N * f); otherwise "
                                        "int(P * max(4*g, 16/N) * f)",
        "gpu_bytes, offload optimizer+params": "4*L: only the gathered largest layer",
        "cpu_bytes, offload optimizer+params": "zero_init: int(P * 18 / N * f); otherwise "
                                               "int(P * max(4*g, 18/N) * f)",
    },
    "model_to_params": "total_params: the numel of model.parameters() summed once per data_ptr() "
                       "(shared tensors once); largest_layer_params: the maximum over "
                       "model.modules() of the numel of the module's own parameters "
                       "(parameters(recurse=False)), so a decoder block counts as its largest "
                       "direct owner (a Linear, an Embedding), never as the whole block",
}


def row_key(model, stage, offload, gpus):
    return {"model": model, "stage": stage, "offload": offload, "gpus_per_node": gpus}


def row_id(row):
    return reference_rows.row_id(row, FIELDS)


def matches(row, pattern):
    return reference_rows.matches(row, pattern, FIELDS)


# ---------------------------------------------------------------------------------------------
# The presets, read from src/model/families.cpp: {"name", "description", R"({...})"} entries of
# kPresetConfigs.

_PRESET = re.compile(r'\{"([^"]+)",\s*"((?:[^"\\]|\\.)*)",\s*R"\((.*?)\)"\}', re.S)


def presets():
    """[(name, config dict)] in families.cpp's order."""
    try:
        with open(FAMILIES) as f:
            src = f.read()
    except OSError as e:
        fail(f"cannot read {FAMILIES}: {e}")
    declared = re.search(r"std::array<PresetConfig,\s*(\d+)>\s*kPresetConfigs", src)
    found = [(name, json.loads(text)) for name, _, text in _PRESET.findall(src)]
    if not declared or int(declared.group(1)) != len(found):
        count = declared.group(1) if declared else "an unknown number"
        fail(f"read {len(found)} presets from {FAMILIES}, which declares {count}: the pattern "
             f"needs updating")
    return found


def make_config(config):
    fields = dict(config)
    return transformers.AutoConfig.for_model(fields.pop("model_type"), **fields)


# ---------------------------------------------------------------------------------------------
# Counting, as DeepSpeed's model_to_params does.

# Models up to this many parameters are also built for real and counted by DeepSpeed itself.
VERIFY_MAX_PARAMS = 400_000_000


def count(model):
    """(total_params, largest_layer_params, the largest layer's module name): model_to_params with
    the Parameter object standing for data_ptr(), which is 0 for every meta tensor."""
    total = sum({id(p): p.numel() for p in model.parameters()}.values())
    largest, where = 0, ""
    for name, m in model.named_modules():
        n = sum(p.numel() for p in m.parameters(recurse=False))
        if n > largest:
            largest, where = n, name
    return total, largest, where


def verify(config, total, largest):
    """Builds the model on the CPU and counts it with DeepSpeed's model_to_params (both stages'
    copies); stops on a difference."""
    model = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
    ds2 = ds_zero2.model_to_params(model)
    ds3 = ds_zero3.model_to_params(model)
    del model
    if ds2 != total or ds3 != (total, largest):
        fail(f"the meta count ({total}, {largest}) differs from DeepSpeed's model_to_params on "
             f"the CPU (stage 2: {ds2}, stage 3: {ds3})")


def build(name, config):
    cfg = make_config(config)
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(cfg)
    total, largest, where = count(model)
    verified = total <= VERIFY_MAX_PARAMS
    if verified:
        verify(cfg, total, largest)
    return {"config": config, "class": type(model).__name__, "total_params": total,
            "largest_layer_params": largest, "largest_layer": where,
            "counted_on_cpu_by_deepspeed": verified}


def estimate(model, info, stage, offload, gpus):
    cpu_offload, cpu_offload_params = OFFLOADS[stage][offload]
    total, largest = info["total_params"], info["largest_layer_params"]
    if stage == 2:
        cpu, gpu = ds_zero2.estimate_zero2_model_states_mem_needs(
            total_params=total, num_gpus_per_node=gpus, num_nodes=NUM_NODES,
            cpu_offload=cpu_offload, additional_buffer_factor=ADDITIONAL_BUFFER_FACTOR)
        layer = None
    else:
        cpu, gpu, layer = ds_zero3.estimate_zero3_model_states_mem_needs(
            total_params=total, largest_layer_params=largest, num_gpus_per_node=gpus,
            num_nodes=NUM_NODES, cpu_offload=cpu_offload, cpu_offload_params=cpu_offload_params,
            zero_init=ZERO_INIT, additional_buffer_factor=ADDITIONAL_BUFFER_FACTOR)
    row = row_key(model, stage, offload, gpus)
    row.update({"num_nodes": NUM_NODES, "cpu_offload": cpu_offload,
                "cpu_offload_params": cpu_offload_params if stage == 3 else None,
                "zero_init": ZERO_INIT if stage == 3 else None,
                "additional_buffer_factor": ADDITIONAL_BUFFER_FACTOR,
                "total_params": total, "largest_layer_params": largest,
                "gpu_bytes": int(gpu), "cpu_bytes": int(cpu),
                "largest_layer_memory": None if layer is None else int(layer)})
    return row


def run(pattern):
    """(rows, models, skipped) for the rows matching pattern."""
    rows, models, skipped = [], {}, {}
    for name, config in presets():
        keys = [row_key(name, stage, offload, gpus) for stage in OFFLOADS
                for offload in OFFLOADS[stage] for gpus in GPUS_PER_NODE]
        keys = [k for k in keys if matches(k, pattern)]
        if not keys:
            continue
        try:
            info = build(name, config)
        except Exception as e:  # a config transformers refuses: skipped, and said so
            skipped[name] = {"config": config, "error": f"{type(e).__name__}: {e}"}
            print(f"{name}: skipped: {type(e).__name__}: {e}", file=sys.stderr)
            continue
        models[name] = info
        rows += [estimate(name, info, k["stage"], k["offload"], k["gpus_per_node"]) for k in keys]
        print(f"{name}: {info['class']}, {info['total_params']} params, largest layer "
              f"{info['largest_layer']} {info['largest_layer_params']}"
              f"{' (checked on the CPU)' if info['counted_on_cpu_by_deepspeed'] else ''}",
              file=sys.stderr, flush=True)
    return rows, models, skipped


# ---------------------------------------------------------------------------------------------
# The JSON: fixed key order, one row a line, so that a re-run diffs cleanly.

def document(rows, models, skipped):
    return {
        "deepspeed": deepspeed.__version__,
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "presets_from": "src/model/families.cpp",
        "grid": {"gpus_per_node": GPUS_PER_NODE, "num_nodes": NUM_NODES,
                 "additional_buffer_factor": ADDITIONAL_BUFFER_FACTOR, "zero_init": ZERO_INIT,
                 "offloads": {f"zero{s}": {o: {"cpu_offload": c, "cpu_offload_params": p}
                                           for o, (c, p) in OFFLOADS[s].items()}
                              for s in OFFLOADS}},
        "formulas": FORMULAS,
        "skipped": skipped,
        "models": models,
        "rows": rows,
    }


def dumps(doc):
    """The head indented, then "skipped" and "models" one model a line, then "rows" one a line."""
    return reference_rows.dumps(doc, ["skipped", "models"])


def check(doc_now, committed_path):
    committed = reference_rows.read(committed_path, fail)
    reference_rows.note_versions(committed, doc_now, ["deepspeed", "torch", "transformers"],
                                 committed_path)
    bad = 0
    for section in ["formulas", "grid"]:
        if committed.get(section) != doc_now[section]:
            print(f"differs: {section}")
            bad += 1
    for name, info in list(doc_now["models"].items()) + list(doc_now["skipped"].items()):
        where = "models" if name in doc_now["models"] else "skipped"
        if committed.get(where, {}).get(name) != info:
            print(f"differs: {where}.{name}")
            bad += 1
    bad += reference_rows.compare_rows(doc_now["rows"], committed.get("rows", []), FIELDS,
                                       committed_path)
    print(f"{len(doc_now['rows'])} rows compared, {bad} differences", file=sys.stderr)
    return bad == 0


def main():
    ap = argparse.ArgumentParser(
        description="Call DeepSpeed's ZeRO-2 and ZeRO-3 model-states memory estimators for every "
        "preset of src/model/families.cpp (built on the meta device, counted as DeepSpeed's "
        "model_to_params does), for 1, 2, 4 and 8 GPUs on one node and each offload, and write "
        "tests/data/deepspeed_reference.json.",
        epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    reference_rows.add_arguments(ap, DEFAULT_OUT, jobs=False)
    args = ap.parse_args()

    if args.list:
        keys = [row_key(name, stage, offload, gpus) for name, _ in presets() for stage in OFFLOADS
                for offload in OFFLOADS[stage] for gpus in GPUS_PER_NODE]
        keys = [k for k in keys if matches(k, args.only)]
        if not keys:
            fail(f"--only {args.only!r} matches no row")
        for k in keys:
            print(row_id(k))
        return 0

    transformers.logging.set_verbosity_error()
    rows, models, skipped = run(args.only)
    if not rows and not skipped:
        fail(f"--only {args.only!r} matches no row; --list shows the ids")
    doc = document(rows, models, skipped)
    order = {name: i for i, (name, _) in enumerate(presets())}
    if args.check:
        return 0 if check(doc, args.out) else 1
    if args.only and os.path.exists(args.out):
        # A subset updates its rows and models in an existing file and keeps the others.
        with open(args.out) as f:
            old = json.load(f)
        keep = {row_id(r): r for r in old["rows"]}
        keep.update({row_id(r): r for r in rows})
        doc["rows"] = list(keep.values())
        for section in ["models", "skipped"]:
            merged = {k: v for k, v in old.get(section, {}).items()
                      if k not in models and k not in skipped}
            merged.update(doc[section])
            doc[section] = dict(sorted(merged.items(), key=lambda kv: order.get(kv[0], 1 << 30)))
    doc["rows"].sort(key=lambda r: (order.get(r["model"], 1 << 30), r["stage"],
                                    list(OFFLOADS[r["stage"]]).index(r["offload"]),
                                    r["gpus_per_node"]))
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as f:
        f.write(dumps(doc))
    print(f"wrote {len(doc['rows'])} rows for {len(doc['models'])} models to {args.out}"
          + (f"; skipped {', '.join(doc['skipped'])}" if doc["skipped"] else ""), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())

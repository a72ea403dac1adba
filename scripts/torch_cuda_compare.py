#!/usr/bin/env python3
"""vrambench's hf predictions beside what PyTorch reached on a GPU.

Reads what scripts/torch_cuda_reference.py measured (tests/data/torch_cuda_reference.json: the
models' config.json, each configuration's recipe, the Trainer loop's peaks at B = 1, 2, 4 and the
largest batch under a cap) and asks vrambench the same questions: `vrambench estimate --framework
hf` with the same model, recipe, sequence and batch on the simulated profile of the card that was
measured. Prints one Markdown table of the peaks (allocated, reserved, in use as the driver sees
it) and one of the largest batches, each figure with vrambench's error against PyTorch's.

    scripts/torch_cuda_compare.py                      both tables on stdout
    scripts/torch_cuda_compare.py --out results/h200/pytorch-vs-vrambench.md
    scripts/torch_cuda_compare.py --check              exit 1 naming each figure beyond the
                                                       tolerances; EXCEPTIONS are reported with
                                                       their reason, not failed

What --check holds: the allocated peak within 2%; the largest batch never above PyTorch's and at
most one below; the reserved peak within 3% where the rows are a training run's steady state
(written by torch_cuda_reference.py since it measures several steps from a fresh optimizer:
`first_step_reserved_peak_bytes` beside it). vrambench predicts that steady state; the first
reference's reserved figures are the first step after `empty_cache()` with the optimizer state made
at batch 1 before, which no training run reaches: they are reported, not held.

Standard library only. VRAMBENCH (or --vrambench) names the binary (default build/vrambench).
"""
import argparse
import json
import os
import pathlib
import subprocess
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parent.parent
DEFAULT_JSON = ROOT / "tests" / "data" / "torch_cuda_reference.json"

# vrambench against PyTorch, |error| at most (issue 32): the allocated peak, the reserved peak, and
# the largest batch in batch steps.
TOLERANCE = {"allocated": 0.02, "reserved": 0.03, "largest_batch_below": 1,
             "longest_seq_below": 0.10}
# Figures a tolerance does not hold, by (configuration id, figure: allocated, reserved,
# largest_batch or longest_seq), with the reason; reported, not failed. Every other figure of the
# configuration is still held. Those of the H200 session of 2026-11-28 (results/h200/
# README.md says what was looked at):
_GPT2_RESERVED = ("gpt2 at B <= 4 reserves 2-6 GiB, where a few blocks of 100-300 MiB decide the "
                  "steady state's segments; allocated is within 1.2%; not explained yet")
_SEQ_AT_THE_LIMIT = ("optimistic: at batch 1 the limit is decided by where the fp32 logits (one "
                     "block of 0.1-2.6 GiB) find room among the step's freed blocks, and "
                     "vrambench's events follow PyTorch's to the op, not to the tensor (in "
                     "llama3.2-1b-lora's failing step PyTorch carved a LoRA input's fp32 copy "
                     "out of the segment the last step's logits had freed); not fixed yet")
EXCEPTIONS = {
    ("gpt2-bf16-eager-ckpt-off", "reserved"): _GPT2_RESERVED,
    ("gpt2-bf16-eager-ckpt-on", "reserved"): _GPT2_RESERVED,
    ("gpt2-bf16-sdpa-ckpt-off", "reserved"): _GPT2_RESERVED,
    ("gpt2-bf16-sdpa-ckpt-on", "reserved"): _GPT2_RESERVED,
    ("gpt2-amp-bf16-eager-ckpt-on", "reserved"): _GPT2_RESERVED,
    ("gpt2-amp-bf16-sdpa-ckpt-on", "reserved"): _GPT2_RESERVED,
    ("llama3.2-1b-full", "reserved"): "over at B=4 (+10%): a segment vrambench keeps that "
                                      "PyTorch's step reuses; not explained yet",
    ("llama3.2-1b-lora", "reserved"): "under at B=1 (-6%) in a fresh process (7.23 GiB; 6.78 "
                                      "GiB when the same run followed another configuration); "
                                      "not explained yet",
    ("gemma2-2b-lora-ckpt", "reserved"): "over (+5% to +10%), eager attention's scores under "
                                         "checkpointing; not explained yet",
    ("qwen3-1.7b-lora-accum4", "reserved"): "over at B=1 (+7%); not explained yet",
    ("qwen3-1.7b-full-amp", "reserved"): "over at B=1 and 2 (+11%, +4%); not explained yet",
    ("phi3.5-mini-lora-ckpt", "reserved"): "over at B=4 (+3.6%); not explained yet",
    ("phi3.5-mini-lora-ckpt", "largest_batch"): "two below PyTorch's (11 for 13; safe): the "
                                                "replay under the cap fails where PyTorch's "
                                                "release-and-retry succeeded",
    ("llama3.2-1b-lora", "longest_seq"): _SEQ_AT_THE_LIMIT,
    ("mistral-7b-lora", "longest_seq"): _SEQ_AT_THE_LIMIT,
}

# The simulated profile of a measured card, by the name torch gives it.
PROFILES = [("H200", "sim:h200"), ("H100 PCIe", "sim:h100-pcie"), ("H100", "sim:h100-80gb"),
            ("A100-SXM4-80GB", "sim:a100-80gb"), ("A100 80GB", "sim:a100-80gb"),
            ("A100", "sim:a100-40gb"), ("L40S", "sim:l40s"), ("4090", "sim:rtx4090")]

UNITS = {"B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "TiB": 1 << 40}
GiB = 1 << 30


def fail(message):
    print(f"torch_cuda_compare.py: {message}", file=sys.stderr)
    sys.exit(2)


def profile_of(environment):
    gpu = environment.get("gpu") or ""
    for fragment, profile in PROFILES:
        if fragment in gpu:
            return profile
    fail(f"no simulated profile for the card {gpu!r}; add it to PROFILES")


def context_bytes(binary, profile):
    """The profile's CUDA context, as `vrambench devices` lists it."""
    out = subprocess.run([binary, "devices", "--quiet"], capture_output=True, text=True,
                         check=True).stdout
    for line in out.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if cells and cells[0] == profile:
            value, unit = cells[3].split()
            return round(float(value) * UNITS[unit])
    fail(f"`vrambench devices` lists no {profile}")


def recipe_args(config, model_file):
    """vrambench's options for one configuration of the reference (its `configs` entry)."""
    args = ["--model", str(model_file), "--framework", "hf", "--seq", str(config["seq"]),
            "--attention", {"sdpa": "flash", "eager": "eager"}[config["attention"]],
            "--recompute", "full" if config["checkpointing"] == "on" else "none",
            "--optimizer", config["optimizer"].replace("_", "-"), "--dropout", "0"]
    base = config["base"]
    args += ["--dtype", "amp-bf16" if base == "amp-bf16" else "bf16"]
    lora, quant = config.get("lora"), config.get("quantization")
    if quant:
        args += ["--finetune", "qlora", "--quant", quant["quant_type"],
                 "--double-quant", "on" if quant["double_quant"] else "off"]
    elif lora:
        args += ["--finetune", "lora"]
    if lora:
        args += ["--lora-rank", str(lora["rank"]), "--lora-alpha", str(lora["alpha"]),
                 "--lora-dropout", str(lora["dropout"]), "--lora-targets", lora["targets"]]
    if config.get("grad_accum", 1) > 1:
        args += ["--grad-accum", str(config["grad_accum"])]
    return args


def estimate(binary, args, scratch, command="estimate"):
    """The first row of `vrambench estimate ARGS` (or another command) as its JSON gives it."""
    out = pathlib.Path(scratch)
    result = subprocess.run([binary, command, *args, "--quiet", "--format", "json", "--out",
                             str(out), "--name", "estimate"], capture_output=True, text=True)
    if result.returncode != 0:
        fail(f"vrambench {command} {' '.join(args)}: {result.stderr.strip()}")
    return json.loads((out / "estimate.json").read_text())["rows"][0]


def error(predicted, measured):
    return (predicted - measured) / measured


def compare(doc, binary):
    """Rows of peaks, of largest batches and of longest sequences, vrambench beside PyTorch,
    with the errors."""
    profile = profile_of(doc["environment"])
    context = context_bytes(binary, profile)
    configs = {c["id"]: c for c in doc["configs"]}
    peaks, batches, sequences = [], [], []

    def card(cap_bytes):
        # PyTorch's cap bounds the allocator alone: vrambench's card is the cap plus its
        # context. Uncapped, the whole card as torch saw it.
        return cap_bytes + context if cap_bytes else doc["environment"]["gpu_total_bytes"]

    with tempfile.TemporaryDirectory() as scratch:
        models = pathlib.Path(scratch) / "models"
        models.mkdir()
        for name, fields in doc["models"].items():
            (models / f"{name}.json").write_text(json.dumps(fields))

        def args_of(config):
            return recipe_args(config, models / f"{config['model']}.json")

        for row in doc["rows"]:
            config = configs[row["config"]]
            est = estimate(binary, args_of(config) + ["--device", profile,
                                                      "--batch", str(row["batch"])], scratch)
            reserved = est["est_peak_bytes"] - context
            peaks.append({
                "config": row["config"], "batch": row["batch"],
                "torch_allocated": row["allocated_peak_bytes"],
                "est_allocated": est["allocated_peak_bytes"],
                "allocated_error": error(est["allocated_peak_bytes"], row["allocated_peak_bytes"]),
                "steady_state": steady_state(row),
                "torch_reserved": row["reserved_peak_bytes"], "est_reserved": reserved,
                "reserved_error": error(reserved, row["reserved_peak_bytes"]),
                "torch_used": row["driver_used_bytes"], "est_used": est["est_peak_bytes"],
                "used_error": error(est["est_peak_bytes"], row["driver_used_bytes"])})
        for b in doc["bisections"]:
            config = configs[b["config"]]
            est = estimate(binary, args_of(config) + ["--device", profile,
                                                      "--vram", f"{card(b['cap_bytes'])}B"],
                           scratch)
            batches.append({"config": b["config"], "cap_bytes": b["cap_bytes"],
                            "torch_largest": b["largest_batch"],
                            "est_largest": est["est_max_batch"],
                            "steps": est["est_max_batch"] - b["largest_batch"],
                            "torch_reserved": b["reserved_at_largest_bytes"]})
        # The longest sequence at batch 1: vrambench's search over seq on the simulated card
        # (est_max_seq, a multiple of 64) beside PyTorch's bracket [longest, first failure).
        for q in doc.get("longest_seqs", []):
            config = configs[q["config"]]
            args = args_of(config)
            at = args.index("--seq")
            del args[at:at + 2]  # what the search finds
            est = estimate(binary, args + ["--device", profile, "--over", "seq",
                                                      "--vram", f"{card(q['cap_bytes'])}B"],
                           scratch, command="search")
            sequences.append({"config": q["config"], "cap_bytes": q["cap_bytes"],
                              "torch_longest": q["longest_seq"],
                              "torch_first_oom": q["first_oom_seq"],
                              "est_longest": est["est_max_seq"],
                              "error": error(est["est_max_seq"], q["longest_seq"])
                              if q["longest_seq"] else 0.0})
    return peaks, batches, sequences


def steady_state(row):
    """Whether a row's reserved peak is a training run's steady state (several steps from a fresh
    optimizer), which vrambench predicts, rather than a first step after empty_cache()."""
    return "first_step_reserved_peak_bytes" in row


def outside(peaks, batches, sequences=()):
    """Figures beyond the tolerances as (config, what is off), exceptions included: the
    allocated peak; the reserved peak of steady-state rows; a largest batch above PyTorch's (the
    error that sends a user into out-of-memory) or more than one below; a longest sequence at or
    above one that failed in PyTorch, or more than 10% below the longest that ran."""
    out = []
    for r in peaks:
        for what in ("allocated", "reserved"):
            if what == "reserved" and not r["steady_state"]:
                continue
            e = r[f"{what}_error"]
            if abs(e) > TOLERANCE[what]:
                out.append((r["config"], what, f"B={r['batch']} {what} {e:+.1%}"))
    for r in batches:
        if r["steps"] > 0 or -r["steps"] > TOLERANCE["largest_batch_below"]:
            where = "above" if r["steps"] > 0 else "below"
            out.append((r["config"], "largest_batch", f"largest batch {r['est_largest']} {where} "
                                                      f"PyTorch's {r['torch_largest']}"))
    for r in sequences:
        if r["torch_first_oom"] and r["est_longest"] >= r["torch_first_oom"]:
            out.append((r["config"], "longest_seq", f"longest sequence {r['est_longest']}: "
                                                    f"PyTorch failed at {r['torch_first_oom']}"))
        elif -r["error"] > TOLERANCE["longest_seq_below"]:
            out.append((r["config"], "longest_seq", f"longest sequence {r['est_longest']} "
                                                    f"{r['error']:+.1%} below PyTorch's "
                                                    f"{r['torch_longest']}"))
    return out


def gib(n):
    return f"{n / GiB:.2f} GiB"


def cap_cell(cap_bytes):
    return gib(cap_bytes) if cap_bytes else "whole card"


def markdown_table(header, rows):
    cells = [header] + rows
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    right = [i > 0 for i in range(len(header))]

    def line(r):
        return "| " + " | ".join(c.rjust(w) if a else c.ljust(w)
                                 for c, w, a in zip(r, widths, right)) + " |"
    rule = "| " + " | ".join(("-" * (w - 1) + ":") if a else "-" * w
                             for w, a in zip(widths, right)) + " |"
    return "\n".join([line(header), rule] + [line(r) for r in rows])


def report(doc, peaks, batches, source, sequences=()):
    env = doc["environment"]
    versions = ", ".join(f"{k} {env.get(k)}" for k in
                         ("torch", "transformers", "peft", "bitsandbytes", "cuda", "driver"))
    text = [f"# PyTorch + Hugging Face on {env.get('gpu')} beside vrambench's hf predictions",
            "",
            f"Measured by `scripts/torch_cuda_reference.py` ({versions}), read from `{source}`; "
            f"predicted by `vrambench estimate --framework hf` on `{profile_of(env)}`. Errors are "
            "vrambench's against PyTorch's: negative is an under-estimate (the dangerous "
            "direction). Allocated is `max_memory_allocated`. Reserved is `max_memory_reserved`: "
            "vrambench predicts a training run's steady state (its first steps from a fresh "
            "optimizer, no `empty_cache()` between them; docs/memory-model.md); "
            + ("PyTorch's figures here are that steady state too. "
               if all(r["steady_state"] for r in peaks) else
               "PyTorch's figures here are the first step after `empty_cache()`, with the "
               "optimizer state made at batch 1 before it, which no training run reaches: their "
               "errors are reported, not held (the allocator-trace replays hold reserved). ")
            + "In use is what the driver reports after the step (context, cuBLAS and cuDNN "
            "included), beside vrambench's peak.", ""]
    text.append(markdown_table(
        ["config", "batch", "allocated", "est", "err", "reserved", "est", "err", "in use", "est",
         "err"],
        [[r["config"], str(r["batch"]), gib(r["torch_allocated"]), gib(r["est_allocated"]),
          f"{r['allocated_error']:+.1%}", gib(r["torch_reserved"]), gib(r["est_reserved"]),
          f"{r['reserved_error']:+.1%}", gib(r["torch_used"]), gib(r["est_used"]),
          f"{r['used_error']:+.1%}"] for r in peaks]))
    if batches:
        text += ["", "The largest batch: PyTorch's bisection until `torch.OutOfMemoryError` (two "
                 "or more steps per trial, the cache emptied before each), under "
                 "`set_per_process_memory_fraction` (cap) or on the whole card; vrambench's "
                 "estimate on a card of the cap plus its CUDA context. It must never be above "
                 "PyTorch's.", ""]
        text.append(markdown_table(
            ["config", "cap", "largest batch", "est", "steps", "reserved there"],
            [[b["config"], cap_cell(b["cap_bytes"]), str(b["torch_largest"]), str(b["est_largest"]), f"{b['steps']:+d}",
              gib(b["torch_reserved"]) if b["torch_reserved"] else "-"] for b in batches]))
    if sequences:
        text += ["", "The longest sequence at batch 1: PyTorch's search (doubling, then halving "
                 "the gap to 256 tokens; each trial a training run) gives a bracket, the longest "
                 "that ran and the first that failed; vrambench's `search --over seq` on the "
                 "simulated card of the cap plus its context, to 64 tokens. It must stay below "
                 "the length that failed.", ""]
        text.append(markdown_table(
            ["config", "cap", "longest", "failed at", "est", "err"],
            [[q["config"], cap_cell(q["cap_bytes"]), str(q["torch_longest"]), str(q["torch_first_oom"] or "-"), str(q["est_longest"]),
              f"{q['error']:+.1%}"] for q in sequences]))
    def summary(key):
        errs = sorted(r[key] for r in peaks)
        mid = sorted(abs(e) for e in errs)[len(errs) // 2]
        return f"median |error| {mid:.1%}, from {errs[0]:+.1%} to {errs[-1]:+.1%}"
    if peaks:
        line = (f"{len(peaks)} rows: allocated {summary('allocated_error')}; reserved "
                f"{summary('reserved_error')}")
        if batches:
            steps = [b["steps"] for b in batches]
            line += (f"; {len(batches)} largest batches: {steps.count(0)} equal, "
                     f"{sum(1 for x in steps if x < 0)} below, "
                     f"{sum(1 for x in steps if x > 0)} above")
        if sequences:
            above = sum(1 for q in sequences
                        if q["torch_first_oom"] and q["est_longest"] >= q["torch_first_oom"])
            line += (f"; {len(sequences)} longest sequences: median |error| "
                     f"{sorted(abs(q['error']) for q in sequences)[len(sequences) // 2]:.1%}, "
                     f"{above} at or above a length that failed")
        text += ["", line + "."]
    return "\n".join(text) + "\n"


def stale_exceptions(exceptions, doc, beyond):
    """The exceptions of configurations `doc` measures that hold no figure of `beyond` (what
    `outside` found): a fixed figure's exception, which would hide its next regression."""
    measured = {c["id"] for c in doc["configs"]}
    held = {(config, what) for config, what, _ in beyond}
    return [key for key in exceptions if key[0] in measured and key not in held]


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("json", nargs="?", default=str(DEFAULT_JSON),
                    help="what torch_cuda_reference.py wrote (default: %(default)s)")
    ap.add_argument("--vrambench", default=os.environ.get("VRAMBENCH", str(ROOT / "build" /
                                                                            "vrambench")))
    ap.add_argument("--out", help="write the Markdown here instead of stdout")
    ap.add_argument("--check", action="store_true",
                    help="exit 1 when a figure is beyond the tolerances (exceptions apart)")
    args = ap.parse_args()
    path = pathlib.Path(args.json)
    if not path.is_file():
        fail(f"{path} does not exist: scripts/torch_cuda_reference.py writes it on a GPU")
    doc = json.loads(path.read_text())
    for key in ("environment", "models", "configs", "rows", "bisections"):
        if key not in doc:
            fail(f"{path} has no '{key}': written by an older torch_cuda_reference.py?")
    peaks, batches, sequences = compare(doc, args.vrambench)
    text = report(doc, peaks, batches, os.path.relpath(path, ROOT), sequences)
    if args.out:
        pathlib.Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        pathlib.Path(args.out).write_text(text)
        print(f"wrote {args.out}", file=sys.stderr)
    else:
        sys.stdout.write(text)
    if not args.check:
        return 0
    failed = 0
    beyond = outside(peaks, batches, sequences)
    for config, what, detail in beyond:
        if (config, what) in EXCEPTIONS:
            print(f"exception {config}: {detail} ({EXCEPTIONS[config, what]})", file=sys.stderr)
        else:
            print(f"outside the tolerance: {config} {detail}", file=sys.stderr)
            failed += 1
    for config, what in stale_exceptions(EXCEPTIONS, doc, beyond):
        print(f"stale exception: {config} {what} is within the tolerance now; remove it from "
              "EXCEPTIONS, so that it cannot hide the next regression", file=sys.stderr)
        failed += 1
    print(f"check: {failed} figures outside the tolerances or exceptions stale", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

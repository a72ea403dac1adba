#!/usr/bin/env python3
"""Merges what several runs of scripts/torch_cuda_reference.py wrote on one GPU into one JSON.

A GPU session measures in more than one call when the configurations outlast one call's limit
(the second with --only the ones the first did not reach). The files must come from the same card
and library versions (their `environment`, the driver included) and the same protocol; a
configuration measured twice keeps the later file's figures. `seconds` is the sum.

    scripts/torch_cuda_merge.py first.json second.json --out tests/data/torch_cuda_reference.json

Standard library only.
"""
import argparse
import json
import os
import sys

LISTS = ("configs", "rows", "bisections", "longest_seqs")


def fail(message):
    print(f"torch_cuda_merge.py: {message}", file=sys.stderr)
    sys.exit(2)


def merge(docs, names):
    merged = {"environment": docs[0]["environment"], "models": {},
              "protocol": docs[0].get("protocol"), "seconds": 0.0}
    for key in LISTS:
        merged[key] = []
    for doc, name in zip(docs, names):
        for key in ("environment", "protocol"):
            if doc.get(key) != merged[key]:
                fail(f"{name}: its {key} differs from {names[0]}'s: not one session's "
                     "measurements")
        ids = {c["id"] for c in doc.get("configs", [])}
        # Each file is one process: a row's configuration's place in it (0: the first measured),
        # as torch_cuda_reference.py writes it. The process's own memory outside the allocator
        # grows as it runs more configurations (each kernel loaded on first use stays).
        order = list(dict.fromkeys(r["config"] for r in doc.get("rows", [])))
        rows = [dict(r, process_order=r.get("process_order", order.index(r["config"])))
                for r in doc.get("rows", [])]
        for key in LISTS:
            # A configuration measured again replaces what an earlier file had of it.
            field = "id" if key == "configs" else "config"
            merged[key] = ([x for x in merged[key] if x[field] not in ids] +
                           (rows if key == "rows" else doc.get(key, [])))
        merged["models"].update(doc.get("models", {}))
        merged["seconds"] = round(merged["seconds"] + doc.get("seconds", 0.0), 1)
    return merged


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("files", nargs="+", help="torch_cuda_reference.py's JSON files, in order")
    ap.add_argument("--out", required=True, help="the merged JSON to write")
    args = ap.parse_args()
    docs = []
    for name in args.files:
        try:
            with open(name) as f:
                docs.append(json.load(f))
        except (OSError, json.JSONDecodeError) as e:
            fail(f"{name}: {e}")
        if "environment" not in docs[-1] or "rows" not in docs[-1]:
            fail(f"{name} is not torch_cuda_reference.py's output (no environment or rows)")
    merged = merge(docs, args.files)
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out + ".partial", "w") as f:
        json.dump(merged, f, indent=1)
        f.write("\n")
    os.replace(args.out + ".partial", args.out)
    print(f"wrote {args.out}: {len(merged['configs'])} configurations, {len(merged['rows'])} rows, "
          f"{len(merged['bisections'])} bisections, {len(merged['longest_seqs'])} longest "
          "sequences", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Figures from a vrambench result table (the CSV that `vrambench` writes under --out).

    scripts/plot.py RESULT.csv -o FIG.svg [--axis seq]

Left: the max batch against the swept axis (seq by default), one line per configuration of the
other columns that vary; sim/meas solid, est dashed (a real device's tables: on sim it is the
sim's), the formula dotted. Right: the estimated peak (a real device's tables) and the formula's
against the device's (meas, else sim's reserved) with the +-1% band. Needs pandas and matplotlib
(pip install -r scripts/requirements.txt); nothing in the build or the tests does.
"""
import argparse
import sys

import matplotlib

matplotlib.use("Agg")  # files only, no display
import matplotlib.pyplot as plt  # noqa: E402
import matplotlib.ticker  # noqa: E402
import pandas as pd  # noqa: E402

GIB = 1024**3
# Columns that are figures, not configuration.
FIGURES = {"est_max_batch", "sim_max_batch", "meas_max_batch", "compared_batch", "est_peak_bytes",
           "sim_peak_bytes", "meas_peak_bytes", "allocated_peak_bytes", "reserved_peak_bytes",
           "meas_vs_sim", "sim_next_peak_bytes", "meas_next_peak_bytes", "rel_error",
           "under_estimate", "formula_max_batch", "formula_peak_bytes", "formula_vs_est",
           "formula_vs_meas", "sim_paged_bytes", "meas_paged_bytes", "attention_impl", "trials",
           "note", "model_state_bytes", "fixed_bytes", "per_sample_bytes", "capacity_bytes",
           "fits", "batch"}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("table", help="a vrambench result CSV")
    parser.add_argument("-o", "--output", required=True, help="the figure: .svg, .png or .pdf")
    parser.add_argument("--axis", default="seq", help="the swept column on the x axis (seq)")
    parser.add_argument("--title", help="the figure's title (default: the file name)")
    args = parser.parse_args()

    rows = pd.read_csv(args.table)
    if args.axis not in rows.columns:
        sys.exit(f"plot: {args.table} has no column {args.axis!r} (columns: {', '.join(rows.columns)})")
    device = "meas" if "meas_max_batch" in rows.columns else "sim"
    if f"{device}_max_batch" not in rows.columns:
        sys.exit(f"plot: {args.table} is not a search table (no {device}_max_batch column)")
    # The device's peak: a sim table's reserved one (sim_peak_bytes in tables before it had one).
    device_peak = next((c for c in ("meas_peak_bytes", "reserved_peak_bytes", "sim_peak_bytes")
                        if c in rows.columns), None)
    if device_peak is None:
        sys.exit(f"plot: {args.table} has no {device} peak column")
    # What is drawn against it: est where it is not the sim's by construction, and the formula.
    dashed = [c for c in ("est", "formula") if f"{c}_max_batch" in rows.columns]
    groups = [c for c in rows.columns if c not in FIGURES and c != args.axis and rows[c].nunique() > 1]

    fig, (batches, peaks) = plt.subplots(1, 2, figsize=(13, 6))
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    grouped = rows.groupby(groups, sort=False) if groups else [((), rows)]
    for i, (key, part) in enumerate(grouped):
        key = key if isinstance(key, tuple) else (key,)
        label = " ".join(f"{g}={v}" for g, v in zip(groups, key)) or "max batch"
        color = colors[i % len(colors)]
        part = part.sort_values(args.axis)
        batches.plot(part[args.axis], part[f"{device}_max_batch"], "-o", color=color, ms=3,
                     label=label)
        for c in dashed:
            batches.plot(part[args.axis], part[f"{c}_max_batch"], "--" if c == "est" else ":",
                         color=color, lw=1)
    batches.set_xscale("log", base=2)
    batches.set_yscale("log", base=2)
    for axis in (batches.xaxis, batches.yaxis):  # 512, not 2^9
        axis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda v, _: f"{v:g}"))
    batches.set_xlabel(args.axis)
    batches.set_ylabel("max batch")
    batches.set_title(f"max batch: {device} solid"
                      + "".join(f", {c} {'dashed' if c == 'est' else 'dotted'}" for c in dashed))
    batches.grid(True, which="both", alpha=0.3)
    if len(grouped) <= 6:
        batches.legend(fontsize=7)
    elif len(grouped) <= 48:  # below the plot, not over its lines
        batches.legend(fontsize=6, ncol=2, loc="upper center", bbox_to_anchor=(0.5, -0.14))

    shown = [c for c in ("est", "formula") if f"{c}_peak_bytes" in rows.columns]
    pairs = {c: rows.dropna(subset=[f"{c}_peak_bytes", device_peak]) for c in shown}
    values = [p[k] / GIB for c, p in pairs.items() for k in (f"{c}_peak_bytes", device_peak)]
    low = min(v.min() for v in values) * 0.95
    high = max(v.max() for v in values) * 1.05
    line = pd.Series([low, high])
    peaks.fill_between(line, line * 0.99, line * 1.01, color="0.85", label="±1%")
    peaks.plot(line, line, color="0.5", lw=0.8)
    for c, both in pairs.items():
        measured = both[device_peak] / GIB
        figure = both[f"{c}_peak_bytes"] / GIB
        under = both[f"{c}_peak_bytes"] < both[device_peak]
        peaks.scatter(measured[~under], figure[~under], s=12, marker="o" if c == "est" else "^",
                      label=f"{c} ≥ {device}")
        peaks.scatter(measured[under], figure[under], s=12, marker="o" if c == "est" else "^",
                      color="tab:red" if c == "est" else "tab:purple",
                      label=f"{c} < {device} (under-estimate)")
    peaks.set_xlabel(f"{device} peak at the max batch (GiB)"
                     + (", reserved" if device_peak == "reserved_peak_bytes" else ""))
    peaks.set_ylabel(" and ".join(shown) + " peak (GiB)")
    peaks.set_title(" and ".join(shown) + f" against {device} peak")
    peaks.grid(True, alpha=0.3)
    peaks.legend(fontsize=8)

    fig.suptitle(args.title or args.table)
    fig.tight_layout()
    fig.savefig(args.output, bbox_inches="tight",
                metadata={"Date": None} if args.output.endswith(".svg") else None)
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()

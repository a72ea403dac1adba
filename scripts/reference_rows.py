"""The rows of a reference JSON (tests/data/*_reference.json), as every reference script keeps them.

A row is a dict whose key fields (FIELDS, in order) name it: its id is "field=value ..." in that
order, the file holds the rows sorted by those fields, one row a line so that a re-run diffs
cleanly, and a script's --check compares a fresh measurement with the committed file row by row.
Pure standard library: the scripts import it before torch.
"""

import json
import os
import re
import sys


def failing(script):
    """`script`'s fail(message): the message on one line of stderr after the script's name, exit
    status 2."""
    def fail(message):
        print(f"{script}: {message}", file=sys.stderr)
        sys.exit(2)
    return fail


def venv_setup(pinned):
    """Where a measuring script's packages go: a virtual environment outside the repository."""
    return (f"install into a virtual environment outside the repository: python3 -m venv "
            f"~/venv-torch && ~/venv-torch/bin/pip install {pinned}")


def import_failed(error, fail, main, setup):
    """A measuring script whose imports failed (`error`): run as the main script (`main`) with
    --help, which needs none of them, it goes on; else it fails naming the module and `setup`."""
    if main and ("-h" in sys.argv or "--help" in sys.argv):
        return
    fail(f"{error.name or error} is not importable ({error}); {setup}")


def row_id(row, fields):
    return " ".join(f"{f}={row[f]}" for f in fields)


def sort_key(row, fields):
    return tuple(row[f] for f in fields)


def matches(row, pattern, fields):
    """Whether every space-separated term of `pattern` (a regular expression) matches one
    'field=value' of the row in full; an empty pattern matches every row."""
    if not pattern:
        return True
    named = [f"{f}={row[f]}" for f in fields]
    return all(any(re.fullmatch(term, field) for field in named) for term in pattern.split())


def dumps(doc, sections=(), sort_keys=False):
    """The header indented, then each of `sections` (dicts) one entry a line, then "rows" one row
    a line; with `sort_keys`, every object's keys sorted."""
    head = {k: v for k, v in doc.items() if k != "rows" and k not in sections}
    text = json.dumps(head, indent=2, sort_keys=sort_keys)[:-2]
    for section in sections:
        lines = [f"{json.dumps(k)}: {json.dumps(v)}" for k, v in doc[section].items()]
        text += f',\n  "{section}": {{' + ("\n    " + ",\n    ".join(lines) + "\n  " if lines
                                          else "") + "}"
    lines = [json.dumps(r, sort_keys=sort_keys) for r in doc["rows"]]
    return text + ',\n  "rows": [\n    ' + ",\n    ".join(lines) + "\n  ]\n}\n"


def read(path, fail):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError) as e:
        fail(f"cannot read {path}: {e}")


def note_versions(committed, doc_now, keys, path):
    """A note on stderr for each package whose version differs from the committed file's."""
    for k in keys:
        if committed.get(k) != doc_now[k]:
            print(f"note: {k} is {doc_now[k]} here, {committed.get(k)} in {path}; "
                  f"differences may come from that", file=sys.stderr)


def compare_rows(measured, committed_rows, fields, path):
    """The rows of `measured` that are missing from or differ from `committed_rows`, each printed
    on stdout; returns their count."""
    by_id = {row_id(r, fields): r for r in committed_rows}
    bad = 0
    for r in measured:
        old = by_id.get(row_id(r, fields))
        if old is None:
            print(f"missing from {path}: {row_id(r, fields)}")
            bad += 1
        elif old != r:
            keys = list(r) + [k for k in old if k not in r]
            diffs = [f"{k}: {old.get(k)} -> {r.get(k)}" for k in keys if old.get(k) != r.get(k)]
            print(f"differs: {row_id(r, fields)}: " + "; ".join(diffs))
            bad += 1
    return bad


def check(measured, path, doc_now, fields, versions, fail, ignore=(), also=None):
    """--check: the measured rows against the committed file's; True when all match. `ignore`:
    fields not compared (per_sample_bytes depends on which rows ran together); `also`, given the
    committed document, prints and counts the differences outside the rows."""
    committed = read(path, fail)
    note_versions(committed, doc_now, versions, path)
    old = [{k: v for k, v in r.items() if k not in ignore} for r in committed["rows"]]
    new = [{k: v for k, v in r.items() if k not in ignore} for r in measured]
    bad = compare_rows(new, old, fields, path) + (also(committed) if also else 0)
    print(f"{len(measured) - bad} rows match, {bad} differ", file=sys.stderr)
    return bad == 0


def package_version(name):
    """The installed version of distribution `name`, or None."""
    import importlib.metadata as md
    try:
        return md.version(name)
    except md.PackageNotFoundError:
        return None


def select(rows, args, fields, fail):
    """The rows --only picks out of `rows` (a one-line failure when none); with --list their ids
    are printed and None is returned: the script is done."""
    rows = [r for r in rows if matches(r, args.only, fields)]
    if not rows:
        fail(f"--only {args.only!r} matches no row; --list shows the ids")
    if args.list:
        for r in rows:
            print(row_id(r, fields))
        return None
    return rows


def merge_subset(doc, path, fields, subset):
    """A measured subset (`subset`) of an existing file: `doc`'s rows replace theirs in it and the
    others are kept, in row order. Returns the existing file's document, or None."""
    if not subset or not os.path.exists(path):
        return None
    with open(path) as f:
        old = json.load(f)
    keep = {row_id(r, fields): r for r in old["rows"]}
    keep.update({row_id(r, fields): r for r in doc["rows"]})
    doc["rows"] = sorted(keep.values(), key=lambda r: sort_key(r, fields))
    return old


def add_per_sample(rows, fields):
    """per_sample_bytes on every row with batch > 1: (peak(B) - peak(1)) / (B - 1) of the same
    configuration, when both are measured."""
    by_id = {row_id(r, fields): r for r in rows}
    for r in rows:
        r.pop("per_sample_bytes", None)
        if r["batch"] > 1 and "peak_bytes" in r:
            one = by_id.get(row_id(dict(r, batch=1), fields))
            if one is not None and "peak_bytes" in one:
                r["per_sample_bytes"] = (r["peak_bytes"] - one["peak_bytes"]) // (r["batch"] - 1)


def write(doc, path, fields, subset, sections=(), sort_keys=False):
    """Writes `doc`; a measured subset (`subset`) updates its rows in an existing file and keeps
    the others (merge_subset)."""
    merge_subset(doc, path, fields, subset)
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w") as f:
        f.write(dumps(doc, sections, sort_keys))
    print(f"wrote {len(doc['rows'])} rows to {path}", file=sys.stderr)


def add_arguments(ap, default_out, jobs=True):
    """The options every reference script takes: --check, --only, --out, --list (and --jobs)."""
    rel = os.path.relpath(default_out, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                                    ".."))
    ap.add_argument("--check", action="store_true",
                    help="re-measure and compare with the committed JSON (--out names it); exit 1 "
                    "on any difference, listing the rows")
    ap.add_argument("--only", metavar="PATTERN", default="",
                    help="measure only the rows whose id matches: space-separated terms, each a "
                    "regular expression matching one 'field=value' in full")
    ap.add_argument("--out", metavar="PATH", default=default_out,
                    help=f"the JSON to write, or with --check to compare with (default: {rel})")
    if jobs:
        ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1,
                        help="processes measuring in parallel (default: the number of cores)")
    ap.add_argument("--list", action="store_true",
                    help="print the row ids that would run, and stop")


def measure_rows(rows, jobs, worker, quiet, line, fields, order=None, tasks_per_process=None):
    """Measures `rows` with `worker(row) -> (row out, device, seconds)`, in `jobs` spawned
    processes (each set up by `quiet()`) or in this one, printing `line(out)` with a counter and
    the seconds on stderr as each finishes. `order` (a sort key) picks which rows go first, so that
    the pool does not end on a large row alone. Returns the rows sorted by `fields` and the set of
    devices they ran on."""
    import time
    results, devices = [], set()
    t0 = time.monotonic()

    def report(i, out, device, seconds):
        results.append(out)
        devices.add(device)
        print(f"[{i}/{len(rows)}] {row_id(out, fields)}: {line(out)} ({seconds:.1f} s)",
              file=sys.stderr, flush=True)

    if jobs <= 1:
        quiet()
        for i, row in enumerate(rows, 1):
            report(i, *worker(row))
    else:
        import multiprocessing
        queue = sorted(rows, key=order) if order else rows
        with multiprocessing.get_context("spawn").Pool(
                jobs, initializer=quiet, maxtasksperchild=tasks_per_process) as pool:
            for i, res in enumerate(pool.imap_unordered(worker, queue), 1):
                report(i, *res)
    print(f"{len(rows)} rows in {time.monotonic() - t0:.0f} s", file=sys.stderr)
    results.sort(key=lambda r: sort_key(r, fields))
    return results, devices

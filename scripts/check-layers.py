#!/usr/bin/env python3
"""Checks the folder include graph of src/ and kernels/ against the layer order.

The order is the line of docs/architecture.md that starts with "core →": layers from the bottom
up, separated by "→", folders of one layer by ",". A folder of src/ is named by its name ("core"),
one of kernels/ by its path ("kernels/cpu"); includes name them the way the build's include paths
do ("core/units.h", "cpu/ops.h"). A folder may include folders of the layers below it. It fails,
naming the file and line, when a folder includes one above it or one beside it in its layer, when
two folders include each other, and when a folder has no place in the order.

Usage: scripts/check-layers.py [--root DIR]   (DIR: the repository, by default this script's)
Exit status 0 when the graph keeps the order, 1 when it does not, 2 when the order is unreadable.
"""

import argparse
import pathlib
import re
import sys

ROOTS = ("src", "kernels")  # include paths of the build: "<folder>/<file>" resolves under these
SOURCES = (".h", ".hpp", ".cpp", ".cu", ".cuh", ".in")
INCLUDE = re.compile(r'^\s*#\s*include\s*"([^"]+)"')
ORDER_LINE = re.compile(r"^\s*core\s*→")


def read_order(doc):
    """Layer index of every folder named in the order line of `doc`."""
    for line in doc.read_text(encoding="utf-8").splitlines():
        if ORDER_LINE.match(line):
            rank = {}
            for index, layer in enumerate(line.strip().strip("`").split("→")):
                for folder in layer.split(","):
                    folder = folder.strip()
                    if folder:
                        rank[folder] = index
            return rank
    raise ValueError(f"{doc}: no line starting with 'core →' (the layer order)")


def folders(root):
    """Every folder of the graph: name -> its directory, and include prefix -> name."""
    named, prefix = {}, {}
    for top in ROOTS:
        base = root / top
        if not base.is_dir():
            continue
        for d in sorted(p for p in base.iterdir() if p.is_dir()):
            name = d.name if top == "src" else f"{top}/{d.name}"
            named[name] = d
            prefix.setdefault(d.name, []).append(name)
    return named, prefix


def includes(named, prefix):
    """(folder, file, line number, included folder) for every include of another folder."""
    for name, directory in named.items():
        for path in sorted(directory.rglob("*")):
            if path.suffix not in SOURCES or not path.is_file():
                continue
            text = path.read_text(encoding="utf-8", errors="replace")
            for number, line in enumerate(text.splitlines(), 1):
                match = INCLUDE.match(line)
                if not match or "/" not in match.group(1):
                    continue
                for target in prefix.get(match.group(1).split("/")[0], []):
                    if target != name:
                        yield name, path, number, target


def check(root):
    rank = read_order(root / "docs" / "architecture.md")
    named, prefix = folders(root)
    errors = []
    for name in named:
        if name not in rank:
            errors.append(f"{named[name].relative_to(root)}: folder '{name}' has no place in the "
                          f"layer order (docs/architecture.md)")
    for name, choices in prefix.items():
        if len(choices) > 1:
            errors.append(f"include prefix '{name}/' names several folders: {', '.join(choices)}")
    edges = {}
    count = 0
    for name, path, number, target in includes(named, prefix):
        count += 1
        where = f"{path.relative_to(root)}:{number}"
        edges.setdefault((name, target), where)
        if name not in rank or target not in rank:
            continue
        if rank[target] > rank[name]:
            errors.append(f"{where}: {name} includes {target}, a layer above it")
        elif rank[target] == rank[name]:
            errors.append(f"{where}: {name} includes {target}, beside it in the same layer")
    for (a, b), where in sorted(edges.items()):
        if a < b and (b, a) in edges:
            errors.append(f"{a} and {b} include each other: {where} and {edges[(b, a)]}")
    return errors, count


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=pathlib.Path,
                        default=pathlib.Path(__file__).resolve().parent.parent)
    args = parser.parse_args()
    try:
        errors, count = check(args.root.resolve())
    except (OSError, ValueError) as e:
        print(f"check-layers: {e}", file=sys.stderr)
        return 2
    for error in errors:
        print(error, file=sys.stderr)
    if errors:
        print(f"check-layers: {len(errors)} problem(s) in the include graph", file=sys.stderr)
        return 1
    print(f"check-layers: {count} includes across folders keep the layer order")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Every CSV under results/ opens with Python's csv module and no options: the header on line 1,
one row per line, every row as wide as the header, a final newline."""
import csv
import pathlib
import sys

root = pathlib.Path(sys.argv[1])
tables = sorted(root.rglob("*.csv"))
if not tables:
    sys.exit(f"no CSV under {root}")
for path in tables:
    text = path.read_text()
    assert text.endswith("\n"), f"{path}: no final newline"
    with path.open(newline="") as f:
        rows = list(csv.reader(f))
    header = rows[0]
    assert any(c.endswith("_max_batch") or c.endswith("_peak_bytes") for c in header), \
        f"{path}: line 1 {header}"
    assert all(len(r) == len(header) for r in rows[1:]), f"{path}: a row is not header-wide"
    assert len(rows) > 1, f"{path}: no rows"
    print(f"{path}: header and {len(rows) - 1} rows")

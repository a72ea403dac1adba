"""scripts/reference_rows.py, which every reference script shares: --only and --list
(`select`), --check (`check`, with the fields it ignores and the differences outside the rows it
is told of) and `package_version`.

    python3 tests/test_reference_rows.py
"""
import contextlib
import io
import json
import pathlib
import sys
import tempfile
import types

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent / "scripts"))
import reference_rows  # noqa: E402

FIELDS = ["model", "batch"]
ROWS = [{"model": "a", "batch": 1, "peak_bytes": 10}, {"model": "a", "batch": 2, "peak_bytes": 20},
        {"model": "b", "batch": 1, "peak_bytes": 30}]


class Failed(Exception):
    pass


def fail(message):
    raise Failed(message)


def args(only="", listed=False):
    return types.SimpleNamespace(only=only, list=listed)


# select: the rows --only matches, a failure naming the pattern when none does, and with --list
# their ids on stdout and None.
assert reference_rows.select(ROWS, args("model=a"), FIELDS, fail) == ROWS[:2]
assert reference_rows.select(ROWS, args(), FIELDS, fail) == ROWS
try:
    reference_rows.select(ROWS, args("model=c"), FIELDS, fail)
    raise AssertionError("no row matched, yet select went on")
except Failed as e:
    assert "'model=c' matches no row" in str(e), e
out = io.StringIO()
with contextlib.redirect_stdout(out):
    assert reference_rows.select(ROWS, args("batch=1", True), FIELDS, fail) is None
assert out.getvalue().splitlines() == ["model=a batch=1", "model=b batch=1"], out.getvalue()

with tempfile.TemporaryDirectory() as scratch:
    path = pathlib.Path(scratch) / "committed.json"
    committed = {"torch": "2.x", "extra": 1,
                 "rows": [dict(r, per_sample_bytes=5) if r["batch"] == 2 else r for r in ROWS]}
    path.write_text(json.dumps(committed))
    now = {"torch": "2.x"}

    def run(measured, **kw):
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            ok = reference_rows.check(measured, str(path), now, FIELDS, ["torch"], fail, **kw)
        return ok, out.getvalue(), err.getvalue()

    # An ignored field the committed rows carry and the measured ones lack is no difference;
    # without the ignore it is.
    ok, out, err = run(ROWS, ignore=["per_sample_bytes"])
    assert ok and out == "" and "3 rows match, 0 differ" in err, (out, err)
    ok, out, err = run(ROWS)
    assert not ok and "per_sample_bytes: 5 -> None" in out, out
    # A changed figure and a row the file lacks are differences, named on stdout.
    moved = [dict(ROWS[0], peak_bytes=11), ROWS[1], {"model": "c", "batch": 1, "peak_bytes": 1}]
    ok, out, err = run(moved, ignore=["per_sample_bytes"])
    assert not ok and "peak_bytes: 10 -> 11" in out and "missing from" in out, out
    assert "1 rows match, 2 differ" in err, err
    # `also` sees the committed document and adds its differences to the count.
    seen = []

    def also(doc):
        seen.append(doc["extra"])
        return 1
    ok, out, err = run(ROWS, ignore=["per_sample_bytes"], also=also)
    assert not ok and seen == [1] and "2 rows match, 1 differ" in err, (seen, err)

assert reference_rows.package_version("no-such-distribution-here") is None
print("reference_rows: select, check and package_version")

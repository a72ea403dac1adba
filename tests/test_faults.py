"""Fault injection: a sweep killed (SIGKILL) at random points and resumed gives every row once; a
full disk for --out ends with one line and keeps the partial for --resume; a read-only --out is
refused before anything runs; a damaged partial is refused, naming the file and the line; a
second run of the same --out and --name refuses while the first runs.

    test_faults.py VRAMBENCH CASE      CASE: kill, full-disk, read-only, damaged, concurrent

Each case prints what it did; one that the machine cannot stage (no mount, no /dev/full) says so
and passes. VRAMBENCH_FAULT_SEED fixes the kill times of `kill` (the seed is printed)."""
import json
import os
import random
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time

BINARY = sys.argv[1]
# 1,000 configurations, each searched in a child process: about a second uninterrupted.
SWEEP = ["--device", "sim:rtx4090", "--preset", "tiny", "--sweep", "seq=[64:64000:64]",
         "--isolate", "--quiet"]
ROWS = 1000


def run(args, env=None, **kwargs):
    """Runs vrambench; one that does not end within a minute (a trial that hangs) fails."""
    return subprocess.run([BINARY] + args, capture_output=True, text=True,
                          env={**os.environ, **(env or {})}, timeout=60, **kwargs)


def one_line_error(result, *needles):
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2, f"exit {result.returncode}: {result.stderr}"
    assert len(lines) == 1, f"not one line: {result.stderr!r}"
    for needle in needles:
        assert needle in lines[0], f"{needle!r} not in {lines[0]!r}"
    assert result.stdout == "", result.stdout
    return lines[0]


def read(path):
    with open(path, "rb") as f:
        return f.read()


def reference(folder):
    """The table of an uninterrupted run: its CSV, and the JSON's rows and per-row details."""
    result = run(SWEEP + ["--out", folder, "--name", "whole"])
    assert result.returncode == 0, result.stderr
    return table_of(folder, "whole")


def table_of(folder, name):
    with open(os.path.join(folder, name + ".json")) as f:
        doc = json.load(f)
    return read(os.path.join(folder, name + ".csv")), doc["rows"], doc["summary"]["details"]


def partial_rows(path):
    """The rows of a JSON Lines partial: line 1 is the provenance, a cut last line is no row."""
    text = read(path).decode()
    lines = text.split("\n")[:-1]  # the last element follows the last newline
    assert "provenance" in json.loads(lines[0]), lines[0]
    return [json.loads(line) for line in lines[1:]]


def mount_tmpfs(folder, options):
    """Mounts a tmpfs on `folder`; False where this machine cannot (no root, no mount)."""
    if os.geteuid() != 0 or shutil.which("mount") is None:
        return False
    return subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", folder],
                          capture_output=True).returncode == 0


def unmount(folder):
    subprocess.run(["umount", folder], capture_output=True)


def case_kill(tmp):
    """SIGKILL at random points, each run resumed, until one finishes: every row once, the table
    of an uninterrupted run, row for row and detail for detail."""
    seed = int(os.environ.get("VRAMBENCH_FAULT_SEED", time.time_ns() % 1_000_000))
    rng = random.Random(seed)
    print(f"seed {seed} (VRAMBENCH_FAULT_SEED={seed} repeats the kill times)")
    csv, rows, details = reference(tmp)
    args = SWEEP + ["--out", tmp, "--name", "killed", "--resume"]
    kills = 0
    while kills < 25:
        process = subprocess.Popen([BINARY] + args, stdout=subprocess.DEVNULL,
                                   stderr=subprocess.PIPE, text=True)
        # Early kills land in the start and in the resumed run's rewrite of the partials, the
        # others in a row, between two, or (once a dozen have) in the writing of the final files.
        window = rng.choices([0.015, 0.15, 1.0], weights=[3, 5, 2 if kills >= 12 else 0])[0]
        try:
            process.wait(timeout=rng.uniform(0.0, window))
        except subprocess.TimeoutExpired:
            process.send_signal(signal.SIGKILL)
            process.wait()
            kills += 1
            continue
        assert process.returncode == 0, process.stderr.read()
        break
    else:
        finish = run(args)  # the rest, uninterrupted
        assert finish.returncode == 0, finish.stderr
    got_csv, got_rows, got_details = table_of(tmp, "killed")
    assert got_csv == csv, "the resumed table is not the uninterrupted run's"
    assert got_rows == rows
    assert got_details == details, "the details differ from the uninterrupted run's"
    assert len(rows) == ROWS
    leftovers = [f for f in os.listdir(tmp) if f.startswith("killed.") and
                 not f.endswith((".csv", ".json"))]
    assert not leftovers, leftovers
    print(f"killed {kills} times, then finished: {len(rows)} rows, each once, as uninterrupted")


def case_full_disk(tmp):
    """--out on a full disk: one line naming the file and the reason, the rows before it kept in
    the partial, and --resume finishing once there is room."""
    out = os.path.join(tmp, "out")
    os.mkdir(out)
    csv, rows, _ = reference(tmp)
    mounted = mount_tmpfs(out, "size=64k")
    limit = None
    if not mounted:
        # No tmpfs to fill: a file size limit fails the writes the same way (EFBIG for ENOSPC).
        limit = 64 * 1024
        print("no tmpfs mount here (needs root): the disk fills at a 64 KiB file size limit")

    def cap():
        if limit:
            signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
            resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    try:
        args = SWEEP + ["--out", out, "--name", "full"]
        result = subprocess.run([BINARY] + args, capture_output=True, text=True, timeout=120,
                                preexec_fn=cap)
        reason = "No space left on device" if mounted else "File too large"
        line = one_line_error(result, "cannot write", reason, "--resume")
        kept = partial_rows(os.path.join(out, "full.jsonl.partial"))
        assert 0 < len(kept) < ROWS, len(kept)
        assert not os.path.exists(os.path.join(out, "full.lock"))
        print(f"full disk: {line!r}; {len(kept)} rows kept in the partial")
        if mounted:
            assert subprocess.run(["mount", "-o", "remount,size=64m", out]).returncode == 0
        limit = None
        resumed = run(args + ["--resume"])
        assert resumed.returncode == 0, resumed.stderr
        assert read(os.path.join(out, "full.csv")) == csv
        print("with room again, --resume finished the table of an uninterrupted run")
    finally:
        if mounted:
            unmount(out)


def case_read_only(tmp):
    """A read-only --out: refused in one line before anything runs (every trial would hang),
    nothing written."""
    out = os.path.join(tmp, "ro")
    os.mkdir(out)
    mounted = mount_tmpfs(out, "ro,size=1m")
    if not mounted:
        if os.geteuid() == 0:
            print("skip: root writes through file modes, and no read-only mount here")
            return
        os.chmod(out, 0o555)
    try:
        for target in [out, os.path.join(out, "sub")]:
            result = run(SWEEP + ["--out", target, "--name", "ro", "--trial-timeout", "300"],
                         env={"VRAMBENCH_FAULT": "hang"})
            line = one_line_error(result, target)
            assert "Read-only file system" in line or "Permission denied" in line, line
            assert os.listdir(out) == [], os.listdir(out)
            print(f"read-only --out {target}: {line!r}")
    finally:
        if mounted:
            unmount(out)
        else:
            os.chmod(out, 0o755)


def killed_partial(tmp, name, rows):
    """A partial of `rows` finished rows, as a run killed while measuring the next leaves it."""
    args = SWEEP + ["--out", tmp, "--name", name]
    hang = f"hang@seq={64 * (rows + 1)}"
    process = subprocess.Popen([BINARY] + args, env={**os.environ, "VRAMBENCH_FAULT": hang},
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    partial = os.path.join(tmp, name + ".jsonl.partial")
    for _ in range(600):
        if os.path.exists(partial) and len(partial_rows(partial)) == rows:
            break
        time.sleep(0.05)
    return process, partial


def case_damaged(tmp):
    """A partial damaged in a line other than its last is refused, naming the file and line, and
    left as it was; a last line cut by a kill is not a row, and the run resumes."""
    process, partial = killed_partial(tmp, "damaged", 5)
    process.kill()
    process.wait()
    whole = read(partial)
    lines = whole.split(b"\n")
    resume = SWEEP + ["--out", tmp, "--name", "damaged", "--resume"]
    for number, damage in [(3, b'{"seq":128,"est_max_ba\x00\xff'), (1, b"not the provenance"),
                           (4, b"{}")]:
        damaged = lines.copy()
        damaged[number - 1] = damage
        with open(partial, "wb") as f:
            f.write(b"\n".join(damaged))
        before = read(partial)
        line = one_line_error(run(resume), f"damaged.jsonl.partial' line {number}")
        assert read(partial) == before, "the damaged partial was changed"
        print(f"line {number} damaged: {line!r}")
    with open(partial, "wb") as f:
        f.write(whole + b'{"seq":384,"est_max')  # a kill cut the next row
    result = run(resume)
    assert result.returncode == 0, result.stderr
    assert len(table_of(tmp, "damaged")[1]) == ROWS
    print("a cut last line is no row: resumed to every row")


def case_concurrent(tmp):
    """While a run writes --out/--name, a second one refuses at once, naming the first's pid;
    once the first is killed, the name is free and the second resumes its rows."""
    process, partial = killed_partial(tmp, "shared", 3)
    try:
        for extra in [[], ["--resume"]]:
            result = run(SWEEP + ["--out", tmp, "--name", "shared"] + extra)
            line = one_line_error(result, "another run", f"pid {process.pid}")
            print(f"second run{' --resume' if extra else ''}: {line!r}")
        assert len(partial_rows(partial)) == 3, "the second run wrote into the first's partial"
        other = run(SWEEP + ["--out", tmp, "--name", "other", "--format", "csv"])
        assert other.returncode == 0, other.stderr
    finally:
        process.kill()
        process.wait()
    result = run(SWEEP + ["--out", tmp, "--name", "shared", "--resume"])
    assert result.returncode == 0, result.stderr
    assert len(table_of(tmp, "shared")[1]) == ROWS
    print("after the first was killed, the second resumed its 3 rows and finished")


CASES = {"kill": case_kill, "full-disk": case_full_disk, "read-only": case_read_only,
         "damaged": case_damaged, "concurrent": case_concurrent}

if __name__ == "__main__":
    case = CASES[sys.argv[2]]
    tmp = tempfile.mkdtemp(prefix=f"vrambench-faults-{sys.argv[2]}-")
    try:
        case(tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

"""A sweep's memory is flat in its length: rows and their details are written as they finish and
not held. The largest resident size of a 20,000-row sim sweep is held to that of a 2,000-row one
plus under 2 KB a row (each row and its details held took about 40 KB: a 100,000-row sweep grew
to 4.1 GB).

    test_sweep_memory.py VRAMBENCH"""
import resource
import subprocess
import sys
import tempfile

BINARY = sys.argv[1]
BYTES_PER_ROW = 2048


def peak_kib(rows, folder):
    """The largest resident size, in KiB, of a sim sweep of `rows` configurations."""
    code = (
        "import resource, subprocess, sys\n"
        "done = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL)\n"
        "assert done.returncode == 0\n"
        "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)\n")
    args = [BINARY, "--device", "sim:rtx4050-laptop", "--preset", "tiny", "--sweep",
            f"seq=[64:{64 * rows}:64]", "--out", folder, "--name", f"rows-{rows}", "--quiet"]
    out = subprocess.run([sys.executable, "-c", code] + args, capture_output=True, text=True,
                         check=True)
    return int(out.stdout)


with tempfile.TemporaryDirectory(prefix="vrambench-memory-") as folder:
    small, large = peak_kib(2_000, folder), peak_kib(20_000, folder)
per_row = (large - small) * 1024 / 18_000
print(f"largest resident size: {small} KiB at 2,000 rows, {large} KiB at 20,000 "
      f"({per_row:.0f} bytes a row more)")
assert per_row < BYTES_PER_ROW, f"{per_row:.0f} bytes a row: the sweep holds its rows"

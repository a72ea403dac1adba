"""The program the API is held to, for the tests: the `vrambench` binary of the CMake build ($VRAMBENCH, which
ctest sets), else the package's own command (`python -m vrambench`), in a process of its own."""

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import List, NamedTuple

REPO = Path(__file__).resolve().parents[2]


class Ran(NamedTuple):
    code: int
    out: str
    err: str


def program() -> List[str]:
    binary = os.environ.get("VRAMBENCH")
    return [binary] if binary else [sys.executable, "-m", "vrambench"]


def run_program(*args: str) -> Ran:
    """The program run on `args` in a child process, stdin closed."""
    done = subprocess.run(
        program() + list(args),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=300,
    )
    return Ran(done.returncode, done.stdout, done.stderr)


def program_json(*args: str) -> dict:
    ran = run_program(*args)
    assert ran.code == 0, ran.err
    return json.loads(ran.out)


def program_error(*args: str) -> str:
    """The one line the program prints for a mistake, as ValueError holds it: without the
    "vrambench: error: " before it and CLI11's "(see vrambench --help)" after it."""
    ran = run_program(*args)
    assert ran.code == 2, (ran.code, ran.out, ran.err)
    line = ran.err.strip()
    assert "\n" not in line, line
    line = line[len("vrambench: error: ") :]
    return line[: -len(" (see vrambench --help)")] if line.endswith("(see vrambench --help)") else line

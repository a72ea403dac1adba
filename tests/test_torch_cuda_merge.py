"""scripts/torch_cuda_merge.py: the measurements of one GPU session's calls into one JSON. A
configuration measured again keeps the later call's figures, each row gets its configuration's
place in the process that measured it (process_order), the seconds add up, and files of another
card, library or protocol are refused in one line with nothing written.

    python3 tests/test_torch_cuda_merge.py
"""
import json
import pathlib
import subprocess
import sys
import tempfile

script = pathlib.Path(__file__).resolve().parent.parent / "scripts" / "torch_cuda_merge.py"
ENV = {"gpu": "NVIDIA H200", "torch": "2.11.0", "driver": "580.159.04"}
PROTOCOL = "each row and bisection trial a training run of 2 steps"


def call(configs, rows, seconds, env=ENV, longest=()):
    return {"environment": env, "protocol": PROTOCOL, "seconds": seconds,
            "models": {c: {"model_type": "llama"} for c in configs},
            "configs": [{"id": c} for c in configs],
            "rows": [{"config": c, "batch": b, "allocated_peak_bytes": v} for c, b, v in rows],
            "bisections": [{"config": c, "largest_batch": 3} for c in configs],
            "longest_seqs": [{"config": c, "longest_seq": 4096} for c in longest]}


with tempfile.TemporaryDirectory() as scratch:
    d = pathlib.Path(scratch)
    # The first call ran a, b and c; the second ran b and d, b again with other figures.
    (d / "1.json").write_text(json.dumps(call(
        ["a", "b", "c"], [("a", 1, 10), ("a", 2, 20), ("b", 1, 30), ("c", 1, 40)], 100.0,
        longest=["b"])))
    (d / "2.json").write_text(json.dumps(call(["b", "d"], [("b", 1, 31), ("d", 1, 50)], 20.5,
                                              longest=["d"])))
    out = d / "merged.json"
    run = subprocess.run([sys.executable, str(script), str(d / "1.json"), str(d / "2.json"),
                          "--out", str(out)], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    m = json.loads(out.read_text())
    assert [c["id"] for c in m["configs"]] == ["a", "c", "b", "d"], m["configs"]
    got = [(r["config"], r["batch"], r["allocated_peak_bytes"], r["process_order"])
           for r in m["rows"]]
    assert got == [("a", 1, 10, 0), ("a", 2, 20, 0), ("c", 1, 40, 2), ("b", 1, 31, 0),
                   ("d", 1, 50, 1)], got
    assert [b["config"] for b in m["bisections"]] == ["a", "c", "b", "d"], m["bisections"]
    assert [q["config"] for q in m["longest_seqs"]] == ["d"], m["longest_seqs"]
    assert sorted(m["models"]) == ["a", "b", "c", "d"] and m["seconds"] == 120.5, m
    assert m["environment"] == ENV and m["protocol"] == PROTOCOL

    # Another driver: not one session's measurements; one line, nothing written.
    (d / "3.json").write_text(json.dumps(call(["e"], [("e", 1, 60)], 1.0,
                                              env=dict(ENV, driver="570.0"))))
    refused = d / "refused.json"
    run = subprocess.run([sys.executable, str(script), str(d / "1.json"), str(d / "3.json"),
                          "--out", str(refused)], capture_output=True, text=True)
    assert run.returncode == 2 and len(run.stderr.strip().splitlines()) == 1, run.stderr
    assert "environment differs" in run.stderr and not refused.exists(), run.stderr

print("torch_cuda_merge: later calls replace what they measured again, rows know their process")

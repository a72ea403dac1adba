"""scripts/allocator_trace.py on hand-made snapshots: the state a recorded step started in is the
final segments with the trace undone (a segment released in the step was there, one taken in it
was not; a block freed in the step without its allocation in it was live, and owns the free space
after it that is too small for a large-pool free block); requests become sizes, frees the ids of
their blocks, placements the segment and offset PyTorch chose; a snapshot whose trace does not
lead to its segments is refused; each request's site, where the snapshot names it, is kept.

    python3 tests/test_allocator_trace.py
"""
import json
import pathlib
import pickle
import subprocess
import sys
import tempfile

root = pathlib.Path(__file__).resolve().parent.parent
script = root / "scripts" / "allocator_trace.py"
MiB = 1 << 20
A = 0x7F0000000000  # the driver's addresses: a large segment, a small one, one taken in the step
L, S, N = A, A + 64 * MiB, A + 128 * MiB


def block(addr, size, state="active_allocated"):
    return {"address": addr, "size": size, "requested_size": size, "state": state}


def ev(action, addr, size):
    return {"action": action, "addr": addr, "size": size, "stream": 0}


def snapshot():
    # Before the step the large segment (24 MiB) holds w (4 MiB) at 0, x at 4 MiB and v (2.5 MiB)
    # at 7.5 MiB, w and v live throughout. x asked for 3 MiB + 100 B: rounded, its block would end
    # 512 KiB - 512 B short of v, no large-pool free block, so it ran to v (unsplit). The small
    # segment holds one 512 B block. The step frees x, allocates y (3 MiB) where x was (unsplit
    # again), takes a 20 MiB segment for z (2 MiB), frees the small block, releases the small
    # segment, and fails a 30 MiB request.
    segments = [
        {"address": L, "total_size": 24 * MiB, "segment_type": "large",
         "blocks": [block(L, 4 * MiB), block(L + 4 * MiB, 7 * MiB // 2),
                    block(L + 15 * MiB // 2, 5 * MiB // 2),
                    block(L + 10 * MiB, 14 * MiB, "inactive")]},
        {"address": N, "total_size": 20 * MiB, "segment_type": "large",
         "blocks": [block(N, 2 * MiB), block(N + 2 * MiB, 18 * MiB, "inactive")]},
    ]
    trace = [
        ev("free_requested", L + 4 * MiB, 3 * MiB + 100), ev("free_completed", L + 4 * MiB, 0),
        ev("alloc", L + 4 * MiB, 3 * MiB),
        ev("segment_alloc", N, 20 * MiB), ev("alloc", N, 2 * MiB),
        ev("free_requested", S, 512), ev("free_completed", S, 512),
        ev("segment_free", S, 2 * MiB),
        {"action": "oom", "device_free": 1 << 30, "size": 30 * MiB, "stream": 0},
    ]
    return {"segments": segments, "device_traces": [trace]}


CASE = {"config": "hand", "batch": 3, "cap_gib": 0, "fits": False, "error": "CUDA out of memory",
        "allocated_peak_bytes": 1, "reserved_peak_bytes": 2}


def convert(snap):
    with tempfile.TemporaryDirectory() as tmp:
        tmp = pathlib.Path(tmp)
        (tmp / "s.pickle").write_bytes(pickle.dumps(snap))
        (tmp / "case.json").write_text(json.dumps(CASE))
        r = subprocess.run([sys.executable, str(script), str(tmp / "s.pickle"), "--case",
                            str(tmp / "case.json"), "--out", str(tmp / "t.json")],
                           capture_output=True, text=True)
        return r, (json.loads((tmp / "t.json").read_text()) if r.returncode == 0 else None)


failures = []


def check(what, got, want):
    if got != want:
        failures.append(f"{what}: {got!r}, expected {want!r}")


r, t = convert(snapshot())
check("exit", r.returncode, 0)
if t:
    check("initial", t["initial"], [
        {"address": 0, "size": 24 * MiB,
         "blocks": [[0, 4 * MiB], [4 * MiB, 7 * MiB // 2], [15 * MiB // 2, 5 * MiB // 2]]},
        {"address": 64 * MiB, "size": 2 * MiB, "blocks": [[0, 512]]}])
    # Initial blocks: w 0, x 1, v 2, the small one 3; then y 4, z 5; the refused request last.
    check("events", t["events"], [-2, 3 * MiB, 2 * MiB, -4, 30 * MiB])
    check("placements", t["placements"], [[0, 4 * MiB], [2, 0]])
    check("segments", t["segments"], [[2, 20 * MiB, 128 * MiB], [4, -2 * MiB, 64 * MiB]])
    check("oom_event", t["oom_event"], 4)
    check("reserved", (t["initial_reserved_bytes"], t["reserved_peak_bytes"]),
          (26 * MiB, 46 * MiB))
    check("allocated peak", t["allocated_peak_bytes"], 12 * MiB + 512)

    check("no sites without frames", "sites" in t, False)

# Requests recorded with their sites keep them, in the order of the placements.
named = snapshot()
for e in named["device_traces"][0]:
    if e["action"] in ("alloc", "oom"):
        e["site"] = f"modeling.py:{e['size'] // MiB} forward"
named["device_traces"][0][2].pop("site")  # y: made where no Python frame was
r, t = convert(named)
check("sites exit", r.returncode, 0)
if t:
    check("sites", t["sites"], [None, "modeling.py:2 forward"])
    check("oom site", t["oom_site"], "modeling.py:30 forward")

# A trace that does not lead to the snapshot's blocks is refused: y is not live at the end.
bad = snapshot()
bad["segments"][0]["blocks"][1]["state"] = "inactive"
r, _ = convert(bad)
check("inconsistent snapshot exit", r.returncode, 1)
check("inconsistent snapshot says", "not the snapshot's" in r.stderr, True)

if failures:
    print("\n".join(failures))
    sys.exit(1)
print("allocator_trace.py rebuilds the start state and the events of a hand-made snapshot")

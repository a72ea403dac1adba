#!/usr/bin/env python3
"""A PyTorch caching-allocator snapshot as the compact trace vrambench replays.

`torch.cuda.memory._snapshot()` (pickled) holds the allocator's segments at the end of a recorded
step and the step's events (`device_traces[0]`: alloc, free_requested, free_completed,
segment_alloc, segment_free, oom, each with its address and size). This script rebuilds the state
the step started in (the final segments with the trace's events undone) and writes what a replay
through another allocator needs, with no addresses:

    {"config", "batch", "seq", "cap_bytes", "fits", "torch", "gpu", "source",
     "initial": [{"address": A, "size": segment bytes, "blocks": [[offset, block bytes], ...]},
                 ...],
     "events": [n, ...],           n > 0: a request of n bytes (the tensor's own, unrounded);
                                   n < 0: the free of block -n - 1 (the initial blocks are
                                   0, 1, ... in the order listed, then each request in turn)
     "placements": [[segment, offset], ...]   where PyTorch put each request it served: the
                                   segment by the order the step knew it in (the initial ones
                                   0, 1, ..., then each cudaMalloc), the offset in bytes
     "oom_event": index or null,   the request PyTorch refused, the last event (the frees that
                                   followed it are checked, not written)
     "segments": [[event index, +bytes or -bytes, A], ...]   PyTorch's cudaMalloc / cudaFree,
                                   each after the event it served (before the request for a +)
     "sites": [site or null, ...], "oom_site"   where the snapshot names them (torch_cuda_reference
                                   reduces each request's Python frames to its `site`): where in
                                   the model's code each served request, and the refused one, was
                                   made; absent from a snapshot recorded without frames
    A segment's address A is the driver's, less the lowest one of the trace: among free blocks
    of one size PyTorch takes the lowest address, so a replay that is to place every block where
    PyTorch did hands out the same addresses.
     "initial_reserved_bytes", "reserved_peak_bytes", "allocated_peak_bytes": of the traced step,
     "snapshot_reserved_peak_bytes": what torch reported over the whole case (snapshots.json)}

The initial segments are in address order, their allocated blocks by offset: the free space
between them is what the step started with (the allocator merges neighbouring free blocks, so the
allocated blocks decide the layout). A block allocated before the recording and freed during it
has only its requested size in the trace; its block is that size rounded to 512 B, and it also
owns the free space after it when that is 1 MiB or less in a large-pool segment, which no free
block there can be (every large-pool block is over 1 MiB: PyTorch leaves such a remainder unsplit).
Before writing, the trace is replayed over the rebuilt state at PyTorch's own addresses: each
request must land at the start of a free block that holds it, and the end state must be the
snapshot's segments, block for block; otherwise the script fails.

    scripts/allocator_trace.py SNAPSHOT.pickle --case CASE.json --out TRACE.json
    scripts/allocator_trace.py ../shared/gpu/h200-2026-11-28/snapshots --out-dir tests/data/allocator_traces

Standard library only (the pickles hold plain dicts and lists).
"""
import argparse
import bisect
import json
import os
import pathlib
import pickle
import sys

MiB = 1 << 20
SMALL_SEGMENT = 2 * MiB  # every small-pool segment is 2 MiB; no large-pool segment is
LARGE_MIN_FREE = 1 * MiB  # a large-pool free block is always over this


def fail(message):
    print(f"allocator_trace.py: {message}", file=sys.stderr)
    sys.exit(1)


def round512(n):
    return max(512, (n + 511) // 512 * 512)


def live_block(state):
    return state in ("active_allocated", "active_pending_free")


def rebuild(snapshot):
    """(segments at the start {addr: size}, allocated blocks at the start {addr: size}, events)
    with events as (action, addr, size, site) of the one stream."""
    trace = snapshot["device_traces"][0]
    if len({e["stream"] for e in trace}) > 1:
        fail("the trace uses more than one stream; only one is replayed")
    final_segments = {s["address"]: s["total_size"] for s in snapshot["segments"]}
    final_live = {b["address"]: b["size"] for s in snapshot["segments"] for b in s["blocks"]
                  if live_block(b["state"])}
    events = [(e["action"], e.get("addr", 0), e["size"], e.get("site")) for e in trace
              if e["action"] in ("alloc", "free_requested", "segment_alloc", "segment_free", "oom")]

    segments = dict(final_segments)
    for action, addr, size, _ in reversed(events):
        if action == "segment_free":
            segments[addr] = size
        elif action == "segment_alloc":
            segments.pop(addr)

    # Blocks live before the recording: freed in it without an allocation in it, or live at its
    # end without one.
    allocated_in_trace, before = set(), {}
    for action, addr, size, _ in events:
        if action == "alloc":
            allocated_in_trace.add(addr)
        elif action == "free_requested":
            if addr in allocated_in_trace:
                allocated_in_trace.discard(addr)
            else:
                before[addr] = round512(size)  # its requested size; the block is settled below
    exact = {a: s for a, s in final_live.items() if a not in allocated_in_trace}
    freed_before = set(before) - set(exact)
    before.update(exact)

    # A block freed in the step owns the free space after it where that space is too small to
    # be a free block of its pool.
    starts = sorted(segments)
    by_segment = {}
    for addr in before:
        i = bisect.bisect_right(starts, addr) - 1
        if i < 0 or addr >= starts[i] + segments[starts[i]]:
            fail(f"block {addr:#x} lies in no segment at the start")
        by_segment.setdefault(starts[i], []).append(addr)
    for seg, blocks in by_segment.items():
        blocks.sort()
        end = seg + segments[seg]
        for k, addr in enumerate(blocks):
            nxt = blocks[k + 1] if k + 1 < len(blocks) else end
            gap = nxt - (addr + before[addr])
            if gap < 0:
                fail(f"blocks {addr:#x} and {nxt:#x} overlap at the start")
            if addr in freed_before and 0 < gap and segments[seg] != SMALL_SEGMENT and \
                    gap <= LARGE_MIN_FREE:
                before[addr] += gap
    return segments, before, events


class Layout:
    """Segments of blocks at PyTorch's addresses: checks that the trace's choices are possible."""

    def __init__(self, segments, allocated):
        self.segments = dict(segments)
        self.allocated = dict(allocated)  # addr -> block bytes

    def segment_of(self, addr):
        for seg, size in self.segments.items():
            if seg <= addr < seg + size:
                return seg
        fail(f"address {addr:#x} is in no segment")

    def free_extent(self, addr):
        """The free block starting at addr: its end."""
        seg = self.segment_of(addr)
        end = seg + self.segments[seg]
        nxt = min([a for a in self.allocated if addr < a < end] + [end])
        for a, s in self.allocated.items():
            if a <= addr < a + s:
                fail(f"{addr:#x} is inside the allocated block {a:#x}")
        return seg, nxt

    def alloc(self, addr, requested):
        seg, free_end = self.free_extent(addr)
        prev_end = max([a + s for a, s in self.allocated.items() if seg <= a < addr] + [seg])
        if prev_end != addr:
            fail(f"a request of {requested} B at {addr:#x} is not at the start of a free block")
        size = round512(requested)
        remainder = free_end - addr - size
        if remainder < 0:
            fail(f"a request of {requested} B at {addr:#x} does not fit its free block")
        small = self.segments[seg] == SMALL_SEGMENT
        if (small and remainder < 512) or (not small and remainder <= LARGE_MIN_FREE):
            size += remainder  # not split
        self.allocated[addr] = size

    def free(self, addr):
        if addr not in self.allocated:
            fail(f"free of {addr:#x}, which is not allocated")
        del self.allocated[addr]


def convert(snapshot, case, source):
    segments, before, events = rebuild(snapshot)
    layout = Layout(segments, before)
    order = sorted(segments)
    ids = {}
    initial = []
    for seg in order:
        blocks = sorted(a for a in before if seg <= a < seg + segments[seg])
        for a in blocks:
            ids[a] = len(ids)
        initial.append({"address": 0, "size": segments[seg],
                        "blocks": [[a - seg, before[a]] for a in blocks]})
    base = min(list(segments) + [a for act, a, _, _ in events if act == "segment_alloc"])
    for seg, entry in zip(order, initial):
        entry["address"] = seg - base
    next_id = len(ids)
    segment_index = {seg: k for k, seg in enumerate(order)}  # by address, while it is held
    placements, sites = [], []
    out_events, segment_events, oom_event, oom_site = [], [], None, None
    reserved = sum(segments.values())
    allocated = sum(before.values())
    initial_reserved, reserved_peak, allocated_peak = reserved, reserved, allocated
    for action, addr, size, where in events:
        if oom_event is not None:
            # After the refusal only the frees of the failed step's tensors follow: applied to
            # check the end state, not written (a replay ends at the refusal).
            if action == "alloc":
                fail("a request follows the out-of-memory")
            if action == "free_requested":
                layout.free(addr)
            elif action == "segment_free":
                del layout.segments[addr]
            continue
        if action == "alloc":
            layout.alloc(addr, size)
            seg = layout.segment_of(addr)
            placements.append([segment_index[seg], addr - seg])
            sites.append(where)
            ids[addr] = next_id
            next_id += 1
            out_events.append(size)
            allocated += layout.allocated[addr]
            allocated_peak = max(allocated_peak, allocated)
        elif action == "free_requested":
            allocated -= layout.allocated[addr]
            layout.free(addr)
            out_events.append(-ids.pop(addr) - 1)
        elif action == "segment_alloc":
            segment_index[addr] = len(order) + sum(1 for e in segment_events if e[1] > 0)
            layout.segments[addr] = size
            reserved += size
            reserved_peak = max(reserved_peak, reserved)
            segment_events.append([len(out_events), size, addr - base])
        elif action == "segment_free":
            if any(layout.segment_of(a) == addr for a in layout.allocated
                   if addr <= a < addr + size):
                fail(f"segment {addr:#x} released while a block in it is live")
            del layout.segments[addr]
            reserved -= size
            segment_events.append([len(out_events), -size, addr - base])
        elif action == "oom":
            oom_event = len(out_events)
            oom_site = where
            out_events.append(size)
    # The end state is the snapshot's, block for block.
    want_segments = {s["address"]: s["total_size"] for s in snapshot["segments"]}
    want_live = {b["address"]: b["size"] for s in snapshot["segments"] for b in s["blocks"]
                 if live_block(b["state"])}
    if layout.segments != want_segments:
        fail("the segments after the replay are not the snapshot's")
    if layout.allocated != want_live:
        diff = set(layout.allocated.items()) ^ set(want_live.items())
        fail(f"the blocks after the replay are not the snapshot's ({len(diff)} differ)")
    doc = {
        "config": case["config"], "batch": case["batch"], "seq": case.get("seq"),
        "cap_bytes": case["cap_gib"] * (1 << 30) if case["cap_gib"] else None,
        "fits": case["fits"], "error": case["error"], "source": source,
        "initial_reserved_bytes": initial_reserved, "reserved_peak_bytes": reserved_peak,
        "allocated_peak_bytes": allocated_peak,
        "snapshot_reserved_peak_bytes": case["reserved_peak_bytes"],
        "snapshot_allocated_peak_bytes": case["allocated_peak_bytes"],
        "initial": initial, "events": out_events, "placements": placements,
        "oom_event": oom_event,
        "segments": segment_events,
    }
    if any(sites) or oom_site:
        doc["sites"] = sites
        doc["oom_site"] = oom_site
    return doc


def write(doc, path, meta):
    doc = {**meta, **doc}
    path = pathlib.Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".partial")
    with open(tmp, "w") as f:
        json.dump(doc, f, separators=(",", ":"))
        f.write("\n")
    os.replace(tmp, path)
    print(f"wrote {path}: {len(doc['initial'])} segments, {len(doc['events'])} events",
          file=sys.stderr)


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("snapshot", help="a snapshot pickle, or a folder of them with snapshots.json")
    ap.add_argument("--case", help="the snapshot's entry of snapshots.json (one pickle)")
    ap.add_argument("--out", help="the trace to write (one pickle)")
    ap.add_argument("--out-dir", help="where the folder's traces go, one per pickle")
    args = ap.parse_args()
    src = pathlib.Path(args.snapshot)
    if src.is_dir():
        if not args.out_dir:
            fail("a folder of snapshots needs --out-dir")
        index = json.loads((src / "snapshots.json").read_text())
        meta = {"torch": index.get("torch"), "gpu": index.get("gpu")}
        for case in index["cases"]:
            with open(src / case["snapshot"], "rb") as f:
                snapshot = pickle.load(f)
            name = case["snapshot"].replace(".pickle", ".json")
            write(convert(snapshot, case, case["snapshot"]), pathlib.Path(args.out_dir) / name,
                  meta)
        return 0
    if not args.case or not args.out:
        fail("one pickle needs --case (its snapshots.json entry) and --out")
    case = json.loads(pathlib.Path(args.case).read_text())
    with open(src, "rb") as f:
        snapshot = pickle.load(f)
    write(convert(snapshot, case, src.name), args.out, {})
    return 0


if __name__ == "__main__":
    sys.exit(main())

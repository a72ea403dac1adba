// Allocator speed: replays a fixed trace of mixed-size allocations and frees, the kind a training
// step issues, through each policy on a virtual source. A large model's trial is ~10k requests and
// the batch search runs tens of trials per configuration, so this bounds the cost of `sim`.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <utility>
#include <vector>

#include "alloc/allocator.h"
#include "device/sources.h"

namespace vrambench {
namespace {

struct TraceOp {
  bool allocate;  // allocate `bytes` into `slot`, or free what `slot` holds
  Bytes bytes;
  std::size_t slot;
};

// `requests` allocations with frees interleaved, everything freed by the end. Sizes: 70% small
// (norm statistics, biases: up to 1 MiB), 25% medium (1-10 MiB), 5% large (10-64 MiB), so that
// every pool and segment rule is exercised. Fixed seed: every run replays the same trace.
std::vector<TraceOp> make_trace(std::int64_t requests) {
  std::mt19937_64 rng(7);
  std::uniform_int_distribution<int> size_class(0, 99);
  std::uniform_int_distribution<Bytes> small_bytes(1, 1 * MiB);
  std::uniform_int_distribution<Bytes> medium_bytes(1 * MiB, 10 * MiB);
  std::uniform_int_distribution<Bytes> large_bytes(10 * MiB, 64 * MiB);
  std::uniform_real_distribution<double> coin(0.0, 1.0);

  std::vector<TraceOp> trace;
  std::vector<std::size_t> live_slots;
  std::size_t next_slot = 0;
  std::int64_t issued = 0;
  while (issued < requests) {
    // Keep a working set of at least 64 live tensors, as a step holds its saved activations.
    if (live_slots.size() < 64 || coin(rng) < 0.55) {
      const int c = size_class(rng);
      const Bytes bytes = c < 70 ? small_bytes(rng) : c < 95 ? medium_bytes(rng) : large_bytes(rng);
      trace.push_back({true, bytes, next_slot});
      live_slots.push_back(next_slot++);
      ++issued;
    } else {
      std::uniform_int_distribution<std::size_t> pick(0, live_slots.size() - 1);
      const std::size_t i = pick(rng);
      trace.push_back({false, 0, live_slots[i]});
      live_slots[i] = live_slots.back();
      live_slots.pop_back();
    }
  }
  for (std::size_t slot : live_slots) trace.push_back({false, 0, slot});
  return trace;
}

void replay(const std::vector<TraceOp>& trace, Allocator& alloc, std::vector<Block>& slots) {
  for (const TraceOp& op : trace) {
    if (op.allocate) {
      slots[op.slot] = alloc.allocate(op.bytes).value();
    } else {
      alloc.free(slots[op.slot]);
    }
  }
}

std::size_t slot_count(const std::vector<TraceOp>& trace) {
  std::size_t slots = 0;
  for (const TraceOp& op : trace) slots = std::max(slots, op.slot + 1);
  return slots;
}

// A trial as the search runs it: a fresh allocator on a fresh 80 GiB source, the trace, teardown.
void BM_ReplayFresh(benchmark::State& state, AllocatorKind kind) {
  const auto trace = make_trace(state.range(0));
  std::vector<Block> slots(slot_count(trace));
  for (auto _ : state) {
    auto source = make_virtual_source(80 * GiB);
    auto alloc = make_allocator(kind, *source);
    replay(trace, *alloc, slots);
    alloc->release_cached();
    benchmark::DoNotOptimize(alloc->stats().reserved_peak);
  }
  state.SetItemsProcessed(state.iterations() * static_cast<std::int64_t>(trace.size()));
}

// The same trace on a warm cache: after a first pass, requests are served mostly from cached
// blocks and the cost is the best-fit search, splitting and merging alone.
void BM_ReplayWarm(benchmark::State& state) {
  const auto trace = make_trace(state.range(0));
  std::vector<Block> slots(slot_count(trace));
  auto source = make_virtual_source(80 * GiB);
  auto alloc = make_caching_allocator(*source);
  replay(trace, *alloc, slots);
  for (auto _ : state) {
    replay(trace, *alloc, slots);
    benchmark::DoNotOptimize(alloc->stats().reserved);
  }
  state.SetItemsProcessed(state.iterations() * static_cast<std::int64_t>(trace.size()));
}

BENCHMARK_CAPTURE(BM_ReplayFresh, caching, AllocatorKind::caching)->Arg(2000)->Arg(10000);
BENCHMARK_CAPTURE(BM_ReplayFresh, direct, AllocatorKind::direct)->Arg(2000)->Arg(10000);
BENCHMARK(BM_ReplayWarm)->Arg(2000)->Arg(10000);

}  // namespace
}  // namespace vrambench

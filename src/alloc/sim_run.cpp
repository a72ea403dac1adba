// The replay of a training run on virtual memory: the sim device's trial and the estimate's
// allocator share.
#include "alloc/sim_run.h"

#include <fmt/format.h>

#include <memory>
#include <utility>

#include "alloc/caching.h"
#include "alloc/virtual_source.h"
#include "core/error.h"

namespace vrambench {

RunAllocations run_allocations(const Program& program, const Schedule& schedule,
                               const std::vector<BatchScaledProgram::Line>& lines) {
  RunAllocations run;
  run.reserve(schedule.events().size());
  for (const RunEvent& e : schedule.events()) {
    if (e.kind != RunEvent::Kind::alloc && e.kind != RunEvent::Kind::free) continue;
    const auto i = static_cast<std::size_t>(e.id);
    const Tensor& t = program.tensors[i];
    const BatchScaledProgram::Line line =
        lines.empty() ? BatchScaledProgram::Line{t.bytes, 0} : lines[i];
    run.push_back({e.id, e.op, e.kind == RunEvent::Kind::alloc, !t.on_device(), t.role,
                   line.intercept, line.slope});
  }
  return run;
}

namespace {

// The capacity of a replay without a limit.
constexpr Bytes kUnlimited = std::numeric_limits<Bytes>::max() / 4;

Bytes bytes_at(const RunAllocation& e, std::int64_t batch) {
  return checked_add(e.fixed, checked_mul(batch, e.per_sample, "tensor bytes"), "tensor bytes");
}

std::int32_t slots_of(const RunAllocations& run) {
  std::int32_t slots = 0;
  for (const RunAllocation& e : run) slots = std::max(slots, e.id + 1);
  return slots;
}

// The live tensors' bytes and the peaks, as the trial runner keeps them (measure/trial.cpp).
struct Tally {
  std::vector<Bytes> bytes;  // per tensor id, while live
  Bytes live = 0;
  RoleBytes live_by_role;
  TrialResult result;

  explicit Tally(std::int32_t slots) : bytes(static_cast<std::size_t>(slots), 0) {}
  void allocated(const RunAllocation& e, Bytes b) {
    bytes[static_cast<std::size_t>(e.id)] = b;
    live += b;
    live_by_role[e.role] += b;
    // Strictly greater: the first op to reach the peak names it.
    if (live > result.tensor_peak) {
      result.tensor_peak = live;
      result.peak_op = e.op;
      result.peak_by_role = live_by_role;
    }
  }
  void freed(const RunAllocation& e) {
    const Bytes b = bytes[static_cast<std::size_t>(e.id)];
    live -= b;
    live_by_role[e.role] -= b;
  }
};

// One replay in progress: an allocator over its virtual source, the blocks of the live tensors,
// the tally.
struct Replay {
  VirtualSource source;
  std::unique_ptr<Allocator> owned;  // direct
  std::unique_ptr<CachingAllocator> caching;
  std::vector<Block> blocks;
  Tally tally;

  Replay(AllocatorKind kind, Bytes capacity, std::int32_t slots)
      : source(capacity), blocks(static_cast<std::size_t>(slots)), tally(slots) {
    if (kind == AllocatorKind::caching)
      caching = std::make_unique<CachingAllocator>(source);
    else
      owned = make_allocator(kind, source);
  }
  // `other`'s state (a caching replay), handed segments up to `capacity` from now on.
  Replay(const Replay& other, Bytes capacity)
      : source(other.source, capacity),
        caching(std::make_unique<CachingAllocator>(*other.caching, source)),
        blocks(other.blocks),
        tally(other.tally) {}
  Replay(const Replay&) = delete;
  Replay& operator=(const Replay&) = delete;

  Allocator& allocator() { return caching ? static_cast<Allocator&>(*caching) : *owned; }

  // Runs run[from..] and returns the index of the first allocation that failed (the run's size
  // when none did). Without `retry` (caching only) an allocation fails where the source first
  // refuses a segment, with nothing changed, so that the replay can go on from there another way.
  std::size_t go(const RunAllocations& run, std::size_t from, std::int64_t batch, bool retry) {
    Allocator& a = allocator();
    for (std::size_t i = from; i < run.size(); ++i) {
      const RunAllocation& e = run[i];
      if (e.paged) {
        if (e.alloc) tally.result.paged_bytes += bytes_at(e, batch);
        continue;
      }
      const auto slot = static_cast<std::size_t>(e.id);
      if (!e.alloc) {
        a.free(blocks[slot]);
        tally.freed(e);
        continue;
      }
      const Bytes bytes = bytes_at(e, batch);
      const std::optional<Block> block =
          retry ? a.allocate(bytes) : caching->allocate_without_retry(bytes);
      if (!block) return i;
      assign_fields(blocks[slot], *block);
      tally.allocated(e, bytes);
    }
    return run.size();
  }

  // The trial's result once the replay ended: fit, or the allocation at `failed` refused.
  TrialResult finish(const RunAllocations& run, std::size_t failed, const Program* names,
                     std::int64_t batch, Bytes fixed_overhead) {
    TrialResult r = tally.result;
    r.fit = failed == run.size();
    if (!r.fit) {
      if (names == nullptr) throw InternalError("allocator replay: a failure without its names");
      const RunAllocation& e = run[failed];
      r.oom =
          OomInfo{e.op < 0 ? std::string{} : names->ops[static_cast<std::size_t>(e.op)].name.str(),
                  names->tensors[static_cast<std::size_t>(e.id)].name.str(), bytes_at(e, batch),
                  allocator().free_bytes()};
    }
    r.reserved_peak = allocator().stats().reserved_peak;
    r.device_peak = r.reserved_peak + fixed_overhead;
    return r;
  }
};

}  // namespace

// What a failed run needs to go on without a limit: the allocations, and (caching) the replay
// copied where the source first refused a segment, or (direct) nothing: it starts again.
struct UnlimitedRest {
  const RunAllocations* run = nullptr;
  std::int64_t batch = 0;
  Bytes fixed_overhead = 0;
  AllocatorKind allocator{};
  std::size_t from = 0;
  std::unique_ptr<Replay> replay;
};

SimRun::SimRun() = default;
SimRun::SimRun(TrialResult result, std::unique_ptr<UnlimitedRest> rest)
    : at_capacity(std::move(result)), rest_(std::move(rest)) {}
SimRun::SimRun(SimRun&&) noexcept = default;
SimRun& SimRun::operator=(SimRun&&) noexcept = default;
SimRun::~SimRun() = default;

const std::optional<TrialResult>& SimRun::unlimited() const {
  if (rest_) {
    const UnlimitedRest& rest = *rest_;
    std::unique_ptr<Replay> fresh;
    Replay& replay = rest.replay ? *rest.replay
                                 : *(fresh = std::make_unique<Replay>(rest.allocator, kUnlimited,
                                                                      slots_of(*rest.run)));
    const std::size_t none = replay.go(*rest.run, rest.from, rest.batch, true);
    if (none != rest.run->size())
      throw InternalError("allocator replay: an allocation failed without a limit");
    unlimited_ = replay.finish(*rest.run, none, nullptr, rest.batch, rest.fixed_overhead);
    rest_.reset();
  }
  return unlimited_;
}

SimRun sim_run(const RunAllocations& run, const Program& names, std::int64_t batch,
               AllocatorKind allocator, Bytes capacity, Bytes fixed_overhead) {
  const std::int32_t slots = slots_of(run);
  auto rest = std::make_unique<UnlimitedRest>();
  *rest = UnlimitedRest{&run, batch, fixed_overhead, allocator, 0, nullptr};
  Replay at(allocator, capacity, slots);
  std::size_t failed = 0;
  if (allocator != AllocatorKind::caching) {
    failed = at.go(run, 0, batch, true);
  } else {
    // Until the source first refuses a segment, the replay at the capacity and one without a
    // limit are the same; from there the first frees its cache and retries, the second goes on.
    rest->from = at.go(run, 0, batch, false);
    if (rest->from < run.size()) {
      rest->replay = std::make_unique<Replay>(at, kUnlimited);
      failed = at.go(run, rest->from, batch, true);
    } else {
      failed = rest->from;
    }
  }
  TrialResult result = at.finish(run, failed, &names, batch, fixed_overhead);
  if (result.fit) rest.reset();
  return SimRun(std::move(result), std::move(rest));
}

SimRuns::SimRuns(BatchScaledProgram& sizes, int steps, AllocatorKind allocator, Bytes capacity,
                 Bytes fixed_overhead)
    : sizes_(sizes),
      steps_(steps),
      allocator_(allocator),
      capacity_(capacity),
      fixed_overhead_(fixed_overhead) {}

const SimRun& SimRuns::at(std::int64_t batch) {
  if (auto it = runs_.find(batch); it != runs_.end()) return it->second;
  const RunConfig& cfg = sizes_.config();
  SimRun run;
  if (structure_key(cfg, batch) == structure_key(cfg, 2)) {
    // The structure of every batch from 2: one list of allocations, each size its line, serves
    // them all, and a program of that structure names them.
    if (names_ == nullptr) {
      names_ = &sizes_.at(batch);
      if (!sizes_.byte_lines().empty())
        lines_ = run_allocations(*names_, sizes_.schedule(steps_), sizes_.byte_lines());
    }
    if (!lines_.empty()) {
      run = sim_run(lines_, *names_, batch, allocator_, capacity_, fixed_overhead_);
      return runs_.emplace(batch, std::move(run)).first->second;
    }
  }
  // A structure of its own, or sizes without lines: this batch's program, its own bytes.
  const Program& program = sizes_.at(batch);
  const RunAllocations& own = apart_[batch] =
      run_allocations(program, sizes_.schedule(steps_), {});
  run = sim_run(own, program, 1, allocator_, capacity_, fixed_overhead_);
  return runs_.emplace(batch, std::move(run)).first->second;
}

}  // namespace vrambench

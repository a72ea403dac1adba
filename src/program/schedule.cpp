// The training run's events, from the liveness.
#include "program/schedule.h"

#include <fmt/format.h>

#include <algorithm>

#include "core/error.h"

namespace vrambench {

Schedule::Schedule(const Program& program, const Liveness& liveness, int steps)
    : steps_(steps), ops_(program.ops.size()), tensors_(program.tensors.size()) {
  if (steps < 1)
    throw InternalError(fmt::format("Schedule: steps must be at least 1, got {}", steps));
  if (liveness.alloc_at.size() != program.tensors.size() ||
      liveness.allocs_before.size() != program.ops.size() ||
      liveness.frees_after.size() != program.ops.size())
    throw InternalError("Schedule: liveness was computed for a different program");
  std::vector<bool> persistent(tensors_, false);
  std::vector<int> upfront;
  for (int id : liveness.persistent) {
    persistent[static_cast<std::size_t>(id)] = true;
    if (!program.tensor(id).lazy) upfront.push_back(id);
  }
  std::sort(upfront.begin(), upfront.end());
  // Every op's allocations and frees, and a step's end, once per step, and the op.
  events_.reserve(2 * upfront.size() + 1 +
                  static_cast<std::size_t>(steps) * (2 * tensors_ + ops_ + 1));
  auto add = [&](RunEvent::Kind kind, int step, int op, int id) {
    events_.push_back({kind, static_cast<std::int16_t>(step), op, id});
  };
  for (int id : upfront) add(RunEvent::Kind::alloc, -1, -1, id);
  for (int id : upfront) add(RunEvent::Kind::init, -1, -1, id);
  add(RunEvent::Kind::ready, -1, -1, -1);

  // What a step keeps to its end: allocated in it, freed after its last op.
  std::vector<int> kept;
  for (std::size_t id = 0; id < tensors_; ++id)
    if (!persistent[id] && liveness.free_after[id] == static_cast<int>(ops_) &&
        liveness.alloc_at[id] >= 0)
      kept.push_back(static_cast<int>(id));
  for (int step = 0; step < steps; ++step) {
    step_begin_.push_back(events_.size());
    for (std::size_t i = 0; i < ops_; ++i) {
      const int op = static_cast<int>(i);
      if (step == 0)
        for (int id : liveness.first_step_allocs[i]) {
          add(RunEvent::Kind::alloc, step, op, id);
          add(RunEvent::Kind::init, step, op, id);
        }
      for (int id : liveness.allocs_before[i]) add(RunEvent::Kind::alloc, step, op, id);
      add(RunEvent::Kind::run, step, op, -1);
      for (int id : liveness.frees_after[i]) add(RunEvent::Kind::free, step, op, id);
    }
    add(RunEvent::Kind::step_end, step, -1, -1);
    for (int id : kept) add(RunEvent::Kind::free, step, -1, id);
  }
  step_begin_.push_back(events_.size());
}

std::span<const RunEvent> Schedule::step(int step) const {
  const auto s = static_cast<std::size_t>(step);
  return std::span<const RunEvent>(events_).subspan(step_begin_.at(s),
                                                    step_begin_.at(s + 1) - step_begin_[s]);
}

LiveProfile live_profile(const Program& program, const Schedule& schedule) {
  LiveProfile profile;
  profile.allocated.assign(program.ops.size(), 0);
  profile.freed.assign(program.ops.size(), 0);
  profile.live_after.assign(program.ops.size(), 0);
  const int last = schedule.steps() - 1;
  Bytes live = 0;
  bool started = false;
  for (const RunEvent& e : schedule.events()) {
    if (e.step == last && !started) {
      profile.peak = live;  // what the last step starts with
      started = true;
    }
    if (e.kind == RunEvent::Kind::alloc) live += program.tensor(e.id).bytes;
    if (e.kind == RunEvent::Kind::free) live -= program.tensor(e.id).bytes;
    if (e.step != last || e.op < 0) continue;
    const auto op = static_cast<std::size_t>(e.op);
    if (e.kind == RunEvent::Kind::alloc) profile.allocated[op] += program.tensor(e.id).bytes;
    if (e.kind == RunEvent::Kind::free) profile.freed[op] += program.tensor(e.id).bytes;
    if (e.kind == RunEvent::Kind::run && live > profile.peak) {
      profile.peak = live;
      profile.peak_op = e.op;
    }
    if (e.kind == RunEvent::Kind::run || e.kind == RunEvent::Kind::free)
      profile.live_after[op] = live;
  }
  return profile;
}

LiveProfile live_profile(const Program& program, const Liveness& liveness) {
  return live_profile(program, Schedule(program, liveness, kTrialSteps));
}

}  // namespace vrambench

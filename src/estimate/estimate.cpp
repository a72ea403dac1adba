// vrambench's memory model, read off the step program: one walk over its ops with every tensor's
// bytes a line in the batch gives the live bytes at each op as fixed + B * per_sample; the ops
// whose line is the highest at some batch are the moments that can be the peak, and the one with
// the most bytes per sample is broken down by the tensors' components. The allocator's share comes
// from replaying the same program's allocations (allocator_share.cpp). docs/memory-model.md.
#include "estimate/estimate.h"

#include <algorithm>
#include <array>
#include <limits>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/error.h"
#include "estimate/allocator_share.h"
#include "program/program.h"

namespace vrambench {
namespace {

using Line = BatchScaledProgram::Line;

// What is live on the device while op `op` runs (its outputs allocated, nothing freed yet: where a
// trial's tensor peak is taken), the context included.
struct LiveLine {
  std::size_t op = 0;
  Bytes fixed = 0;
  Bytes per_sample = 0;
};

// The device's live bytes at every op of the run's last step (the steady state, with two steps
// or more: what the lazy tensors hold is live throughout).
std::vector<LiveLine> points_of(const Program& p, const Schedule& schedule,
                                const std::vector<Line>& lines, Bytes context) {
  Bytes fixed = context, per_sample = 0;
  auto add = [&](int id, Bytes sign) {
    if (!p.tensor(id).on_device()) return;
    const Line& l = lines[static_cast<std::size_t>(id)];
    fixed = checked_add(fixed, sign * l.intercept, "live bytes");
    per_sample = checked_add(per_sample, sign * l.slope, "live bytes");
  };
  std::vector<LiveLine> points;
  points.reserve(p.ops.size());
  const int last = schedule.steps() - 1;
  for (const RunEvent& e : schedule.events()) {
    if (e.kind == RunEvent::Kind::alloc) add(e.id, 1);
    if (e.kind == RunEvent::Kind::free) add(e.id, -1);
    if (e.kind == RunEvent::Kind::run && e.step == last)
      points.push_back({static_cast<std::size_t>(e.op), fixed, per_sample});
  }
  return points;
}

// The points that are the peak for some batch B >= 1: the upper envelope of the lines
// fixed + B * per_sample, from B = 1 upwards. The last one has the most bytes per sample.
std::vector<std::size_t> envelope(const std::vector<LiveLine>& points) {
  std::vector<std::size_t> order;
  if (points.empty()) return order;
  // The highest line at B = 1, the steepest among equals.
  std::size_t current = 0;
  for (std::size_t i = 1; i < points.size(); ++i) {
    const LiveLine& a = points[i];
    const LiveLine& b = points[current];
    const Bytes va = a.fixed + a.per_sample, vb = b.fixed + b.per_sample;
    if (va > vb || (va == vb && a.per_sample > b.per_sample)) current = i;
  }
  order.push_back(current);
  double from = 1.0;
  for (;;) {
    // The steeper line that overtakes the current one first.
    std::size_t next = points.size();
    double next_at = std::numeric_limits<double>::infinity();
    for (std::size_t i = 0; i < points.size(); ++i) {
      if (points[i].per_sample <= points[current].per_sample) continue;
      const double crossing =
          static_cast<double>(points[current].fixed - points[i].fixed) /
          static_cast<double>(points[i].per_sample - points[current].per_sample);
      const double at = std::max(crossing, from);
      if (at < next_at || (at == next_at && next < points.size() &&
                           points[i].per_sample > points[next].per_sample)) {
        next = i;
        next_at = at;
      }
    }
    if (next == points.size()) break;
    order.push_back(next);
    current = next;
    from = next_at;
  }
  return order;
}

constexpr std::size_t kComponents =
    static_cast<std::size_t>(MemoryComponent::allocator_fragmentation) + 1;

// The bytes live at op `at` by component, fixed and per sample, the context included; paged
// optimizer state is listed too (Breakdown's sums leave it out).
struct ByComponent {
  std::array<Bytes, kComponents> fixed{};
  std::array<Bytes, kComponents> per_sample{};
};
// The bytes by component live while op `peak_op` and op `end_op` of the last step run (the
// context not included), in one walk of the run.
std::pair<ByComponent, ByComponent> components_at(const Program& p, const Schedule& schedule,
                                                  const std::vector<Line>& lines,
                                                  std::size_t peak_op, std::size_t end_op) {
  ByComponent now, at_peak, at_end;
  std::vector<bool> live(p.tensors.size(), false);
  auto add = [&](std::size_t id, Bytes sign) {
    const auto c = static_cast<std::size_t>(p.tensors[id].component);
    now.fixed[c] = checked_add(now.fixed[c], sign * lines[id].intercept, "component bytes");
    now.per_sample[c] = checked_add(now.per_sample[c], sign * lines[id].slope, "component bytes");
  };
  const int last = schedule.steps() - 1;
  for (const RunEvent& e : schedule.events()) {
    const auto id = static_cast<std::size_t>(e.id);
    if (e.kind == RunEvent::Kind::alloc && !live[id]) {
      live[id] = true;
      add(id, 1);
    } else if (e.kind == RunEvent::Kind::free && live[id]) {
      live[id] = false;
      add(id, -1);
    } else if (e.kind == RunEvent::Kind::run && e.step == last) {
      const auto op = static_cast<std::size_t>(e.op);
      if (op == peak_op) at_peak = now;
      if (op == end_op) {
        at_end = now;
        break;  // the last op of the step: nothing after it is read
      }
    }
  }
  return {at_peak, at_end};
}

std::vector<Component> listed(const std::array<Bytes, kComponents>& bytes) {
  std::vector<Component> out;
  for (std::size_t c = 0; c < kComponents; ++c)
    if (bytes[c] != 0) out.push_back({static_cast<MemoryComponent>(c), bytes[c]});
  return out;
}

Bytes device_sum(const std::vector<Component>& list) {
  Bytes total = 0;
  for (const Component& c : list)
    if (c.kind != MemoryComponent::paged_optimizer_state && c.kind != MemoryComponent::host_offload)
      total = checked_add(total, c.bytes, "breakdown total");
  return total;
}

// What no batch size changes: parameters, their gradients and optimizer state.
bool is_model_state(MemoryComponent c) {
  using enum MemoryComponent;
  return c == weights || c == master_weights || c == gradients || c == optimizer_state ||
         c == quantized_weights || c == frozen_weights || c == adapters || c == adapter_grads;
}

}  // namespace

Bytes Moment::peak(std::int64_t batch) const {
  return checked_add(fixed, checked_mul(batch, per_sample, "estimated peak"), "estimated peak");
}

Bytes Breakdown::fixed_total() const {
  return device_sum(fixed);
}
Bytes Breakdown::per_sample_total() const {
  return device_sum(per_sample);
}

Bytes Breakdown::peak(std::int64_t batch) const {
  Bytes best = Moment{moment, fixed_total(), per_sample_total()}.peak(batch);
  for (const Moment& m : other_moments) best = std::max(best, m.peak(batch));
  return best;
}

std::int64_t Breakdown::max_batch(Bytes capacity, Bytes extra_per_sample) const {
  std::int64_t best = std::numeric_limits<std::int64_t>::max();
  auto limit = [&](Bytes at_zero, Bytes slope) {
    if (capacity < at_zero) {
      best = 0;
      return;
    }
    slope = checked_add(slope, extra_per_sample, "per-sample bytes");
    if (slope > 0) best = std::min(best, (capacity - at_zero) / slope);
  };
  limit(fixed_total(), per_sample_total());
  for (const Moment& m : other_moments) limit(m.fixed, m.per_sample);
  return best;
}

Bytes Breakdown::component(MemoryComponent kind, std::int64_t batch) const {
  Bytes total = 0;
  for (const Component& c : fixed)
    if (c.kind == kind) total = checked_add(total, c.bytes, "component bytes");
  for (const Component& c : per_sample)
    if (c.kind == kind)
      total = checked_add(total, checked_mul(batch, c.bytes, "component bytes"), "component bytes");
  return total;
}

Breakdown analyze(BatchScaledProgram& step, const DeviceOverhead& overhead, SimRuns* runs) {
  const RunConfig& cfg = step.config();
  const Program& program = step.at(2);
  const Schedule& schedule = step.schedule(overhead.steps);
  const std::vector<Line>& lines = step.byte_lines();
  if (lines.size() != program.tensors.size() || program.ops.empty())
    throw InternalError("estimate: the step program's sizes are no lines in the batch");

  const std::vector<LiveLine> points = points_of(program, schedule, lines, overhead.context);
  const std::vector<std::size_t> order = envelope(points);
  const LiveLine& main = points[order.back()];
  Breakdown out;
  out.moment = program.ops[main.op].name.str();
  const LiveLine& last = points.back();
  auto [at_peak, at_end] = components_at(program, schedule, lines, main.op, last.op);
  constexpr auto kContext = static_cast<std::size_t>(MemoryComponent::cuda_context);
  at_peak.fixed[kContext] = checked_add(at_peak.fixed[kContext], overhead.context, "context");
  out.fixed = listed(at_peak.fixed);
  out.per_sample = listed(at_peak.per_sample);
  for (std::size_t k = 0; k + 1 < order.size(); ++k) {
    const LiveLine& p = points[order[k]];
    out.other_moments.push_back({program.ops[p.op].name.str(), p.fixed, p.per_sample});
  }
  // The end of the step holds the whole model state; listed so that it can be read off even when
  // it is never the peak (it cannot raise the peak above the envelope).
  if (std::find(order.begin(), order.end(), points.size() - 1) == order.end())
    out.other_moments.push_back({program.ops[last.op].name.str(), last.fixed, last.per_sample});
  for (std::size_t c = 0; c < kComponents; ++c)
    if (is_model_state(static_cast<MemoryComponent>(c)))
      out.model_state = checked_add(out.model_state, at_end.fixed[c], "model state");

  // The allocator's share, the same at every moment, so that the tensor bytes stay apart: a replay
  // of this program's training run (at batch 1 its own program's where the structure differs
  // there), the sim device's trial.
  if (!overhead.allocator_share) return out;
  std::optional<SimRuns> own;
  if (runs == nullptr)
    runs = &own.emplace(step, overhead.steps, cfg.allocator,
                        allocator_share::share_capacity(overhead), overhead.context);
  if (runs->capacity() != allocator_share::share_capacity(overhead))
    throw InternalError("estimate: the runs given were replayed on another capacity");
  allocator_share::fit_allocator_share(out, *runs, cfg, overhead);
  return out;
}

Bytes allocated_peak(BatchScaledProgram& step, std::int64_t batch) {
  const Program& program = step.at(batch);
  std::vector<Line> bytes(program.tensors.size());
  for (std::size_t i = 0; i < bytes.size(); ++i) bytes[i].intercept = program.tensors[i].bytes;
  Bytes peak = 0;
  for (const LiveLine& p : points_of(program, step.schedule(), bytes, 0))
    peak = std::max(peak, p.fixed);
  return peak;
}

Breakdown analyze(const RunConfig& cfg, const DeviceOverhead& overhead) {
  BatchScaledProgram step(cfg, overhead.gemm_workspace);
  return analyze(step, overhead);
}

}  // namespace vrambench

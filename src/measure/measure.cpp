// measure(): estimate, then search with real trials, keeping what the report needs.
#include "measure/measure.h"

#include <fmt/format.h>

#include <algorithm>
#include <limits>
#include <optional>

#include "core/error.h"
#include "estimate/deepspeed.h"
#include "estimate/formula.h"
#include "model/weights.h"
#include "program/program.h"
#include "program/scaled_program.h"

namespace vrambench {

const TrialResult* Measurement::at_max() const {
  auto it = trials.find(search.max_batch);
  return search.max_batch > 0 && it != trials.end() ? &it->second : nullptr;
}

const TrialResult* Measurement::at_next() const {
  auto it = trials.find(search.max_batch + 1);
  return it != trials.end() ? &it->second : nullptr;
}

std::int64_t Measurement::compared_batch() const {
  return search.max_batch > 0 ? search.max_batch : 1;
}

Bytes Measurement::measured_peak() const {
  if (const TrialResult* t = at_max()) return t->device_peak;
  return next_needed && search.max_batch == 0 ? next_needed->device_peak : 0;
}

Bytes Measurement::estimated_peak() const {
  return est_peak_at_compared ? *est_peak_at_compared : estimate.peak(compared_batch());
}

double Measurement::relative_error() const {
  const Bytes measured = measured_peak();
  if (measured <= 0) return 0.0;
  return static_cast<double>(estimated_peak() - measured) / static_cast<double>(measured);
}

namespace {

// One trial of a program already built: cfg's allocator over a fresh source of `capacity` bytes of
// `device`, and paged optimizer state in its own pool.
TrialResult replay(const Program& program, const Schedule& schedule, const RunConfig& cfg,
                   const Device& device, Bytes capacity, Executor* executor) {
  std::unique_ptr<SegmentSource> source = device.make_source(capacity);
  std::unique_ptr<Allocator> allocator = make_allocator(cfg.allocator, *source);
  // Paged optimizer state and offloaded state: their own pool, allocated once (direct), outside
  // the capacity.
  std::unique_ptr<SegmentSource> paged_source;
  std::unique_ptr<Allocator> paged;
  if (has_off_device_state(cfg)) {
    paged_source = device.make_paged_source();
    paged = make_allocator(AllocatorKind::direct, *paged_source);
  }
  return run_step(program, schedule, *allocator, executor, device.info.fixed_overhead, source.get(),
                  paged.get());
}

}  // namespace

TrialResult run_trial(const RunConfig& cfg, const Device& device, std::int64_t batch,
                      Bytes capacity, Executor* executor) {
  RunConfig at = cfg;
  at.batch = batch;
  const Program program = build_program(at, device.info.gemm_workspace);
  return replay(program, Schedule(program, compute_liveness(program), device.info.trial_steps), cfg,
                device, capacity, executor);
}

std::string Measurement::note() const {
  if (failure != Failure::none) return fmt::format("{}: {}", to_string(failure), reason);
  return reason;
}

DeviceOverhead estimate_overhead(const DeviceInfo& device, bool share_at_batch) {
  DeviceOverhead overhead{device.fixed_overhead, device.gemm_workspace, device.total};
  overhead.share_at_batch = share_at_batch;
  overhead.steps = device.trial_steps;
  return overhead;
}

std::optional<FormulaFigures> formula_figures(const RunConfig& cfg, Bytes context, Bytes capacity,
                                              std::int64_t batch) {
  if (!has_formula(cfg)) return std::nullopt;
  const Formula f = formula(cfg, context);
  return FormulaFigures{f.max_batch(capacity), batch > 0 ? f.peak(batch) : 0};
}

EstimateFigures estimate_figures(const RunConfig& cfg, const DeviceInfo& device, bool at_batch) {
  EstimateFigures e;
  e.config = cfg;
  e.capacity = device.total;
  BatchScaledProgram step(cfg, device.gemm_workspace);
  e.breakdown = analyze(step, estimate_overhead(device));
  e.est_max_batch = e.breakdown.max_batch(device.total);
  if (at_batch) {
    e.breakdown = analyze(step, estimate_overhead(device, true));
    e.batch = cfg.batch;
  } else {
    e.batch = e.est_max_batch;
  }
  if (e.batch > 0) {
    e.peak = e.breakdown.peak(e.batch);
    e.allocated = allocated_peak(step, e.batch);
  }
  e.fits = e.peak <= device.total;
  e.formula = formula_figures(cfg, device.fixed_overhead, device.total, e.batch);
  e.parameters = parameter_count(cfg.model);
  e.host = e.breakdown.component(MemoryComponent::host_offload);
  e.deepspeed_estimate = deepspeed_estimate(cfg);
  if (e.deepspeed_estimate) e.deepspeed_count = deepspeed_count(step.at(cfg.batch));
  return e;
}

Measurement failed_measurement(const RunConfig& cfg, const DeviceInfo& device, Failure failure,
                               std::string detail) {
  Measurement m;
  m.config = cfg;
  m.fixed_overhead = device.fixed_overhead;
  m.estimate = analyze(cfg, estimate_overhead(device));
  m.est_max_batch = m.estimate.max_batch(device.total);
  m.failure = failure;
  m.reason = std::move(detail);
  m.formula = formula_figures(cfg, m.fixed_overhead, device.total, m.compared_batch());
  return m;
}

namespace {

// The estimate's peak at cfg.batch, the allocator's share taken there (as a trial at that batch
// reserves it).
Bytes estimated_peak_at_batch(const RunConfig& cfg, const DeviceInfo& device) {
  return analyze(cfg, estimate_overhead(device, true)).peak(cfg.batch);
}

// The estimate as the search's starting point: its max batch, and the fixed bytes of its line
// through that batch (the peak is a maximum of lines; the one at the hint is what counts there).
SearchHint search_hint(const Breakdown& estimate, std::int64_t est_max_batch,
                       const SearchLimits& limits) {
  SearchHint hint;
  hint.batch =
      std::clamp<std::int64_t>(est_max_batch, 1, std::max<std::int64_t>(limits.max_batch, 1));
  if (hint.batch < std::numeric_limits<std::int64_t>::max()) {
    const Bytes at = estimate.peak(hint.batch);
    const Bytes per_sample = estimate.peak(hint.batch + 1) - at;
    if (per_sample > 0 && per_sample <= at / hint.batch) hint.fixed = at - hint.batch * per_sample;
  }
  return hint;
}

}  // namespace

DeviceInfo warm_up(const RunConfig& cfg, const Device& device, Executor* executor) {
  DeviceInfo warmed = device.info;
  run_trial(cfg, device, 1, device.info.tensor_capacity(), executor);
  if (const std::optional<Bytes> used = device.make_source(0)->device_used())
    warmed.fixed_overhead = *used;
  return warmed;
}

Measurement measure(const RunConfig& cfg, const Device& given, const SearchLimits& limits,
                    const TrialObserver& observe, const TrialStarting& starting) {
  std::unique_ptr<Executor> executor = given.make_executor();
  if (executor && given.info.warm_up && starting) starting(1);  // the warm-up can hang like a trial
  Device device = given;
  if (executor && given.info.warm_up) device.info = warm_up(cfg, given, executor.get());
  const DeviceInfo& info = device.info;
  // The estimate reads the step program, and replays that run no executor (every trial on sim,
  // and what a batch needs) rescale the same one instead of building one per batch.
  BatchScaledProgram sizes(cfg, info.gemm_workspace);
  // On sim a trial is the replay the estimate makes (alloc/sim_run.h): the two read each other's.
  std::optional<SimRuns> runs;
  if (!executor)
    runs.emplace(sizes, info.trial_steps, cfg.allocator, info.tensor_capacity(),
                 info.fixed_overhead);
  Measurement m;
  m.config = cfg;
  m.fixed_overhead = info.fixed_overhead;
  m.estimate = analyze(sizes, estimate_overhead(info), runs ? &*runs : nullptr);
  m.est_max_batch = m.estimate.max_batch(info.total);
  if (executor) m.attention_impl = std::string(executor->attention_impl(cfg));
  auto allocate_only = [&](std::int64_t batch, Bytes capacity, const Device& on) {
    const Program& program = sizes.at(batch);
    return replay(program, sizes.schedule(on.info.trial_steps), cfg, on, capacity, nullptr);
  };
  // What a batch would need, replayed without a limit (sizes only).
  const Device unlimited_sizes = simulated(info);
  auto needed = [&](std::int64_t batch) {
    if (runs)
      if (const SimRun& run = runs->at(batch); run.unlimited()) return *run.unlimited();
    return allocate_only(batch, std::numeric_limits<Bytes>::max() / 4, unlimited_sizes);
  };
  const SearchHint hint = search_hint(m.estimate, m.est_max_batch, limits);
  std::map<std::int64_t, TrialResult> needs;  // of the batches that failed, by batch
  bool any_fit = false;
  auto trial = [&](std::int64_t batch) {
    if (starting) starting(batch);
    TrialResult result = executor
                             ? run_trial(cfg, device, batch, info.tensor_capacity(), executor.get())
                             : runs->at(batch).at_capacity;
    if (observe) observe(batch, result);
    // The peak of a failure is what it reached before the OOM; the search predicts from what the
    // batch needs, which the replay without a limit tells. With the hint's fixed bytes it reads
    // that only until a batch has fit (search.h), so later failures are not replayed twice.
    TrialOutcome outcome{result.fit, result.device_peak, info.total};
    any_fit = any_fit || result.fit;
    if (!result.fit)
      outcome.peak =
          any_fit && hint.fixed ? 0 : needs.emplace(batch, needed(batch)).first->second.device_peak;
    m.trials.emplace(batch, std::move(result));
    return outcome;
  };
  m.search = find_max_batch(trial, hint, limits);

  if (!m.search.hit_limit) {
    // What the first failing batch would need (the search has replayed it already).
    const std::int64_t next = m.search.max_batch + 1;
    auto found = needs.find(next);
    m.next_needed = found != needs.end() ? std::move(found->second) : needed(next);
    if (m.search.max_batch == 0) {
      // Weights, master weights, gradients and optimizer state: what no batch size can shrink.
      const Bytes state = m.estimate.model_state;
      if (state + info.fixed_overhead > info.total)
        m.reason = fmt::format("model state alone exceeds capacity ({} + {} context > {})",
                               format_bytes(state), format_bytes(info.fixed_overhead),
                               format_bytes(info.total));
      else
        m.reason = fmt::format("batch 1 needs {}, capacity {}",
                               format_bytes(m.next_needed->device_peak), format_bytes(info.total));
    }
  }
  // Elsewhere than where the estimate took its share, its line is no answer for the batch compared.
  const std::int64_t compared = m.compared_batch();
  if (compared != m.est_max_batch && compared != m.est_max_batch + 1) {
    RunConfig at = cfg;
    at.batch = compared;
    m.est_peak_at_compared = estimated_peak_at_batch(at, info);
  }
  if (m.search.non_monotone)
    m.reason = fmt::format("non-monotone: batch {} failed but batch {} fit",
                           m.search.non_monotone->first, m.search.non_monotone->second);
  m.formula = formula_figures(cfg, m.fixed_overhead, info.total, compared);
  return m;
}

const TrialResult* SeqMeasurement::at_max() const {
  auto it = trials.find(search.max_seq);
  return search.max_seq > 0 && it != trials.end() ? &it->second : nullptr;
}

namespace {

// cfg at another sequence length, or nothing when its sizes overflow (validate's checks).
std::optional<RunConfig> at_seq(const RunConfig& cfg, std::int64_t seq) {
  RunConfig at = cfg;
  at.seq = seq;
  try {
    validate(at);
  } catch (const UsageError&) {
    return std::nullopt;
  }
  return at;
}

}  // namespace

std::int64_t estimate_max_seq(const RunConfig& cfg, const DeviceInfo& device,
                              const SeqLimits& limits) {
  // Each length is held to what a trial at cfg.batch reserves there.
  auto fits = [&](std::int64_t steps) {
    const std::optional<RunConfig> at = at_seq(cfg, steps * limits.granule);
    if (!at) return false;
    try {
      return estimated_peak_at_batch(*at, device) <= device.total;
    } catch (const UsageError&) {
      return false;  // a peak past 64 bits
    }
  };
  // The estimate grows with the sequence: bisect over [0, max_seq / granule].
  std::int64_t lo = 0, hi = limits.max_seq / limits.granule + 1;  // fits(lo), !fits(hi)
  while (hi - lo > 1) {
    const std::int64_t mid = lo + (hi - lo) / 2;
    (fits(mid) ? lo : hi) = mid;
  }
  return lo * limits.granule;
}

SeqMeasurement measure_max_seq(const RunConfig& cfg, const Device& device, const SeqLimits& limits,
                               const TrialObserver& observe) {
  std::unique_ptr<Executor> executor = device.make_executor();
  SeqMeasurement m;
  m.config = cfg;
  m.est_max_seq = estimate_max_seq(cfg, device.info, limits);
  auto fits = [&](std::int64_t seq) {
    const std::optional<RunConfig> at = at_seq(cfg, seq);
    if (!at) return false;
    TrialResult result =
        run_trial(*at, device, at->batch, device.info.tensor_capacity(), executor.get());
    const bool fit = result.fit;
    if (observe) observe(seq, result);
    m.trials.emplace(seq, std::move(result));
    return fit;
  };
  m.search = find_max_seq(fits, std::max(m.est_max_seq, limits.granule), limits);
  return m;
}

}  // namespace vrambench

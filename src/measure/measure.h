// One configuration measured end to end: the estimate (read off the step program), then the
// OOM-bisection over real trials on a device (sim, cpu or cuda), keeping the trials at the max
// batch and max + 1.
#pragma once

#include <functional>
#include <map>
#include <optional>
#include <string>

#include "config/run_config.h"
#include "device/child_process.h"
#include "device/device.h"
#include "estimate/estimate.h"
#include "measure/trial.h"
#include "search/search.h"

namespace vrambench {

// Told about each trial of the search as it finishes (progress lines on long runs).
using TrialObserver = std::function<void(std::int64_t batch, const TrialResult& result)>;
// Told before each trial starts: a watchdog can name the trial that hangs.
using TrialStarting = std::function<void(std::int64_t batch)>;

// The formula's figures of a row (estimate/formula.h), computed with the measurement or the
// estimate so that the tables only format them: its largest batch on the device's capacity and its
// peak at the batch the row is of (0 where that batch is 0).
struct FormulaFigures {
  std::int64_t max_batch = 0;
  Bytes peak = 0;
  bool operator==(const FormulaFigures&) const = default;
};
// None where cfg has no formula (has_formula: a scope other than the model).
std::optional<FormulaFigures> formula_figures(const RunConfig& cfg, Bytes context, Bytes capacity,
                                              std::int64_t batch);

struct Measurement {
  RunConfig config;
  Breakdown estimate;
  std::int64_t est_max_batch = 0;
  SearchResult search;
  std::map<std::int64_t, TrialResult> trials;  // by batch
  // The first failing batch (max + 1) replayed on an unlimited device: what it would need.
  std::optional<TrialResult> next_needed;
  // How the measurement failed, when it did (then `reason` is the detail: the message, the signal,
  // the batch that timed out); else none, and `reason` says why the max batch is 0, if it is, or
  // that the search was not monotone.
  Failure failure = Failure::none;
  std::string reason;
  std::string attention_impl;  // what ran the attention core (Executor::attention_impl); "" = none
  // The fixed overhead the estimate and the trials used: the device's, or on a device that warms
  // up (DeviceInfo::warm_up), what the driver reported after the warm-up in the measuring process.
  Bytes fixed_overhead = 0;
  // The estimate's share of the caching allocator is taken at its own max batch and the next, and
  // its peak is exact there. Where the comparison is at another batch (the search hit its limit,
  // or found another max batch), the estimate's peak at that batch with the share taken there
  // (DeviceOverhead::share_at_batch), as `estimate --batch` gives it; else empty.
  std::optional<Bytes> est_peak_at_compared;
  // The formula at compared_batch() with the context used, its max batch on the device's total.
  std::optional<FormulaFigures> formula;

  const TrialResult* at_max() const;   // nullptr when max batch is 0
  const TrialResult* at_next() const;  // the first failure (max + 1) as it ran, up to its OOM
  // The batch at which est and the device are compared, and both peaks there.
  std::int64_t compared_batch() const;
  Bytes measured_peak() const;  // device_peak at compared_batch
  Bytes estimated_peak() const;
  double relative_error() const;  // (est - measured) / measured
  // What the row's note says: "crashed: signal 6 (Aborted)", "model state alone exceeds ...".
  std::string note() const;
  bool operator==(const Measurement&) const = default;
};

// One trial of cfg at `batch`: build the program, replay it through cfg's allocator over a fresh
// source of the device of `capacity` bytes, executing with `executor` when given.
TrialResult run_trial(const RunConfig& cfg, const Device& device, std::int64_t batch,
                      Bytes capacity, Executor* executor);

// What the estimate takes of `device`: its context, GEMM workspace and capacity; with
// `share_at_batch`, the caching allocator's share taken at cfg.batch (DeviceOverhead).
DeviceOverhead estimate_overhead(const DeviceInfo& device, bool share_at_batch = false);

// A configuration that could not be measured: the estimate and how it failed, no trials.
Measurement failed_measurement(const RunConfig& cfg, const DeviceInfo& device, Failure failure,
                               std::string detail);

// A configuration's estimate alone (`vrambench estimate`): the figures of its row. Without a
// batch, at the estimate's largest batch on the device; `at_batch`, at cfg.batch with the
// allocator's share taken there (DeviceOverhead::share_at_batch), so that the peak is that batch's
// replay and not a point of the line fitted where the largest batch is decided.
struct EstimateFigures {
  RunConfig config;
  Breakdown breakdown;             // the row's: at cfg.batch's share when at_batch
  std::int64_t est_max_batch = 0;  // the largest batch on the device (share at its boundary)
  std::int64_t batch = 0;          // the batch the row's peak is of: cfg.batch or est_max_batch
  Bytes peak = 0;                  // est's peak there (0 where the batch is 0)
  Bytes allocated = 0;             // the tensors' own peak there (allocated_peak; 0: none)
  bool fits = false;               // peak <= capacity
  std::optional<FormulaFigures> formula;  // at `batch`, with the device's context
  std::int64_t parameters = 0;
  Bytes capacity = 0;  // the device's total
  Bytes host = 0;      // what --offload keeps in host memory (component host_offload)
  // ZeRO-2/3: the model states as DeepSpeed's estimator counts them on the rank's program, and
  // its estimate (estimate/deepspeed.h).
  std::optional<Bytes> deepspeed_count, deepspeed_estimate;
};
EstimateFigures estimate_figures(const RunConfig& cfg, const DeviceInfo& device, bool at_batch);

// On a device that warms up, the first thing measure() does: one trial at batch 1 (its result is
// dropped, an OOM included), then the driver's view of the memory in use with nothing allocated.
// Returns the device's info with that fixed overhead (unchanged where the source has no driver
// view).
DeviceInfo warm_up(const RunConfig& cfg, const Device& device, Executor* executor);

// The estimate, then the search over trials on `device` (its executor, when it has one, made once
// for the whole search).
Measurement measure(const RunConfig& cfg, const Device& device, const SearchLimits& limits,
                    const TrialObserver& observe = {}, const TrialStarting& starting = {});

// The longest sequence (a multiple of limits.granule) whose step fits at cfg.batch: the analytic
// model's answer as the hint, then find_max_seq over trials on `device` (its executor, when it has
// one, made once). A sequence whose sizes overflow 64 bits counts as not fitting.
struct SeqMeasurement {
  RunConfig config;
  std::int64_t est_max_seq = 0;
  SeqSearchResult search;
  std::map<std::int64_t, TrialResult> trials;  // by sequence length
  const TrialResult* at_max() const;           // nullptr when max_seq is 0
  bool operator==(const SeqMeasurement&) const = default;
};
// The analytic model alone: the longest multiple of limits.granule whose estimated peak at
// cfg.batch fits `device.total` (0 when none does).
std::int64_t estimate_max_seq(const RunConfig& cfg, const DeviceInfo& device,
                              const SeqLimits& limits = {});
SeqMeasurement measure_max_seq(const RunConfig& cfg, const Device& device,
                               const SeqLimits& limits = {}, const TrialObserver& observe = {});

}  // namespace vrambench

// `vrambench plan`: a search turned into trainer settings. Capacity minus a safety margin gives the
// micro-batch, the gradient accumulation for a target batch, the longest sequence at micro-batch 1,
// a budget of where the memory goes, and, when the target does not fit in one micro-batch, the
// changes that would help, each measured. Everything runs on the sim replay of the device.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "config/run_config.h"
#include "core/units.h"
#include "device/device.h"
#include "estimate/estimate.h"
#include "measure/measure.h"
#include "search/search.h"

namespace vrambench {

// --safety-margin: bytes ("1GiB", "512MiB", "1.5"), or a share of the capacity ("10%").
struct SafetyMargin {
  Bytes bytes = GiB;
  double percent = 0.0;  // > 0: this share of the capacity instead of `bytes`
  Bytes of(Bytes capacity) const;
  std::string text() const;  // "1.00 GiB", "10%"
  bool operator==(const SafetyMargin&) const = default;
};
// Throws UsageError naming --safety-margin: a size as --vram takes it, or 0% <= P < 100%.
SafetyMargin parse_safety_margin(std::string_view text);

// The micro-batch and gradient accumulation for an effective (global) batch of `target`, given the
// largest micro-batch that fits. The effective batch is the target, always (docs/plan.md):
//   m0 = min(max_micro_batch, target); the micro-batch is the largest divisor d of the target
//   with d <= m0, and the accumulation target / d.
// Where that costs much throughput (d below 3/4 of m0: every micro-step carries at least a quarter
// fewer samples than the card holds) and the largest micro-batch reaches a near effective batch
// (m0 x a, a = floor or ceil of target / m0, whichever is nearer, the larger on a tie, within 1/8
// of the target), that is listed as `near`: another effective batch, never substituted.
// max_micro_batch 0 (nothing fits) gives all zeros. target must be at least 1.
struct MicroBatchChoice {
  std::int64_t max_micro_batch = 0;
  std::int64_t micro_batch = 0;
  std::int64_t grad_accum = 0;
  std::int64_t effective_batch = 0;  // micro_batch * grad_accum: the target
  // The near alternative at the largest micro-batch, with its own effective batch; 0 x 0 if none.
  std::int64_t near_micro_batch = 0, near_grad_accum = 0;
  std::int64_t near_effective_batch() const { return near_micro_batch * near_grad_accum; }
  bool operator==(const MicroBatchChoice&) const = default;
};
MicroBatchChoice choose_micro_batch(std::int64_t max_micro_batch, std::int64_t target);

// Where the memory of one step goes at its peak, as an OOM post-mortem lists it. Lines sum to the
// capacity (free may be negative: the step is that much short), except those off the device.
struct BudgetLine {
  std::string key;    // JSON name: "quantized_weights" (its value is "<key>_bytes")
  std::string title;  // "weights: quantised (4-bit base + constants)"
  Bytes bytes = 0;
  bool on_device = true;  // false: paged optimizer state, in managed memory
  bool operator==(const BudgetLine&) const = default;
};
struct Budget {
  std::int64_t batch = 0;  // the micro-batch it is the peak of
  bool fits = false;       // within capacity minus margin
  Bytes capacity = 0;      // the device's, margin included
  Bytes device_peak = 0;
  std::vector<BudgetLine> lines;
  Bytes free() const;  // the "free" line
  bool operator==(const Budget&) const = default;
};
// The budget of `trial` (a replay of the step at `batch`), splitting the weights as the estimate
// names them.
Budget make_budget(const TrialResult& trial, const Breakdown& estimate, std::int64_t batch,
                   Bytes capacity, Bytes margin, Bytes fixed_overhead);

// One change to the recipe, measured.
struct Alternative {
  std::string change;  // "full recomputation"
  std::string flags;   // "--recompute full"
  RunConfig config;
  Bytes peak = 0;                    // device peak at Plan::compared_batch (sim, unlimited)
  Bytes saved = 0;                   // the base configuration's peak there minus `peak`
  std::int64_t max_micro_batch = 0;  // within capacity minus margin (searched up to the target)
  MicroBatchChoice choice;           // for the target, when there is one
  bool operator==(const Alternative&) const = default;
};
// The single changes `plan` tries on `cfg`, in a fixed order, those that change something and
// validate: full recomputation, flash attention, half the sequence, 8-bit optimizer, paged
// optimizer, LoRA instead of full training, QLoRA, half the LoRA rank, attention-only LoRA targets,
// 16-bit precision. Not measured.
std::vector<Alternative> candidate_alternatives(const RunConfig& cfg);

struct PlanRequest {
  SafetyMargin margin;
  std::optional<std::int64_t> target_batch;  // the effective batch
  bool seq_max = false;                      // plan at the longest sequence of micro-batch 1
  std::int64_t max_batch = 65536;            // never try a micro-batch above this
  SeqLimits seq_limits;
};

struct Plan {
  RunConfig config;    // the sequence resolved (--seq max)
  DeviceInfo device;   // the device planned on: its capacity, context and GEMM workspace
  Bytes capacity = 0;  // device.total
  Bytes margin = 0;
  Bytes planning_capacity = 0;  // capacity - margin
  Measurement planned;          // the search within capacity - margin
  Measurement whole;            // the same on the whole capacity: what `search` finds
  SeqMeasurement longest_seq;   // micro-batch 1 within capacity - margin
  std::optional<std::int64_t> target_batch;
  MicroBatchChoice choice;  // with a target; else the largest micro-batch, accumulation 1
  Budget budget;            // at the chosen micro-batch (or micro-batch 1 when nothing fits)
  // Alternatives are measured when the target needs accumulation or nothing fits; ranked by
  // `saved` at compared_batch, the smallest micro-batch that did not fit.
  std::int64_t compared_batch = 0;
  Bytes compared_peak = 0;  // the configuration's own peak there
  std::vector<Alternative> alternatives;
  bool fits() const { return planned.search.max_batch > 0; }
};

// `cfg` is validated; `device` is the selected device (its figures only are used: every trial is
// a sim replay). Throws UsageError when the margin leaves less than the CUDA context. With seq_max
// and not even one granule fitting, the plan is made at one granule (and does not fit).
Plan make_plan(const RunConfig& cfg, const Device& device, const PlanRequest& request);

// The device `info` with `total` reduced by `margin`: what the plan searches on.
DeviceInfo with_margin(DeviceInfo info, Bytes margin);

}  // namespace vrambench

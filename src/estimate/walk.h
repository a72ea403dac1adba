// What the walks of the closed-form model share (estimate.cpp: lean and fine-tuning; hf.cpp: the
// hf framework): the short names of the components, the per-component sums of a point, and the
// points themselves. Internal to src/estimate/.
#pragma once

#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/config.h"
#include "core/units.h"
#include "estimate/estimate.h"

namespace vrambench::estimate_walk {

// Short names of the components, shared by the per-sample ledger and the fixed part.
constexpr MemoryComponent kWeights = MemoryComponent::weights;
constexpr MemoryComponent kMasterWeights = MemoryComponent::master_weights;
constexpr MemoryComponent kGradients = MemoryComponent::gradients;
constexpr MemoryComponent kOptimizerState = MemoryComponent::optimizer_state;
constexpr MemoryComponent kContext = MemoryComponent::cuda_context;
constexpr MemoryComponent kWorkspace = MemoryComponent::gemm_workspace;
constexpr MemoryComponent kSaved = MemoryComponent::saved_activations;
constexpr MemoryComponent kStats = MemoryComponent::norm_statistics;
constexpr MemoryComponent kRecomputed = MemoryComponent::recomputed_activations;
constexpr MemoryComponent kTransient = MemoryComponent::backward_transient;
constexpr MemoryComponent kInputs = MemoryComponent::tokens_and_targets;
constexpr MemoryComponent kScopeInputs = MemoryComponent::scope_inputs;
constexpr MemoryComponent kFinalBlockOutput = MemoryComponent::final_block_output;
constexpr MemoryComponent kFinalNorm = MemoryComponent::final_norm;
constexpr MemoryComponent kLogits = MemoryComponent::logits_and_loss;
constexpr MemoryComponent kEmbedMask = MemoryComponent::embedding_dropout_mask;
constexpr MemoryComponent kFragmentation = MemoryComponent::allocator_fragmentation;
constexpr MemoryComponent kQuantized = MemoryComponent::quantized_weights;
constexpr MemoryComponent kFrozen = MemoryComponent::frozen_weights;
constexpr MemoryComponent kAdapters = MemoryComponent::adapters;
constexpr MemoryComponent kAdapterGrads = MemoryComponent::adapter_grads;
constexpr MemoryComponent kPaged = MemoryComponent::paged_optimizer_state;
constexpr MemoryComponent kDequant = MemoryComponent::dequant_transient;
constexpr MemoryComponent kOptimizerTemporaries = MemoryComponent::optimizer_temporaries;

// A component's bytes while the walk runs; only the moment that becomes the breakdown is turned
// into Components.
struct Share {
  MemoryComponent component;
  Bytes bytes = 0;
};
using Shares = std::vector<Share>;

inline void add_to(Shares& list, MemoryComponent component, Bytes bytes) {
  if (bytes == 0) return;
  for (Share& c : list)
    if (c.component == component) {
      c.bytes = checked_add(c.bytes, bytes, "component bytes");
      return;
    }
  list.push_back({component, bytes});
}

inline Bytes sum(const Shares& list) {
  Bytes total = 0;
  for (const Share& c : list) total = checked_add(total, c.bytes, "breakdown total");
  return total;
}

// Device bytes: paged optimizer state lives in managed memory, outside the device's capacity.
inline Bytes device_sum(const Shares& list) {
  Bytes total = 0;
  for (const Share& c : list)
    if (c.component != kPaged) total = checked_add(total, c.bytes, "breakdown total");
  return total;
}

// One point of the walk: an op ("block 31 backward: softmax backward") and what is live there.
struct Point {
  std::string_view where;  // "block", a scope's "layer backward", or empty for model-level ops
  std::int64_t block = -1;
  bool forward = false;  // a block's forward op (hf walks the forward too)
  std::string_view op;
  Shares fixed;
  Shares per_sample;
  Bytes fixed_total = 0;
  Bytes per_sample_total = 0;

  std::string name() const {
    std::string out;
    if (block >= 0)
      out = "block " + std::to_string(block) + (forward ? " forward: " : " backward: ");
    else if (!where.empty())
      out = std::string(where) + ": ";
    return out + std::string(op);
  }
};

// What the allocator holds for one persistent tensor of `bytes`. With `own_segments` (the direct
// allocator) each tensor has a segment of its own, rounded to whole 2 MiB pages above 1 MiB
// (core/units.h); the caching allocator packs them into shared segments, so a tensor costs its
// bytes. Full training's parameter tensors are whole pages or tiny; the adapters of fine-tuning,
// [r, in] and [out, r], are neither (lora_B of a [11008, 64] module in fp32 is 2.75 MiB).
inline Bytes held(Bytes bytes, bool own_segments) {
  return own_segments ? direct_segment_bytes(bytes) : bytes;
}

inline std::string_view end_of_step(const RunConfig& cfg) {
  return cfg.optimizer == Optimizer::none ? "end of step" : "optimizer step";
}

// One allocation or free of the walk's step, in the order the step makes them: what the caching
// allocator is replayed over (allocator_share.cpp). A tensor has `fixed + batch * per_sample`
// bytes; its free names its slot and carries no bytes.
struct TensorEvent {
  std::int32_t slot = 0;
  bool alloc = false;
  Bytes fixed = 0;
  Bytes per_sample = 0;
};
using TensorEvents = std::vector<TensorEvent>;

// The hf framework's step (hf.cpp): the ops of the program that build_hf.cpp builds, forward,
// backward and optimizer, as points; with `events`, its tensors' allocations and frees too. Of the
// points, those that may be the peak at some batch (the estimate's envelope) and the last one, in
// the step's order: an op that an earlier one matches or a later one exceeds in bytes at batch 1
// and per sample is never the peak. The step is the same for every batch from 2 (the points hold
// bytes per sample); `batch` 1 walks the one whose structure differs there (gpt2's eager attention
// saves a view of the query).
std::vector<Point> walk_hf(const RunConfig& cfg, const DeviceOverhead& overhead,
                           TensorEvents* events = nullptr, std::int64_t batch = 2);

// The lean framework's step (lean_events.cpp): the tensor events of the program that build.cpp
// builds, over symbolic sizes; the same for every batch.
TensorEvents lean_events(const RunConfig& cfg, Bytes gemm_workspace);

// The caching allocator's reserved bytes at their peak when the step of `events` runs at `batch`
// on a virtual source of `capacity` bytes (the allocator frees its cache and retries there, as it
// does on a device), with `fits`; when the step does not fit, what it reserves without a limit.
struct ReplayedPeak {
  Bytes reserved = 0;
  bool fits = false;
};
ReplayedPeak replayed_peak(const TensorEvents& events, std::int64_t batch,
                           Bytes capacity = std::numeric_limits<Bytes>::max());

}  // namespace vrambench::estimate_walk

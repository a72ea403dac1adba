// The closed-form memory model: at each moment of the step the live bytes are fixed + B *
// per_sample, each a sum of named components; the peak is the largest over the moments that can be
// the peak. It never reads a Program; docs/memory-model.md derives every term.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/config.h"
#include "core/units.h"

namespace vrambench {

// What the device adds beyond the program's own tensors.
struct DeviceOverhead {
  Bytes context = 0;         // CUDA context, module images, library handles
  Bytes gemm_workspace = 0;  // GEMM workspace (a tensor of the program: cuBLASLt's scratch and
                             // the partial sums of the norm and embedding backward)
  // The device's capacity: where the caching allocator's share is taken (at the largest batch
  // that fits, and the one after it). 0: at the configuration's batch, replayed without a limit.
  Bytes capacity = 0;
  // With a capacity: the share is taken at the configuration's batch and the one after it, each
  // replayed on the capacity (its cache freed and retried there, as a trial's is), so that
  // peak(cfg.batch) is what a trial at that batch reserves. For the peak of a given batch
  // (`estimate --batch B`, the longest sequence at a batch); max_batch() is then read off that
  // batch's line.
  bool share_at_batch = false;
};

// What the estimate files bytes under: the one vocabulary of memory components, for the estimate,
// the tables and the JSON (whose keys are these names; estimate/json.h).
enum class MemoryComponent : std::uint8_t {
  // Fixed.
  weights,
  master_weights,   // fp32 copies of 16-bit weights
  gradients,        // parameter gradients written so far
  optimizer_state,  // Adam m and v, SGD momentum
  cuda_context,     // the device's own: context, module images, library handles
  gemm_workspace,   // plus the fused attention backward's fixed scratch
  // Fine-tuning (docs/memory-model.md, "Fine-tuning").
  quantized_weights,      // the frozen block linears as bitsandbytes stores them, constants included
  frozen_weights,         // the frozen base in the compute dtype: embeddings, norms, lm head, biases
  adapters,               // LoRA's A and B
  adapter_grads,          // their gradients written so far
  paged_optimizer_state,  // m and v in managed memory: reported, outside the device's capacity
  dequant_transient,      // a quantised linear dequantised for one GEMM (+ its rebuilt absmax)
  // Frameworks (docs/memory-model.md, "Frameworks").
  optimizer_temporaries,  // hf: what the optimizer step makes (AdamW foreach's sqrt(exp_avg_sq))
  // Per sample.
  saved_activations,
  norm_statistics,
  recomputed_activations,
  backward_transient,
  tokens_and_targets,
  scope_inputs,  // the activation entering a layer, mlp or attention scope and its gradient
  final_block_output,
  final_norm,
  logits_and_loss,
  embedding_dropout_mask,
  allocator_fragmentation,  // caching allocator: what it reserves beyond the tensors (a replay)
};

struct Component {
  MemoryComponent kind{};
  Bytes bytes = 0;  // for per-sample components: bytes for one sample (B = 1)
  bool operator==(const Component&) const = default;
};

// One point of the step, by its totals: the bytes live there are fixed + batch * per_sample.
struct Moment {
  std::string name;  // "cross-entropy backward", "block 0 backward: mlp.fc linear backward"
  Bytes fixed = 0;
  Bytes per_sample = 0;
  Bytes peak(std::int64_t batch) const;  // fixed + batch * per_sample (checked)
  bool operator==(const Moment&) const = default;
};

struct Breakdown {
  std::string moment;                 // the point of the step where the components below coexist:
                                      // the one with the most bytes per sample
  std::vector<Component> fixed;       // independent of batch
  std::vector<Component> per_sample;  // linear in batch
  // Points that hold more fixed bytes (gradients accumulate in backward while saved activations
  // are freed), so they can be the peak at small batches; and the end of the step ("optimizer
  // step" or "end of step": the whole model state), listed even when it is never the peak.
  std::vector<Moment> other_moments;
  // Weights, master weights, gradients and optimizer state: what no batch size changes, as live at
  // the end of the step.
  Bytes model_state = 0;
  // Fixed bytes on the device: paged optimizer state is left out (managed memory), as it is of
  // peak() and max_batch().
  Bytes fixed_total() const;
  Bytes per_sample_total() const;
  // max(fixed + batch * per_sample, the same for each of other_moments) (checked). Without other
  // moments this is fixed + batch * per_sample.
  Bytes peak(std::int64_t batch) const;
  // The largest batch whose peak fits: min over the moments of floor((capacity - fixed) /
  // per_sample), 0 when a fixed part alone does not fit.
  std::int64_t max_batch(Bytes capacity) const;
  // A component's bytes (fixed or per-sample), 0 when absent.
  Bytes component(MemoryComponent kind) const;
  bool operator==(const Breakdown&) const = default;
};

// `cfg` has passed validate() (heads dividing hidden, sizes within 64 bits); the bytes of larger
// batches are checked as they are formed.
Breakdown analyze(const RunConfig& cfg, const DeviceOverhead& overhead);

}  // namespace vrambench

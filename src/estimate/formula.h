// The formula memory calculators use, beside vrambench's model: bytes per parameter for the
// recipe, Korthikanti et al.'s activations per layer, the fp32 logits of the loss and the CUDA
// context. A pure function of the configuration, independent of the step program; every row
// reports it with its error (docs/memory-model.md, "The formula everyone uses").
#pragma once

#include <cstdint>

#include "config/run_config.h"
#include "core/units.h"

namespace vrambench {

// The formula's terms for one configuration: peak(B) = fixed + B * per_sample, every term present
// at once (weights, gradients and optimizer state beside every activation and the logits).
struct Formula {
  std::int64_t parameters = 0;          // P: the model's (parameter_count, model/weights.h)
  std::int64_t adapter_parameters = 0;  // LoRA's A and B over the targets; 0 for full training
  // Full training: P times weight + gradient + fp32 master (16-bit weights with an optimizer) +
  // optimizer state bytes, divided over the ranks as the ZeRO paper divides them (stage 1 the
  // master and state, stage 2 the gradients, stage 3 and FSDP the weights). LoRA / QLoRA: the
  // frozen base, P times 2 or 4 bytes (lora), 1 (int8) or 4 bits plus the absmax (4-bit), and the
  // adapters in fp32 with their gradients and state. A preference trainer's reference copy adds the
  // model once more in the weights' dtype.
  Bytes model_state = 0;
  Bytes context = 0;      // the CUDA context, as the caller gives it
  // Per sample (of a DPO batch: per pair, its two sequences):
  Bytes activations = 0;  // Korthikanti's per layer times L (the recompute's form)
  Bytes logits = 0;       // the [S, V] logits in fp32, what the loss reads
  Bytes fixed() const;
  Bytes per_sample() const;
  Bytes peak(std::int64_t batch) const;  // fixed + batch * per_sample (checked)
  // floor((capacity - fixed) / per_sample), 0 when the fixed part alone exceeds the capacity.
  std::int64_t max_batch(Bytes capacity) const;
  bool operator==(const Formula&) const = default;
};

// Whether the formula describes cfg: a whole-model step (scope model). A layer, mlp or attention
// scope has no calculator figure.
constexpr bool has_formula(const RunConfig& cfg) {
  return cfg.scope == Scope::model;
}

// The formula's terms for cfg (scope model; sizes within 64 bits, as validate() checks).
Formula formula(const RunConfig& cfg, Bytes context);
// The formula's peak at cfg.batch.
Bytes formula_peak(const RunConfig& cfg, Bytes context);
// The largest batch whose formula peak fits `capacity`.
std::int64_t formula_max_batch(const RunConfig& cfg, Bytes context, Bytes capacity);

// Korthikanti et al. 2022 ("Reducing Activation Recomputation in Large Transformer Models"),
// section 4.1: the activations one transformer layer saves for backward with 16-bit activations
// and 1-byte dropout masks, s·b·h·(34 + 5·a·s/h) bytes: 34·s·b·h for the linears, norms, GELU
// and dropouts, 5·a·s²·b for the attention scores, softmax and its dropout. `scores` false drops
// the s² term (flash attention, or selective recomputation, which recomputes it).
Bytes korthikanti_layer_bytes(std::int64_t seq, std::int64_t batch, std::int64_t hidden,
                              std::int64_t heads, bool scores);

// LoRA's trainable parameters: rank * (in + out) for every targeted module of every block, its
// in and out read off the weights description (model/weights.h).
std::int64_t lora_parameter_count(const RunConfig& cfg);

}  // namespace vrambench

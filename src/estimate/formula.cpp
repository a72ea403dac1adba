// The calculators' formula: bytes per parameter, Korthikanti's activations, logits and context.
#include "estimate/formula.h"

#include <algorithm>

#include "core/dtype.h"
#include "core/quant_layout.h"
#include "model/weights.h"

namespace vrambench {
namespace {

// Optimizer state per trainable parameter: AdamW's fp32 m and v, bitsandbytes' 8-bit m and v (the
// absmax per 256 left out, as calculators do), SGD's fp32 momentum. Paged state counts as any:
// calculators do not know where it lives.
Bytes optimizer_state_bytes(Optimizer o) {
  if (is_8bit(o)) return 2;
  if (is_adamw(o)) return 8;
  return o == Optimizer::sgd ? 4 : 0;
}

// The frozen base of LoRA / QLoRA, all P parameters at the storage's bits: 16 or 32 (the compute
// dtype), 8 (int8), or 4 plus the absmax per block of 64: 32-bit (4.5 bits, 0.5625 bytes per
// parameter) or, under double quantisation, 8-bit with a 32-bit absmax per 256 blocks (4.127
// bits, 0.516 bytes): the QLoRA paper's figures, section 3.
Bytes frozen_base_bytes(const RunConfig& cfg, std::int64_t parameters, Bytes weight_bytes) {
  const QuantKind quant = base_quant(cfg);
  if (quant == QuantKind::int8) return parameters;
  if (!is_4bit(quant)) return checked_mul(parameters, weight_bytes, "formula base");
  // Bytes per 64 * 256 parameters: 4-bit codes, then the absmax of the 256 blocks of 64.
  constexpr Bytes kSpan = kQuant4bitBlock * kQuantNestedBlock;
  const Bytes codes = kSpan / 2;
  const Bytes absmax =
      cfg.double_quant == Toggle::on ? kQuantNestedBlock * 1 + 4 : kQuantNestedBlock * 4;
  return quant_blocks(checked_mul(parameters, codes + absmax, "formula base"), kSpan);
}

}  // namespace

Bytes Formula::fixed() const {
  return checked_add(model_state, context, "formula fixed");
}

Bytes Formula::per_sample() const {
  return checked_add(activations, logits, "formula per sample");
}

Bytes Formula::peak(std::int64_t batch) const {
  return checked_add(fixed(), checked_mul(batch, per_sample(), "formula peak"), "formula peak");
}

std::int64_t Formula::max_batch(Bytes capacity) const {
  const Bytes room = capacity - fixed();
  if (room < 0) return 0;
  return per_sample() > 0 ? room / per_sample() : 0;
}

Bytes korthikanti_layer_bytes(std::int64_t seq, std::int64_t batch, std::int64_t hidden,
                              std::int64_t heads, bool scores) {
  const Bytes sbh = checked_mul(checked_mul(seq, batch, "s*b"), hidden, "s*b*h");
  Bytes bytes = checked_mul(34, sbh, "34*s*b*h");
  if (scores)
    bytes = checked_add(
        bytes,
        checked_mul(checked_mul(5 * heads, seq, "5*a*s"), checked_mul(seq, batch, "s*b"), "5as2b"),
        "activations per layer");
  return bytes;
}

std::int64_t lora_parameter_count(const RunConfig& cfg) {
  // A layer's adapters: r (in + out) each, E times on an MoE layer's experts (ParamWrapper's).
  auto per_layer = [&](const WeightModules& modules) {
    std::int64_t n = 0;
    for (const WeightModule& linear : modules)
      for (const ModuleRows& module : linear.modules())
        if (lora_targets_module(cfg.lora_targets, cfg.model, module.module))
          n = checked_add(n,
                          checked_mul(cfg.lora_rank * std::max<std::int64_t>(linear.experts, 1),
                                      linear.cols + module.rows, "lora"),
                          "lora");
    return n;
  };
  const ModelWeights weights = model_weights(cfg.model);
  std::int64_t total = 0;
  for (std::int64_t l = 0; l < cfg.model.layers; ++l)
    total = checked_add(total, per_layer(weights.layer(l)), "lora parameters");
  return total;
}

// Korthikanti's MLP share of a layer's 34 s b h, 19 s b h at F = 4h: its input and dropout mask
// (3 s b h) and the first linear's and the activation's outputs (4 s b F). An MoE layer keeps that
// for each of a token's k experts at their width I, and the router's fp32 probabilities over the
// E experts (4 s b E): the MoE form, for the layers that have it.
Bytes moe_mlp_delta(const ModelConfig& m, std::int64_t seq) {
  const Bytes sb = seq;
  const Bytes dense = checked_mul(sb, 19 * m.hidden, "dense mlp");
  const Bytes moe =
      checked_add(checked_mul(m.experts_per_token,
                              checked_add(checked_mul(sb, 3 * m.hidden, "3sbh"),
                                          checked_mul(sb, 4 * m.expert_ffn, "4sbI"), "expert"),
                              "k experts"),
                  checked_mul(sb, 4 * m.experts, "router"), "moe mlp");
  return moe - dense;
}

Formula formula(const RunConfig& cfg, Bytes context) {
  const ModelConfig& m = cfg.model;
  Formula f;
  f.parameters = parameter_count(m);
  f.context = context;
  // Weights as loaded: 16-bit for fp16/bf16, fp32 otherwise (autocast keeps fp32 weights).
  const Bytes weight_bytes = cfg.dtype == Precision::fp16 || cfg.dtype == Precision::bf16 ? 2 : 4;
  const Bytes state = optimizer_state_bytes(cfg.optimizer);
  // The ZeRO paper's division over N ranks (section 5): stage 1 the optimizer state (and master),
  // stage 2 the gradients too, stage 3 and FSDP the parameters too; DDP none.
  const std::int64_t n = shard_ranks(cfg);
  const bool grads_split = n > 1 && cfg.strategy != Strategy::zero1;
  const bool weights_split = n > 1 && (cfg.strategy == Strategy::zero3 || is_fsdp(cfg.strategy));
  const auto share = [&](Bytes bytes, bool split) { return split ? (bytes + n - 1) / n : bytes; };
  if (is_finetune(cfg)) {
    // Adapters in fp32: weight, gradient and state (no master: they are fp32 already).
    f.adapter_parameters = lora_parameter_count(cfg);
    const Bytes adapters = checked_mul(f.adapter_parameters, 4, "adapters");
    f.model_state = checked_add(
        checked_add(share(frozen_base_bytes(cfg, f.parameters, weight_bytes), weights_split),
                    share(adapters, weights_split) + share(adapters, grads_split),
                    "formula model state"),
        share(checked_mul(f.adapter_parameters, state, "adapters"), n > 1), "formula model state");
  } else {
    // Weight and gradient in the weights' dtype, an fp32 master of 16-bit weights when there is
    // a step, and the state: ZeRO's 16 bytes per parameter for mixed-precision AdamW.
    const Bytes master = weight_bytes == 2 && cfg.optimizer != Optimizer::none ? 4 : 0;
    const Bytes weights = checked_mul(f.parameters, weight_bytes, "formula weights");
    f.model_state = checked_add(
        checked_add(share(weights, weights_split), share(weights, grads_split), "model state"),
        share(checked_mul(f.parameters, master + state, "formula state"), n > 1),
        "formula model state");
  }

  // Korthikanti's bytes are for 16-bit activations; 32-bit ones double them.
  const Bytes scale = dtype_size(activation_dtype(cfg.dtype)) / 2;
  const bool scores = cfg.attention == Attention::eager && cfg.recompute == Recompute::none;
  std::int64_t moe_layers = 0;
  for (std::int64_t l = 0; l < m.layers; ++l) moe_layers += moe_layer(m, l) ? 1 : 0;
  const Bytes moe = moe_layers > 0 ? moe_mlp_delta(m, cfg.seq) : 0;
  const Bytes layer = korthikanti_layer_bytes(cfg.seq, 1, m.hidden, m.heads, scores);
  Bytes activations = 0;
  if (cfg.recompute == Recompute::full) {
    // Each layer's input (2·s·b·h), and one layer recomputed in full, scores included (eager).
    const Bytes recomputed =
        korthikanti_layer_bytes(cfg.seq, 1, m.hidden, m.heads, cfg.attention == Attention::eager) +
        moe;
    activations = checked_add(checked_mul(m.layers, checked_mul(2 * cfg.seq, m.hidden, "2sh"), "L"),
                              recomputed, "activations");
  } else {
    activations = checked_add(checked_mul(m.layers, layer, "activations"),
                              checked_mul(moe_layers, moe, "moe activations"), "activations");
  }
  // A preference trainer's sample is rows_per_sample sequences (DPO's pair), each with its
  // activations and logits; a reference copy is one more model in the weights' dtype (the
  // textbook's policy plus reference; the reference's forward keeps nothing).
  const std::int64_t rows = rows_per_sample(cfg);
  f.activations = checked_mul(checked_mul(activations, scale, "activations"), rows, "rows");
  f.logits =
      checked_mul(checked_mul(checked_mul(cfg.seq, m.vocab, "s*V"), 4, "logits"), rows, "rows");
  if (is_preference(cfg) && reference_of(cfg) == Reference::copy) {
    const Bytes copy = is_finetune(cfg) ? frozen_base_bytes(cfg, f.parameters, weight_bytes)
                                        : checked_mul(f.parameters, weight_bytes, "reference");
    f.model_state = checked_add(f.model_state, share(copy, weights_split), "reference");
  }
  return f;
}

Bytes formula_peak(const RunConfig& cfg, Bytes context) {
  return formula(cfg, context).peak(cfg.batch);
}

std::int64_t formula_max_batch(const RunConfig& cfg, Bytes context, Bytes capacity) {
  return formula(cfg, context).max_batch(capacity);
}

}  // namespace vrambench

// The weights description: GPT-2's modules (GPT2LMHeadModel) and those of the llama-style families
// (LlamaForCausalLM and the families built on it), from the configuration's sizes and flags.
#include "model/weights.h"

#include <algorithm>

#include "core/units.h"

namespace vrambench {
namespace {

WeightModule norm(WeightPart part, std::string_view name, std::int64_t width, bool bias = false) {
  return {.part = part, .kind = WeightKind::norm, .name = name, .rows = width, .bias = bias};
}

// A linear from `in` features over `modules`, each a LoRA target of its rows; none for the head.
WeightModule linear(WeightPart part, std::string_view name, std::int64_t in, bool bias,
                    std::initializer_list<ModuleRows> modules) {
  WeightModule w{.part = part, .kind = WeightKind::linear, .name = name, .cols = in, .bias = bias};
  for (const ModuleRows& m : modules) {
    w.module_rows[w.module_count++] = m;
    w.rows += m.rows;
  }
  return w;
}

// GPT2Block: ln_1, c_attn (q|k|v packed, one module), the attention's c_proj, ln_2, c_fc and the
// MLP's c_proj, every one with a bias.
WeightModules gpt2_block(const ModelConfig& m) {
  const std::int64_t H = m.hidden, Q = qkv_width(m), F = m.ffn;
  using P = WeightPart;
  return {norm(P::norm1, "ln1", H, true),
          linear(P::qkv, "attn.qkv", H, true, {{LoraModule::c_attn, Q}}),
          linear(P::proj, "attn.proj", H, true, {{LoraModule::attn_c_proj, H}}),
          norm(P::norm2, "ln2", H, true),
          linear(P::fc, "mlp.fc", H, true, {{LoraModule::c_fc, F}}),
          linear(P::out, "mlp.proj", F, true, {{LoraModule::mlp_c_proj, H}})};
}

// An MoE layer's MLP as transformers 5 holds it: the router (mlp.gate, a bare [E, H] parameter,
// no nn.Linear: neither a LoRA target nor quantised), then the experts' two 3-D parameters, each a
// LoRA target of PEFT's target_parameters.
void moe_mlp(const ModelConfig& m, WeightModules& w) {
  const std::int64_t H = m.hidden, E = m.experts, I = m.expert_ffn;
  using P = WeightPart;
  w.push_back(linear(P::router, "mlp.router", H, false, {}));
  w.back().rows = E;
  WeightModule gate_up = linear(P::experts_gate_up, "mlp.experts.gate_up", H, false,
                                {{LoraModule::experts_gate_up, 2 * I}});
  WeightModule down =
      linear(P::experts_down, "mlp.experts.down", I, false, {{LoraModule::experts_down, H}});
  for (WeightModule* e : {&gate_up, &down}) {
    e->kind = WeightKind::experts;
    e->experts = E;
    w.push_back(*e);
  }
}

// LlamaDecoderLayer and the blocks built on it: input_layernorm, q_proj, k_proj and v_proj (one
// packed linear; Phi-3's qkv_proj), [q_norm, k_norm], o_proj, [post_attention_layernorm of Gemma
// 2 and 3], the MLP's norm, [post_feedforward_layernorm], gate_proj and up_proj (Phi-3's
// gate_up_proj), down_proj. Biases where the config asks for them.
WeightModules llama_block(const ModelConfig& m, bool moe) {
  const std::int64_t H = m.hidden, D = m.head_dim(), AD = m.attention_width(), F = m.ffn;
  const std::int64_t KD = m.kv_heads * D;
  using P = WeightPart;
  WeightModules w;
  w.push_back(norm(P::norm1, "attn_norm", H));
  w.push_back(
      m.fused_linears
          ? linear(P::qkv, "attn.qkv", H, m.qkv_bias, {{LoraModule::qkv_proj, qkv_width(m)}})
          : linear(P::qkv, "attn.qkv", H, m.qkv_bias,
                   {{LoraModule::q, AD}, {LoraModule::k, KD}, {LoraModule::v, KD}}));
  if (m.qk_norm) {
    w.push_back(norm(P::q_norm, "attn.q_norm", m.qk_norm_full_width ? AD : D));
    w.push_back(norm(P::k_norm, "attn.k_norm", m.qk_norm_full_width ? KD : D));
  }
  w.push_back(linear(P::proj, "attn.o", AD, m.o_bias, {{LoraModule::o, H}}));
  if (m.sandwich_norms) w.push_back(norm(P::post_attn_norm, "post_attn_norm", H));
  w.push_back(norm(P::norm2, "mlp_norm", H));
  if (m.sandwich_norms) w.push_back(norm(P::post_mlp_norm, "post_mlp_norm", H));
  if (moe) {
    moe_mlp(m, w);
    return w;
  }
  if (m.fused_linears) {  // one [2F, H] linear, gate's rows first
    w.push_back(linear(P::fc, "mlp.gate_up", H, m.mlp_bias, {{LoraModule::gate_up_proj, 2 * F}}));
  } else {
    w.push_back(linear(P::fc, "mlp.gate", H, m.mlp_bias, {{LoraModule::gate, F}}));
    w.push_back(linear(P::up, "mlp.up", H, m.mlp_bias, {{LoraModule::up, F}}));
  }
  w.push_back(linear(P::out, "mlp.down", F, m.mlp_bias, {{LoraModule::down, H}}));
  return w;
}

}  // namespace

std::int64_t WeightModule::weight_elements() const {
  if (kind == WeightKind::norm) return rows;
  const std::int64_t one = checked_mul(rows, cols, "weight elements");
  return kind == WeightKind::experts ? checked_mul(experts, one, "weight elements") : one;
}

std::int64_t WeightModule::parameters() const {
  return checked_add(weight_elements(), bias ? rows : 0, "parameters");
}

WeightModules block_modules(const ModelConfig& m) {
  return m.arch == Arch::gpt ? gpt2_block(m) : llama_block(m, is_moe(m));
}

ModelWeights model_weights(const ModelConfig& m, std::int64_t seq) {
  const bool gpt = m.arch == Arch::gpt;
  using P = WeightPart;
  ModelWeights w;
  w.embeddings.push_back({.part = P::token_embedding,
                          .kind = WeightKind::embedding,
                          .name = "wte",
                          .rows = m.vocab,
                          .cols = m.hidden});
  if (gpt)
    w.embeddings.push_back({.part = P::position_embedding,
                            .kind = WeightKind::embedding,
                            .name = "wpe",
                            .rows = position_rows(m, seq),
                            .cols = m.hidden});
  w.block = block_modules(m);
  for (std::int64_t l = 0; is_moe(m) && l < m.layers; ++l)
    if (!moe_layer(m, l)) {
      w.dense_layer.resize(static_cast<std::size_t>(m.layers), false);
      w.dense_layer[static_cast<std::size_t>(l)] = true;
      w.dense_block = llama_block(m, false);
    }
  w.head.push_back(norm(P::final_norm, gpt ? "ln_f" : "norm", m.hidden, gpt));
  w.tied = m.tied_embeddings;
  if (!w.tied)
    w.head.push_back({.part = P::lm_head,
                      .kind = WeightKind::linear,
                      .name = "lm_head",
                      .rows = m.vocab,
                      .cols = m.hidden});
  return w;
}

namespace {

std::int64_t sum_parameters(const WeightModules& modules) {
  std::int64_t n = 0;
  for (const WeightModule& w : modules) n = checked_add(n, w.parameters(), "parameters");
  return n;
}

}  // namespace

std::int64_t layer_parameter_count(const ModelConfig& m) {
  return sum_parameters(block_modules(m));
}

std::int64_t largest_module_parameters(const ModelConfig& m) {
  const ModelWeights w = model_weights(m);
  std::int64_t largest = 0;
  for (const WeightModules* list : {&w.embeddings, &w.block, &w.dense_block, &w.head}) {
    // An MoE layer's experts are one module holding both 3-D parameters (MixtralExperts).
    std::int64_t experts = 0;
    for (const WeightModule& module : *list)
      if (module.kind == WeightKind::experts) experts += module.parameters();
    largest = std::max(largest, experts);
    for (const WeightModule& module : *list) {
      // A packed linear is one module per part in transformers (q_proj, k_proj, v_proj), each
      // with its rows of the weight and of the bias.
      if (module.kind == WeightKind::experts) continue;
      if (module.modules().size() > 1) {
        for (const ModuleRows& part : module.modules())
          largest = std::max(largest, part.rows * module.cols + (module.bias ? part.rows : 0));
      } else {
        largest = std::max(largest, module.parameters());
      }
    }
  }
  return largest;
}

namespace {

// The model's parameters, each MoE layer's experts counted `experts` times (all of them, or the
// top-k a token uses).
std::int64_t count_parameters(const ModelConfig& m, bool active) {
  const ModelWeights w = model_weights(m);
  auto layer = [&](const WeightModules& modules) {
    std::int64_t n = 0;
    for (const WeightModule& module : modules) {
      std::int64_t p = module.parameters();
      if (active && module.kind == WeightKind::experts)
        p = p / module.experts * m.experts_per_token;
      n = checked_add(n, p, "parameters");
    }
    return n;
  };
  std::int64_t n = checked_add(sum_parameters(w.embeddings), sum_parameters(w.head), "parameters");
  const std::int64_t block = layer(w.block);
  const std::int64_t dense = w.dense_block.empty() ? 0 : layer(w.dense_block);
  for (std::int64_t l = 0; l < m.layers; ++l)
    n = checked_add(n, &w.layer(l) == &w.block ? block : dense, "parameters");
  return n;
}

}  // namespace

std::int64_t parameter_count(const ModelConfig& m) {
  return count_parameters(m, false);
}

std::int64_t active_parameter_count(const ModelConfig& m) {
  return count_parameters(m, true);
}

}  // namespace vrambench

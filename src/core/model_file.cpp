// The config.json reader: transformers' field names per model_type, and the defaults their config
// classes take where a config leaves a field out (transformers 5.x configuration_*.py).
#include "core/model_file.h"

#include <fmt/format.h>

#include <array>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/error.h"

namespace vrambench {
namespace {

using Json = nlohmann::json;

// Families transformers has that the step program does not model yet, with what is missing:
// named in the refusal so that the user knows it is a gap, not a typo.
constexpr std::array<std::pair<std::string_view, std::string_view>, 4> kNotYet{{
    {"mixtral", "its mixture of experts"},
    {"qwen2_moe", "its mixture of experts"},
    {"qwen3_moe", "its mixture of experts"},
    {"gemma3",
     "its vision tower (a multimodal config: give its text_config as a gemma3_text "
     "config.json)"},
}};

class Reader {
 public:
  Reader(const Json& config, std::string_view source) : config_(config), source_(source) {}

  // A positive whole number the config must give.
  std::int64_t required(std::string_view field, std::string_view model_type) const {
    const auto it = config_.find(std::string(field));
    if (it == config_.end() || it->is_null())
      fail(fmt::format("missing field '{}' (a {} model needs it)", field, model_type));
    return positive(field, *it);
  }
  // The same where the config may leave it out (or null): `fallback` then.
  std::int64_t optional(std::string_view field, std::int64_t fallback) const {
    const auto it = config_.find(std::string(field));
    if (it == config_.end() || it->is_null()) return fallback;
    return positive(field, *it);
  }
  // A positive number or null (0: null, or left out and `fallback` 0).
  double positive_or_null(std::string_view field, double fallback) const {
    const auto it = config_.find(std::string(field));
    if (it == config_.end()) return fallback;
    if (it->is_null()) return 0.0;
    if (!it->is_number() || !(it->get<double>() > 0.0))
      fail(fmt::format("field '{}' is {}, not a positive number or null", field, it->dump()));
    return it->get<double>();
  }
  // A string field, `fallback` where it is left out or null.
  std::string text(std::string_view field, std::string_view fallback) const {
    const auto it = config_.find(std::string(field));
    if (it == config_.end() || it->is_null()) return std::string(fallback);
    if (!it->is_string()) fail(fmt::format("field '{}' is {}, not a string", field, it->dump()));
    return it->get<std::string>();
  }
  bool flag(std::string_view field, bool fallback) const {
    const auto it = config_.find(std::string(field));
    if (it == config_.end() || it->is_null()) return fallback;
    if (!it->is_boolean())
      fail(fmt::format("field '{}' is {}, not true or false", field, it->dump()));
    return it->get<bool>();
  }
  [[noreturn]] void fail(const std::string& what) const {
    throw UsageError(fmt::format("invalid --model {}: {}", source_, what));
  }

 private:
  std::int64_t positive(std::string_view field, const Json& value) const {
    if (!value.is_number_integer() ||
        (value.is_number_unsigned() &&
         value.get<std::uint64_t>() >
             static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())) ||
        value.get<std::int64_t>() <= 0)
      fail(fmt::format("field '{}' is {}, not a positive whole number", field, value.dump()));
    return value.get<std::int64_t>();
  }

  const Json& config_;
  std::string_view source_;
};

// Whether the step program models `type`: one of kSupportedModelTypes, the list the refusals
// print.
bool is_supported(std::string_view type) {
  std::string_view rest = kSupportedModelTypes;
  while (!rest.empty()) {
    const std::size_t comma = rest.find(", ");
    if (rest.substr(0, comma) == type) return true;
    rest = comma == std::string_view::npos ? std::string_view{} : rest.substr(comma + 2);
  }
  return false;
}

// transformers' GPT2Config names: n_embd, n_head, n_layer, n_inner (null: 4 n_embd),
// n_positions (1024), tie_word_embeddings (true).
ModelConfig gpt2_model(const Reader& r) {
  ModelConfig m;
  m.arch = Arch::gpt;
  m.hidden = r.required("n_embd", "gpt2");
  m.heads = r.required("n_head", "gpt2");
  m.kv_heads = m.heads;
  m.layers = r.required("n_layer", "gpt2");
  m.ffn = r.optional("n_inner", 0);
  if (m.ffn == 0) m.ffn = checked_mul(m.hidden, 4, "4 x n_embd (n_inner left out)");
  m.vocab = r.required("vocab_size", "gpt2");
  m.max_positions = r.optional("n_positions", 1024);
  m.tied_embeddings = r.flag("tie_word_embeddings", true);
  return m;
}

// The llama-style families: LlamaConfig, MistralConfig, Qwen2Config, Qwen3Config, GemmaConfig,
// Gemma2Config, Gemma3TextConfig, Phi3Config. Their common fields: hidden_size,
// intermediate_size, num_hidden_layers, num_attention_heads, num_key_value_heads (the heads when
// left out), head_dim (the class's default when left out: hidden / heads, 128 for Qwen3, 256 for
// Gemma), vocab_size, tie_word_embeddings (true for Gemma, false for the rest). Biases: Llama's
// attention_bias on q, k, v and o and mlp_bias on gate, up and down; Qwen3's and Gemma's
// attention_bias on q, k, v and o; Qwen2's q, k and v always (modeling_qwen2.py: bias=True);
// Mistral and Phi-3 none. What the family's modeling_*.py does besides: ModelConfig's flags.
ModelConfig llama_model(const Reader& r, std::string_view type) {
  const bool gemma = type.starts_with("gemma");
  ModelConfig m;
  m.arch = Arch::llama;
  m.hidden = r.required("hidden_size", type);
  m.ffn = r.required("intermediate_size", type);
  m.layers = r.required("num_hidden_layers", type);
  m.heads = r.required("num_attention_heads", type);
  m.kv_heads = r.optional("num_key_value_heads", m.heads);
  m.vocab = r.required("vocab_size", type);
  m.max_positions = 1;  // rotary: no learned position table
  m.tied_embeddings = r.flag("tie_word_embeddings", gemma);
  const std::int64_t default_head_dim = type == "qwen3" ? 128 : gemma ? 256 : 0;
  const std::int64_t head_dim = r.optional("head_dim", default_head_dim);
  if (head_dim > 0 && !(m.hidden % m.heads == 0 && head_dim == m.hidden / m.heads))
    m.explicit_head_dim = head_dim;
  if (type == "llama" || type == "qwen3" || gemma)
    m.qkv_bias = m.o_bias = r.flag("attention_bias", false);
  if (type == "llama") m.mlp_bias = r.flag("mlp_bias", false);
  m.qkv_bias = m.qkv_bias || type == "qwen2";
  m.qk_norm = type == "qwen3" || type == "gemma3_text";
  if (gemma) {
    m.offset_norms = m.embed_scale = true;
    // gelu_pytorch_tanh; Gemma's config turns a legacy "gelu" into it.
    const std::string act =
        r.text(type == "gemma" ? "hidden_act" : "hidden_activation", "gelu_pytorch_tanh");
    if (!act.starts_with("gelu"))
      r.fail(fmt::format("activation '{}': a {} MLP is modelled with gelu (tanh)", act, type));
    m.gelu_mlp = true;
  }
  if (type == "gemma2" || type == "gemma3_text") m.sandwich_norms = true;
  // Phi-3 (and Phi-4, whose configs say phi3): qkv_proj and gate_up_proj, and resid_pdrop's
  // dropouts on both branches.
  m.fused_linears = m.resid_dropout = type == "phi3";
  if (type == "gemma2") {
    m.attn_softcap = r.positive_or_null("attn_logit_softcapping", 50.0);
    m.final_softcap = r.positive_or_null("final_logit_softcapping", 30.0);
  } else if (type == "gemma3_text") {
    m.attn_softcap = r.positive_or_null("attn_logit_softcapping", 0.0);
    m.final_softcap = r.positive_or_null("final_logit_softcapping", 0.0);
  }
  return m;
}

// The dtype the checkpoint is stored in, which transformers 5 loads it in by default: "dtype"
// (transformers 5 writes it), else "torch_dtype"; none where the config names neither or names
// something else ("auto").
std::optional<Precision> model_dtype(const Reader& r, const Json& config) {
  for (const char* field : {"dtype", "torch_dtype"}) {
    const auto it = config.find(field);
    if (it == config.end() || it->is_null()) continue;
    if (!it->is_string()) r.fail(fmt::format("field '{}' is {}, not a string", field, it->dump()));
    const std::string name = it->get<std::string>();
    if (name == "float32") return Precision::fp32;
    if (name == "float16") return Precision::fp16;
    if (name == "bfloat16") return Precision::bf16;
    return std::nullopt;
  }
  return std::nullopt;
}

Json parse_config(std::string_view text, std::string_view source) {
  try {
    return Json::parse(text);
  } catch (const Json::parse_error& e) {
    throw UsageError(fmt::format("invalid --model {}: not JSON ({})", source, e.what()));
  }
}

// The model of a parsed config.json (model_from_config_text).
ModelConfig model_from_config(const Json& config, std::string name, std::string source) {
  const Reader r(config, source);
  if (!config.is_object()) r.fail("not a JSON object");
  const auto type_field = config.find("model_type");
  if (type_field == config.end() || !type_field->is_string())
    r.fail("missing field 'model_type' (a transformers config.json has one)");
  const std::string type = type_field->get<std::string>();
  ModelConfig m;
  if (type == "gpt2") {
    m = gpt2_model(r);
  } else if (is_supported(type)) {  // the llama-style families
    m = llama_model(r, type);
  } else {
    for (const auto& [family, missing] : kNotYet)
      if (type == family)
        r.fail(fmt::format("model_type '{}' is not modelled yet ({}); supported: {}", type, missing,
                           kSupportedModelTypes));
    const bool multimodal = config.contains("text_config") || config.contains("vision_config");
    const bool experts = config.contains("num_local_experts") || config.contains("num_experts");
    r.fail(fmt::format("unsupported model_type '{}'{}; supported: {}", type,
                       multimodal ? " (a multimodal config)"
                       : experts  ? " (a mixture of experts)"
                                  : "",
                       kSupportedModelTypes));
  }
  m.name = std::move(name);
  m.source = std::move(source);
  m.dtype = model_dtype(r, config);
  return m;
}

}  // namespace

ModelConfig model_from_config_text(std::string_view text, std::string name, std::string source) {
  const Json config = parse_config(text, source);
  return model_from_config(config, std::move(name), std::move(source));
}

ModelConfig read_model_file(std::string_view path) {
  namespace fs = std::filesystem;
  fs::path file(path);
  std::error_code ec;
  if (fs::is_directory(file, ec)) file /= "config.json";
  std::ifstream in(file, std::ios::binary);
  if (!in)
    throw UsageError(
        fmt::format("invalid --model {}: cannot read {} (give a config.json or a "
                    "folder holding one)",
                    path, file.string()));
  std::ostringstream text;
  text << in.rdbuf();
  const Json config = parse_config(text.str(), path);
  // The model's name: the config's _name_or_path, else its folder's name.
  std::string name;
  if (const auto it = config.find("_name_or_path"); it != config.end() && it->is_string())
    name = it->get<std::string>();
  if (name.empty()) {
    const fs::path folder = fs::absolute(file, ec).parent_path();
    name = folder.filename().string();
  }
  if (name.empty()) name = file.filename().string();
  return model_from_config(config, std::move(name), std::string(path));
}

}  // namespace vrambench

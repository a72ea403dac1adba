// A model's shape from a transformers config.json (`--model PATH`), and the one reader the presets
// are read through too: a preset is the config.json of its model. The reader checks each field
// it is asked for; what a family reads is the family's (model/families.h).
#pragma once

#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "model/model_config.h"

namespace vrambench {

// The fields of one config.json, each read with its check; every refusal is a UsageError of one
// line naming the config's source.
class ConfigReader {
 public:
  ConfigReader(const nlohmann::json& config, std::string_view source)
      : config_(config), source_(source) {}

  // A positive whole number the config must give.
  std::int64_t required(std::string_view field, std::string_view model_type) const;
  // The same where the config may leave it out (or null): `fallback` then.
  std::int64_t optional(std::string_view field, std::int64_t fallback) const;
  // A positive number or null (0: null, or left out and `fallback` 0).
  double positive_or_null(std::string_view field, double fallback) const;
  // A number >= 0, `fallback` where it is left out or null (router_aux_loss_coef).
  double non_negative(std::string_view field, double fallback) const;
  // A list of whole numbers in [0, below) (mlp_only_layers), empty where it is left out or null.
  std::vector<std::int64_t> index_list(std::string_view field, std::int64_t below) const;
  // The layers a list of `layers` layer kinds (layer_types) marks `kind`; nullopt where the config
  // leaves the list out or null.
  std::optional<std::vector<std::int64_t>> layers_of_kind(std::string_view field,
                                                          std::int64_t layers,
                                                          std::string_view kind) const;
  // A string field, `fallback` where it is left out or null.
  std::string text(std::string_view field, std::string_view fallback) const;
  bool flag(std::string_view field, bool fallback) const;
  // Whether the config has the field at all (a multimodal config's text_config).
  bool has(std::string_view field) const;
  [[noreturn]] void fail(const std::string& what) const;

 private:
  std::int64_t positive(std::string_view field, const nlohmann::json& value) const;

  const nlohmann::json& config_;
  std::string_view source_;
};

// The model of a config.json's text: `name` labels it, `source` is where it came from (kept in
// ModelConfig::source). Reads hidden size, intermediate size, layers, heads, key/value heads,
// head_dim where given, vocabulary, tie_word_embeddings, attention_bias and mlp_bias, the sliding
// window and its layers (sliding_window, layer_types), what each family adds (model/families.h),
// and for gpt2 its own names (n_embd, n_head, n_layer, n_inner, n_positions). Throws UsageError in
// one line naming `source` and the problem: text that is not a JSON object, a model_type that is
// not supported (the supported ones listed; a multimodal or mixture-of-experts config says so), a
// field that is missing or not a positive whole number.
ModelConfig model_from_config_text(std::string_view text, std::string name, std::string source);

// `path`: a config.json, or a folder holding one (a downloaded checkpoint). The model is named
// after the config's _name_or_path, else the folder. Throws UsageError when the file cannot be
// read or model_from_config_text refuses it.
ModelConfig read_model_file(std::string_view path);

}  // namespace vrambench

// A model's shape from a transformers config.json (`--model PATH`), and the one reader the presets
// are read through too: a preset is the config.json of its model.
#pragma once

#include <string>
#include <string_view>

#include "core/config.h"

namespace vrambench {

// The model_types whose blocks the step program models, as transformers names them.
inline constexpr std::string_view kSupportedModelTypes =
    "gpt2, llama, mistral, qwen2, qwen3, gemma, gemma2, gemma3_text, phi3";

// The model of a config.json's text: `name` labels it, `source` is where it came from (kept in
// ModelConfig::source). Reads hidden size, intermediate size, layers, heads, key/value heads,
// head_dim where given, vocabulary, tie_word_embeddings, attention_bias and mlp_bias, and for gpt2
// its own names (n_embd, n_head, n_layer, n_inner, n_positions). Throws UsageError in one line
// naming `source` and the problem: text that is not a JSON object, a model_type that is not
// supported (the supported ones listed; a multimodal or mixture-of-experts config says so), a
// field that is missing or not a positive whole number.
ModelConfig model_from_config_text(std::string_view text, std::string name, std::string source);

// `path`: a config.json, or a folder holding one (a downloaded checkpoint). The model is named
// after the config's _name_or_path, else the folder. Throws UsageError when the file cannot be
// read or model_from_config_text refuses it.
ModelConfig read_model_file(std::string_view path);

}  // namespace vrambench

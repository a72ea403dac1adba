// The model families vrambench models: how each reads a transformers config.json (its model_types'
// fields and the defaults their config classes take) and its published models, the presets
// (`--preset`), each the config.json of its model.
#pragma once

#include <span>
#include <string_view>

#include "model/model_config.h"
#include "model/model_file.h"

namespace vrambench {

// The model_types whose blocks the step program models, as transformers names them.
inline constexpr std::string_view kSupportedModelTypes =
    "gpt2, llama, mistral, qwen2, qwen3, gemma, gemma2, gemma3_text, phi3, mixtral, qwen3_moe, "
    "olmoe";

// The model a config.json of `model_type` describes, its fields read through `r`. Throws
// UsageError naming the supported model_types for any other (a family transformers has that is
// not modelled yet, a multimodal or mixture-of-experts config, says so).
ModelConfig family_model(const ConfigReader& r, std::string_view model_type);

struct Preset {
  std::string_view name;
  std::string_view description;
  ModelConfig model;
};

std::span<const Preset> presets();
// Throws UsageError listing the known names when `name` is unknown.
const Preset& find_preset(std::string_view name);

}  // namespace vrambench

// The small models of the PyTorch reference measurements (scripts/torch_reference.py MODELS,
// scripts/torch_fsdp_reference.py) as vrambench's ModelConfig, the reference files' reader, and
// the hf step's tensor peak a row is compared with.
#pragma once

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>

#include "alloc/allocator.h"
#include "config/run_config.h"
#include "device/sources.h"
#include "measure/trial.h"
#include "model/families.h"
#include "model/model_file.h"
#include "program/program.h"

namespace vrambench {

inline ModelConfig llama_small() {
  ModelConfig m;
  m.name = "llama-small";
  m.arch = Arch::llama;
  m.hidden = 512;
  m.heads = 8;
  m.kv_heads = 2;
  m.layers = 4;
  m.ffn = 1408;
  m.vocab = 32000;
  m.tied_embeddings = false;
  return m;
}

// A reference row's model: gpt2, llama-small, the llama3-8b preset, or one of the small models of
// the other families (scripts/torch_reference.py MODELS: llama-small's sizes with head_dim 64;
// gemma3-window: Gemma 3 with a 256-token window, which its S=512 reaches),
// read from the same fields by the config.json reader.
inline ModelConfig reference_model(const std::string& name) {
  if (name == "gpt2") return find_preset("gpt2").model;
  if (name == "llama-small") return llama_small();
  if (name == "llama3-8b") return find_preset("llama3-8b").model;
  const std::string shape =
      R"("hidden_size": 512, "intermediate_size": 1408, "num_attention_heads": 8,
         "num_key_value_heads": 2, "head_dim": 64, "num_hidden_layers": 4, "vocab_size": 32000)";
  const std::string type = name == "qwen3-small"     ? R"("qwen3", "tie_word_embeddings": false)"
                           : name == "gemma2-small"  ? R"("gemma2")"
                           : name == "gemma3-small"  ? R"("gemma3_text")"
                           : name == "gemma3-window" ? R"("gemma3_text", "sliding_window": 256)"
                           : name == "phi3-small"    ? R"("phi3", "tie_word_embeddings": false)"
                                                     : "";
  if (type.empty()) throw std::runtime_error("reference row of unknown model " + name);
  return model_from_config_text("{\"model_type\": " + type + ", " + shape + "}", name, "");
}

inline nlohmann::json read_reference(const char* file) {
  const std::filesystem::path path =
      std::filesystem::path(VRAMBENCH_SOURCE_DIR) / "tests" / "data" / file;
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot read " + path.string());
  return nlohmann::json::parse(in);
}

// The tensor peak of cfg's hf step on the cpu device's options (the reference rows ran on the
// CPU), replayed on virtual memory.
inline Bytes hf_cpu_tensor_peak(const RunConfig& cfg) {
  HfOptions options;
  options.device = HfOptions::Device::cpu;
  const Program program = build_hf_program(cfg, 0, options);
  auto source = make_virtual_source(Bytes{1} << 50);
  auto allocator = make_direct_allocator(*source);
  return run_step(program, compute_liveness(program), *allocator, nullptr, 0).tensor_peak;
}

}  // namespace vrambench

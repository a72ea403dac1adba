// The config.json reader (--model): published configs give the published parameter counts, a
// config of a type the program does not model is refused in one line naming it, and the presets
// read through the same reader give the models a config of theirs gives.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>

#include "core/config.h"
#include "core/error.h"
#include "core/model_file.h"
#include "core/presets.h"
#include "device/cpu_executor.h"
#include "device/host_runner.h"
#include "program/program.h"

namespace vrambench {
namespace {

namespace fs = std::filesystem;

// A folder named `name` under a fresh temporary one, holding `config` as config.json.
struct ConfigDir {
  fs::path root, dir;
  ConfigDir(const std::string& name, const std::string& config) {
    root = fs::temp_directory_path() / ("vrambench-model-" + std::to_string(::getpid()));
    dir = root / name;
    fs::create_directories(dir);
    std::ofstream(dir / "config.json") << config;
  }
  ~ConfigDir() { fs::remove_all(root); }
};

// The fields of each model's published config.json that shape memory (the rest of those files
// -- rope settings, token ids, versions -- left out changes nothing).
const char* const kLlama32_1b =
    R"({"architectures": ["LlamaForCausalLM"], "attention_bias": false, "head_dim": 64,
        "hidden_size": 2048, "intermediate_size": 8192, "max_position_embeddings": 131072,
        "mlp_bias": false, "model_type": "llama", "num_attention_heads": 32,
        "num_hidden_layers": 16, "num_key_value_heads": 8, "rope_theta": 500000.0,
        "tie_word_embeddings": true, "torch_dtype": "bfloat16", "vocab_size": 128256})";
const char* const kQwen25_1_5b =
    R"({"architectures": ["Qwen2ForCausalLM"], "hidden_size": 1536, "intermediate_size": 8960,
        "max_position_embeddings": 131072, "model_type": "qwen2", "num_attention_heads": 12,
        "num_hidden_layers": 28, "num_key_value_heads": 2, "sliding_window": 131072,
        "tie_word_embeddings": true, "torch_dtype": "bfloat16", "use_sliding_window": false,
        "vocab_size": 151936})";
const char* const kMistral7bV03 =
    R"({"architectures": ["MistralForCausalLM"], "hidden_size": 4096, "intermediate_size": 14336,
        "max_position_embeddings": 32768, "model_type": "mistral", "num_attention_heads": 32,
        "num_hidden_layers": 32, "num_key_value_heads": 8, "sliding_window": null,
        "tie_word_embeddings": false, "torch_dtype": "bfloat16", "vocab_size": 32768})";

TEST(ModelFile, PublishedConfigsGiveThePublishedParameterCounts) {
  struct Case {
    const char* folder;
    const char* config;
    std::int64_t params;  // the safetensors total on the model's Hugging Face page
  };
  for (const Case& c : {Case{"Llama-3.2-1B", kLlama32_1b, 1'235'814'400},
                        Case{"Qwen2.5-1.5B", kQwen25_1_5b, 1'543'714'304},
                        Case{"Mistral-7B-v0.3", kMistral7bV03, 7'248'023'552}}) {
    SCOPED_TRACE(c.folder);
    const ConfigDir dir(c.folder, c.config);
    // A folder holding the config, or the file itself; named after the folder.
    for (const fs::path& path : {dir.dir, dir.dir / "config.json"}) {
      const ModelConfig m = read_model_file(path.string());
      EXPECT_EQ(parameter_count(m), c.params);
      EXPECT_EQ(m.name, c.folder);
      EXPECT_EQ(m.source, path.string());
    }
  }
}

TEST(ModelFile, PresetsAreTheConfigsOfTheirModels) {
  for (const auto& [preset, config] :
       {std::pair{"llama3.2-1b", kLlama32_1b}, std::pair{"qwen2.5-1.5b", kQwen25_1_5b},
        std::pair{"mistral-7b", kMistral7bV03}}) {
    ModelConfig m = model_from_config_text(config, preset, "");
    EXPECT_EQ(m, find_preset(preset).model) << preset;
  }
  // Qwen2 has q/k/v biases and no others; Llama's attention_bias puts one on o too.
  const ModelConfig qwen = find_preset("qwen2.5-1.5b").model;
  EXPECT_TRUE(qwen.qkv_bias);
  EXPECT_FALSE(qwen.o_bias);
  const ModelConfig biased = model_from_config_text(
      R"({"model_type": "llama", "hidden_size": 64, "intermediate_size": 128,
          "num_hidden_layers": 1, "num_attention_heads": 4, "vocab_size": 16,
          "attention_bias": true, "mlp_bias": true})",
      "biased", "");
  EXPECT_TRUE(biased.qkv_bias && biased.o_bias && biased.mlp_bias);
  EXPECT_EQ(biased.kv_heads, 4);  // num_key_value_heads left out: the heads
  EXPECT_EQ(parameter_count(biased),
            2 * 16 * 64 + 64                                    // embeddings, head, final norm
                + 2 * 64 + 3 * 64 * 64 + 3 * 64 + 64 * 64 + 64  // norms, q|k|v and o with biases
                + 3 * 64 * 128 + 2 * 128 + 64);                 // gate, up, down with biases
}

// A head size of its own (Mistral Nemo: 32 heads of 128 over a hidden size of 5120): q|k|v and the
// output projection are (A + 2K) D and A D wide, not H.
TEST(ModelFile, AnExplicitHeadDimShapesTheAttention) {
  const ModelConfig nemo = find_preset("mistral-nemo-12b").model;
  EXPECT_EQ(nemo.head_dim(), 128);
  EXPECT_EQ(nemo.attention_width(), 4096);
  EXPECT_EQ(parameter_count(nemo), 12'247'782'400);
  RunConfig cfg;
  cfg.model = nemo;
  cfg.model.layers = 2;
  cfg.model.vocab = 64;
  cfg.seq = 16;
  for (Framework framework : {Framework::lean, Framework::hf}) {
    cfg.framework = framework;
    validate(cfg);
    const Program p = build_program(cfg, 0);
    std::map<std::string, Shape> shapes;
    for (const Tensor& t : p.tensors) shapes[t.name.str()] = t.shape;
    SCOPED_TRACE(to_string(framework));
    ASSERT_TRUE(shapes.contains("layer0.attn.y"));
    EXPECT_EQ(shapes["layer0.attn.y"].back(), 4096);
    EXPECT_EQ(shapes["layer0.attn.o.w"], (Shape{5120, 4096}));
    EXPECT_EQ(shapes["layer0.attn.qkv.w"], (Shape{(32 + 16) * 128, 5120}));
  }
  // The kernels read the head size off q|k|v: a small model of that kind runs a step on the cpu
  // executor, under both frameworks, to a finite loss near ln V at initialisation.
  cfg.model = model_from_config_text(
      R"({"model_type": "mistral", "hidden_size": 48, "intermediate_size": 96,
          "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
          "head_dim": 16, "vocab_size": 32})",
      "small", "");
  cfg.seq = 8;
  cfg.batch = 2;
  cfg.dtype = Precision::fp32;
  for (Framework framework : {Framework::lean, Framework::hf}) {
    cfg.framework = framework;
    validate(cfg);
    const Program p = build_program(cfg, 4096);
    auto exec = make_cpu_executor(5);
    HostRunner run(p, *exec);
    run.step();
    EXPECT_NEAR(run.loss(), std::log(32.0f), 0.5f) << to_string(framework);
  }
}

TEST(ModelFile, WhatIsNotModelledIsRefusedInOneLineNamingIt) {
  auto refusal = [](const std::string& config) -> std::string {
    try {
      model_from_config_text(config, "m", "x/config.json");
    } catch (const UsageError& e) {
      return e.what();
    }
    return "accepted";
  };
  auto expect_says = [&](const std::string& config, std::initializer_list<const char*> parts) {
    const std::string what = refusal(config);
    EXPECT_EQ(what.find('\n'), std::string::npos) << what;
    EXPECT_NE(what.find("x/config.json"), std::string::npos) << what;
    for (const char* part : parts) EXPECT_NE(what.find(part), std::string::npos) << what;
  };
  expect_says(R"({"model_type": "mamba", "hidden_size": 768})",
              {"unsupported model_type 'mamba'", "gpt2, llama, mistral, qwen2"});
  expect_says(R"({"model_type": "llava", "text_config": {}, "vision_config": {}})",
              {"'llava'", "multimodal"});
  expect_says(R"({"model_type": "qwen2_moe", "num_experts": 60})", {"mixture of experts"});
  expect_says(R"({"model_type": "qwen3", "hidden_size": 1024})",
              {"'qwen3' is not modelled yet", "q and k RMSNorms"});
  expect_says(R"({"model_type": "llama", "hidden_size": 64, "num_hidden_layers": 1,
                  "num_attention_heads": 4, "vocab_size": 16})",
              {"missing field 'intermediate_size'"});
  expect_says(R"({"model_type": "gpt2", "n_embd": "768", "n_head": 12, "n_layer": 12,
                  "vocab_size": 50257})",
              {"'n_embd'", "not a positive whole number"});
  expect_says(R"({"model_type": "llama", "hidden_size": 64, "intermediate_size": 128,
                  "num_hidden_layers": 1, "num_attention_heads": 4, "vocab_size": 16,
                  "tie_word_embeddings": "yes"})",
              {"'tie_word_embeddings'"});
  expect_says(R"({"hidden_size": 64})", {"missing field 'model_type'"});
  expect_says(R"([1, 2])", {"not a JSON object"});
  expect_says(R"({"model_type": )", {"not JSON"});
  EXPECT_THROW(read_model_file("/nonexistent/vrambench-model"), UsageError);
}

// A config's own name wins over its folder's.
TEST(ModelFile, NameOrPathNamesTheModel) {
  const ConfigDir dir("snapshot-0123",
                      R"({"_name_or_path": "Qwen/Qwen2.5-1.5B", "model_type": "qwen2",
                          "hidden_size": 1536, "intermediate_size": 8960,
                          "num_hidden_layers": 28, "num_attention_heads": 12,
                          "num_key_value_heads": 2, "vocab_size": 151936,
                          "tie_word_embeddings": true})");
  EXPECT_EQ(read_model_file(dir.dir.string()).name, "Qwen/Qwen2.5-1.5B");
}

}  // namespace
}  // namespace vrambench

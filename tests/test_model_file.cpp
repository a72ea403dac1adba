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
#include <vector>

#include "config/run_config.h"
#include "core/error.h"
#include "device/cpu_executor.h"
#include "device/host_runner.h"
#include "model/families.h"
#include "model/model_file.h"
#include "model/weights.h"
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

const char* const kGemma2_2b =
    R"({"architectures": ["Gemma2ForCausalLM"], "attn_logit_softcapping": 50.0,
        "final_logit_softcapping": 30.0, "head_dim": 256, "hidden_act": "gelu_pytorch_tanh",
        "hidden_activation": "gelu_pytorch_tanh", "hidden_size": 2304,
        "intermediate_size": 9216, "max_position_embeddings": 8192, "model_type": "gemma2",
        "num_attention_heads": 8, "num_hidden_layers": 26, "num_key_value_heads": 4,
        "query_pre_attn_scalar": 256, "sliding_window": 4096, "torch_dtype": "float32",
        "vocab_size": 256000})";
const char* const kQwen3_0_6b =
    R"({"architectures": ["Qwen3ForCausalLM"], "attention_bias": false, "head_dim": 128,
        "hidden_act": "silu", "hidden_size": 1024, "intermediate_size": 3072,
        "max_position_embeddings": 40960, "model_type": "qwen3", "num_attention_heads": 16,
        "num_hidden_layers": 28, "num_key_value_heads": 8, "tie_word_embeddings": true,
        "torch_dtype": "bfloat16", "vocab_size": 151936})";

TEST(ModelFile, PublishedConfigsGiveThePublishedParameterCounts) {
  struct Case {
    const char* folder;
    const char* config;
    std::int64_t params;  // the safetensors total on the model's Hugging Face page
  };
  for (const Case& c : {Case{"Llama-3.2-1B", kLlama32_1b, 1'235'814'400},
                        Case{"Qwen2.5-1.5B", kQwen25_1_5b, 1'543'714'304},
                        Case{"Mistral-7B-v0.3", kMistral7bV03, 7'248'023'552},
                        Case{"gemma-2-2b", kGemma2_2b, 2'614'341'888},
                        // The model's own count (num_parameters()): its checkpoint stores the
                        // tied head a second time, which the page's total of 751,632,384 counts.
                        Case{"Qwen3-0.6B", kQwen3_0_6b, 596'049'920}}) {
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
        std::pair{"mistral-7b", kMistral7bV03}, std::pair{"gemma2-2b", kGemma2_2b},
        std::pair{"qwen3-0.6b", kQwen3_0_6b}}) {
    ModelConfig m = model_from_config_text(config, preset, "");
    EXPECT_TRUE(m.dtype.has_value()) << preset;
    m.dtype.reset();  // a preset is the shape; its dtype is --dtype's
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
  expect_says(R"({"model_type": "qwen2_moe", "num_experts": 60})",
              {"'qwen2_moe' is not modelled yet", "shared expert"});
  expect_says(R"({"model_type": "deepseek_v2", "n_routed_experts": 64, "num_experts": 64})",
              {"unsupported model_type 'deepseek_v2'", "mixture of experts"});
  expect_says(R"({"model_type": "gemma3", "text_config": {"hidden_size": 2560}})",
              {"'gemma3' is not modelled yet", "text_config", "gemma3_text"});
  expect_says(R"({"model_type": "gemma2", "hidden_size": 64, "intermediate_size": 128,
                  "num_hidden_layers": 1, "num_attention_heads": 4, "vocab_size": 16,
                  "hidden_activation": "relu"})",
              {"activation 'relu'", "gelu"});
  expect_says(R"({"model_type": "gemma2", "hidden_size": 64, "intermediate_size": 128,
                  "num_hidden_layers": 1, "num_attention_heads": 4, "vocab_size": 16,
                  "final_logit_softcapping": -3})",
              {"'final_logit_softcapping'", "positive number or null"});
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

// The dtype the checkpoint is stored in (transformers 5's "dtype", or "torch_dtype") is the
// model's; a name that is not a dtype ("auto") leaves it to --dtype.
TEST(ModelFile, TorchDtypeIsTheModelsDtype) {
  EXPECT_EQ(model_from_config_text(kGemma2_2b, "g", "").dtype, DType::f32);
  EXPECT_EQ(model_from_config_text(kQwen3_0_6b, "q", "").dtype, DType::bf16);
  const std::string shape = R"("model_type": "llama", "hidden_size": 64, "intermediate_size": 128,
                               "num_hidden_layers": 1, "num_attention_heads": 4, "vocab_size": 16)";
  auto dtype_of = [&](const std::string& fields) {
    return model_from_config_text("{" + shape + fields + "}", "m", "").dtype;
  };
  EXPECT_EQ(dtype_of(R"(, "dtype": "float16", "torch_dtype": "float32")"), DType::f16);
  EXPECT_EQ(dtype_of(R"(, "torch_dtype": "auto")"), std::nullopt);
  EXPECT_EQ(dtype_of(""), std::nullopt);
  EXPECT_THROW(dtype_of(R"(, "torch_dtype": 16)"), UsageError);
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

// What each family's modeling code does besides the llama block, read off its config.
TEST(ModelFile, FamiliesSetWhatTheirBlocksDo) {
  const ModelConfig gemma2 = model_from_config_text(kGemma2_2b, "g", "");
  EXPECT_TRUE(gemma2.sandwich_norms && gemma2.offset_norms && gemma2.embed_scale &&
              gemma2.gelu_mlp && gemma2.tied_embeddings);
  EXPECT_FALSE(gemma2.qk_norm);
  EXPECT_EQ(gemma2.attn_softcap, 50.0);
  EXPECT_EQ(gemma2.final_softcap, 30.0);
  EXPECT_EQ(gemma2.head_dim(), 256);
  EXPECT_EQ(gemma2.attention_width(), 2048);  // 8 heads of 256 over a hidden size of 2304
  const ModelConfig qwen3 = model_from_config_text(kQwen3_0_6b, "q", "");
  EXPECT_TRUE(qwen3.qk_norm);
  EXPECT_FALSE(qwen3.sandwich_norms || qwen3.offset_norms || qwen3.embed_scale || qwen3.gelu_mlp ||
               qwen3.qkv_bias);
  // Left out, a field takes its config class's default: Qwen3's head_dim 128, Gemma 2's caps;
  // null turns a cap off.
  const ModelConfig bare = model_from_config_text(
      R"({"model_type": "qwen3", "hidden_size": 64, "intermediate_size": 128,
          "num_hidden_layers": 1, "num_attention_heads": 4, "vocab_size": 16})",
      "bare", "");
  EXPECT_EQ(bare.head_dim(), 128);
  const ModelConfig uncapped = model_from_config_text(
      R"({"model_type": "gemma2", "hidden_size": 64, "intermediate_size": 128,
          "num_hidden_layers": 1, "num_attention_heads": 4, "vocab_size": 16,
          "final_logit_softcapping": null})",
      "uncapped", "");
  EXPECT_EQ(uncapped.attn_softcap, 50.0);
  EXPECT_EQ(uncapped.final_softcap, 0.0);
  // Phi-3 (Phi-4's config says phi3 too): fused qkv_proj and gate_up_proj, dropout on both
  // branches.
  const ModelConfig phi = model_from_config_text(
      R"({"model_type": "phi3", "hidden_size": 3072, "intermediate_size": 8192,
          "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 32,
          "vocab_size": 32064, "tie_word_embeddings": false, "resid_pdrop": 0.0,
          "torch_dtype": "bfloat16"})",
      "phi", "");
  EXPECT_TRUE(phi.fused_linears && phi.resid_dropout);
  EXPECT_FALSE(phi.qkv_bias || phi.qk_norm || phi.gelu_mlp || phi.tied_embeddings);
  EXPECT_EQ(parameter_count(phi), 3'821'079'552);  // Phi-3.5-mini
  const ModelConfig gemma3 = find_preset("gemma3-1b").model;
  EXPECT_TRUE(gemma3.qk_norm && gemma3.sandwich_norms && gemma3.offset_norms);
  EXPECT_EQ(gemma3.attn_softcap + gemma3.final_softcap, 0.0);
}

// Sliding windows as each config class sets them up: the window and its layers from the config,
// or the class's defaults where it leaves them out.
TEST(ModelFile, SlidingWindowsAsTheConfigClassesSetThemUp) {
  const auto read = [](const std::string& type_and_fields, std::int64_t layers = 4) {
    return model_from_config_text(
        "{\"model_type\": " + type_and_fields +
            ", \"hidden_size\": 64, \"intermediate_size\": 128, \"num_attention_heads\": 4, "
            "\"vocab_size\": 16, \"num_hidden_layers\": " +
            std::to_string(layers) + "}",
        "m", "");
  };
  using Layers = std::vector<std::int64_t>;
  // Gemma 3: all but every sliding_window_pattern-th (6) layer; the presets carry the published
  // windows (512 for 1B, 1024 for the others).
  const ModelConfig gemma3 = find_preset("gemma3-1b").model;
  EXPECT_EQ(gemma3.sliding_window, 512);
  EXPECT_EQ(gemma3.sliding_layers.size(), 22u);
  EXPECT_FALSE(sliding_layer(gemma3, 5));
  EXPECT_TRUE(sliding_layer(gemma3, 6));
  EXPECT_TRUE(gemma3.mask_per_layer_kind);
  EXPECT_EQ(find_preset("gemma3-27b").model.sliding_window, 1024);
  EXPECT_EQ(read(R"("gemma3_text", "sliding_window_pattern": 2)").sliding_layers, (Layers{0, 2}));
  // Gemma 2: every other layer from the first, 4096 tokens by default.
  const ModelConfig gemma2 = read(R"("gemma2")");
  EXPECT_EQ(gemma2.sliding_window, 4096);
  EXPECT_EQ(gemma2.sliding_layers, (Layers{0, 2}));
  // Mistral: MistralConfig's 4096 on every layer where the config leaves it out; v0.3's null.
  const ModelConfig mistral = read(R"("mistral")");
  EXPECT_EQ(mistral.sliding_window, 4096);
  EXPECT_EQ(mistral.sliding_layers, (Layers{0, 1, 2, 3}));
  EXPECT_FALSE(mistral.mask_per_layer_kind);
  EXPECT_EQ(find_preset("mistral-7b").model.sliding_window, 0);
  // Phi-3 and Mixtral: none unless given; every layer when given.
  EXPECT_EQ(read(R"("phi3")").sliding_window, 0);
  EXPECT_EQ(read(R"("phi3", "sliding_window": 2047)").sliding_layers, (Layers{0, 1, 2, 3}));
  // Qwen2 and Qwen3: only with use_sliding_window, on the layers from max_window_layers on.
  EXPECT_EQ(read(R"("qwen2", "sliding_window": 4096)").sliding_window, 0);
  const ModelConfig qwen =
      read(R"("qwen2", "use_sliding_window": true, "sliding_window": 64, "max_window_layers": 3)");
  EXPECT_EQ(qwen.sliding_window, 64);
  EXPECT_EQ(qwen.sliding_layers, (Layers{3}));
  // layer_types, where the config lists the kinds, names the layers; Llama has no window.
  EXPECT_EQ(read(R"("gemma3_text", "layer_types": ["full_attention", "sliding_attention"])", 2)
                .sliding_layers,
            (Layers{1}));
  EXPECT_EQ(read(R"("llama", "sliding_window": 128)").sliding_window, 0);
  try {
    read(R"("gemma2", "layer_types": ["sliding_attention"])");
    ADD_FAILURE() << "a layer_types of another length was taken";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("'layer_types'"), std::string::npos) << e.what();
  }
  // The mask: a sliding layer at a sequence of the window or longer.
  EXPECT_FALSE(sliding_mask_at(gemma3, 0, 511));
  EXPECT_TRUE(sliding_mask_at(gemma3, 0, 512));
  EXPECT_FALSE(sliding_mask_at(gemma3, 5, 4096));
  // Gemma 2's fused attention is flash-attention 2, which takes the window in the kernel.
  EXPECT_FALSE(sliding_mask_at(gemma2, 0, 8192));
}

}  // namespace
}  // namespace vrambench

// The presets against the parameter counts their publishers state (the model cards' totals), and
// the fine-tuning options' parsing.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "config/fields.h"
#include "config/gpu_profiles.h"
#include "config/run_config.h"
#include "core/error.h"
#include "model/families.h"
#include "model/weights.h"

namespace vrambench {
namespace {

TEST(Presets, ParameterCountsMatchThePublishedModels) {
  // safetensors totals on each model's Hugging Face page (the sum of every tensor's elements).
  EXPECT_EQ(parameter_count(find_preset("llama3.2-1b").model), 1'235'814'400);
  EXPECT_EQ(parameter_count(find_preset("llama3.2-3b").model), 3'212'749'824);
  EXPECT_EQ(parameter_count(find_preset("mistral-7b").model), 7'248'023'552);
  EXPECT_EQ(parameter_count(find_preset("qwen2.5-7b").model), 7'615'616'512);
  EXPECT_EQ(parameter_count(find_preset("llama2-7b").model), 6'738'415'616);
  EXPECT_EQ(parameter_count(find_preset("llama3.1-8b").model), 8'030'261'248);
  EXPECT_EQ(parameter_count(find_preset("llama3.3-70b").model), 70'553'706'496);
  EXPECT_EQ(parameter_count(find_preset("mistral-nemo-12b").model), 12'247'782'400);
  EXPECT_EQ(parameter_count(find_preset("qwen2.5-0.5b").model), 494'032'768);
  EXPECT_EQ(parameter_count(find_preset("qwen2.5-1.5b").model), 1'543'714'304);
  EXPECT_EQ(parameter_count(find_preset("qwen2.5-3b").model), 3'085'938'688);
  EXPECT_EQ(parameter_count(find_preset("qwen2.5-14b").model), 14'770'033'664);
  EXPECT_EQ(parameter_count(find_preset("qwen2.5-32b").model), 32'763'876'352);
  EXPECT_EQ(parameter_count(find_preset("qwen2.5-72b").model), 72'706'203'648);
  // Qwen3: the page totals, except where the checkpoint stores the tied head a second time
  // (0.6B: 751,632,384 and 1.7B: 2,031,739,904 on the page); there the model's own count,
  // num_parameters(), which is the page's total less vocab x hidden.
  EXPECT_EQ(parameter_count(find_preset("qwen3-0.6b").model), 751'632'384 - 151'936 * 1'024);
  EXPECT_EQ(parameter_count(find_preset("qwen3-1.7b").model), 2'031'739'904 - 151'936 * 2'048);
  EXPECT_EQ(parameter_count(find_preset("qwen3-4b").model), 4'022'468'096);
  EXPECT_EQ(parameter_count(find_preset("qwen3-8b").model), 8'190'735'360);
  EXPECT_EQ(parameter_count(find_preset("qwen3-14b").model), 14'768'307'200);
  EXPECT_EQ(parameter_count(find_preset("qwen3-32b").model), 32'762'123'264);
  EXPECT_EQ(parameter_count(find_preset("gemma-2b").model), 2'506'172'416);
  EXPECT_EQ(parameter_count(find_preset("gemma-7b").model), 8'537'680'896);
  EXPECT_EQ(parameter_count(find_preset("gemma2-2b").model), 2'614'341'888);
  EXPECT_EQ(parameter_count(find_preset("gemma2-9b").model), 9'241'705'984);
  EXPECT_EQ(parameter_count(find_preset("gemma2-27b").model), 27'227'128'320);
  EXPECT_EQ(parameter_count(find_preset("gemma3-1b").model), 999'885'952);
  // Gemma 3 from 4B is multimodal: the page total less the SigLIP vision tower (416,866,032) and
  // the projector into the text model (a 1152 x hidden matrix and a 1152-wide norm).
  constexpr std::int64_t kSiglip = 416'866'032;
  auto projector = [](std::int64_t hidden) { return 1'152 * hidden + 1'152; };
  EXPECT_EQ(parameter_count(find_preset("gemma3-4b").model),
            4'300'079'472 - kSiglip - projector(2'560));
  EXPECT_EQ(parameter_count(find_preset("gemma3-12b").model),
            12'187'325'040 - kSiglip - projector(3'840));
  EXPECT_EQ(parameter_count(find_preset("gemma3-27b").model),
            27'432'406'640 - kSiglip - projector(5'376));
  EXPECT_EQ(parameter_count(find_preset("phi3.5-mini").model), 3'821'079'552);
  EXPECT_EQ(parameter_count(find_preset("phi4").model), 14'659'507'200);
}

// Totals as nvidia-smi prints them (config/gpu_profiles.cpp cites each), and names in any case.
TEST(Presets, GpuProfilesOfTheCardsPeopleUse) {
  EXPECT_EQ(find_gpu_profile("rtx5090").total, 32'607 * MiB);
  EXPECT_EQ(find_gpu_profile("a10g").total, 23'028 * MiB);
  EXPECT_EQ(find_gpu_profile("l4").total, 23'034 * MiB);
  EXPECT_EQ(find_gpu_profile("v100-16gb").total, 16'384 * MiB);
  EXPECT_EQ(find_gpu_profile("v100-32gb").total, 32'768 * MiB);
  EXPECT_EQ(find_gpu_profile("h100-pcie").total, 81'559 * MiB);
  EXPECT_EQ(find_gpu_profile("b200").total, 183'359 * MiB);
  EXPECT_EQ(&find_gpu_profile("sim:RTX4090"), &find_gpu_profile("rtx4090"));
  EXPECT_EQ(&find_gpu_profile("A10G"), &find_gpu_profile("a10g"));
  EXPECT_EQ(parse_device("sim:RTX4090").profile, "rtx4090");
  EXPECT_THROW(find_gpu_profile("rtx9090"), UsageError);
  // PyTorch's cuBLAS workspace per handle: 32 MiB from Hopper on, 8 MiB + 128 KiB before.
  EXPECT_EQ(find_gpu_profile("b200").gemm_workspace(), 32 * MiB);
  EXPECT_EQ(find_gpu_profile("v100-16gb").gemm_workspace(), 8 * MiB + 128 * KiB);
}

// What a training process holds outside the allocator: 2 KiB per resident thread (the bare
// context: 528 MiB on an H100's 132 SMs x 2048 threads, ~534 MiB measured; 592 MiB on a B200's
// 148, 612 measured; 426 MiB on an RTX 6000 Ada's 142 x 1536, 426 measured), plus 384 MiB of
// what the training step loads. On the H200 it covers what PyTorch held outside its allocator on
// every row of the reference, whose most was 906.8 MiB.
TEST(Presets, OutsideTheAllocatorFollowsTheSms) {
  EXPECT_EQ(max_threads_per_sm(90), 2048);
  EXPECT_EQ(max_threads_per_sm(75), 1024);
  EXPECT_EQ(max_threads_per_sm(89), 1536);
  EXPECT_EQ(find_gpu_profile("h100-80gb").context_overhead(), (528 + 384) * MiB);
  EXPECT_EQ(find_gpu_profile("b200").context_overhead(), (592 + 384) * MiB);
  EXPECT_EQ(find_gpu_profile("rtx6000-ada").context_overhead(), (426 + 384) * MiB);
  EXPECT_EQ(find_gpu_profile("rtx4050-laptop").context_overhead(), (60 + 384) * MiB);
  std::ifstream in(std::filesystem::path(VRAMBENCH_SOURCE_DIR) / "tests" / "data" /
                   "torch_cuda_reference.json");
  const nlohmann::json reference = nlohmann::json::parse(in);
  ASSERT_EQ(reference["environment"]["gpu"], "NVIDIA H200");
  // What a process holds outside the allocator grows with each kernel it loads: a training run
  // is one configuration in a fresh process, the first configuration each measuring process ran
  // (process_order 0). Later ones are bounded by nothing the profile describes.
  int first = 0;
  for (const auto& row : reference["rows"]) {
    if (row["process_order"].get<int>() != 0) continue;
    EXPECT_GE(find_gpu_profile("h200").context_overhead(),
              row["outside_allocator_bytes"].get<Bytes>())
        << row["config"] << " B=" << row["batch"];
    ++first;
  }
  EXPECT_EQ(first, 9);  // three processes' first configurations, at B = 1, 2 and 4
}

TEST(Presets, QwenHasQkvBiasesAndLlamaThreeTwoTiesItsHead) {
  EXPECT_TRUE(find_preset("qwen2.5-7b").model.qkv_bias);
  EXPECT_FALSE(find_preset("mistral-7b").model.qkv_bias);
  EXPECT_TRUE(find_preset("llama3.2-1b").model.tied_embeddings);
  EXPECT_FALSE(find_preset("qwen2.5-7b").model.tied_embeddings);
}

TEST(FinetuneOptions, OptimizerTakesHuggingFaceNames) {
  EXPECT_EQ(parse_enum<Optimizer>("adamw_torch", "optimizer"), Optimizer::adamw);
  EXPECT_EQ(parse_enum<Optimizer>("adamw_bnb_8bit", "optimizer"), Optimizer::adamw_8bit);
  EXPECT_EQ(parse_enum<Optimizer>("paged_adamw_8bit", "optimizer"), Optimizer::paged_adamw_8bit);
  EXPECT_EQ(parse_enum<Optimizer>("paged_adamw_32bit", "optimizer"), Optimizer::paged_adamw);
  EXPECT_EQ(parse_enum<Optimizer>("paged-adamw-8bit", "optimizer"), Optimizer::paged_adamw_8bit);
  EXPECT_THROW(parse_enum<Optimizer>("adafactor", "optimizer"), UsageError);
  // Tables name the canonical spelling.
  EXPECT_EQ(to_string(Optimizer::paged_adamw_8bit), "paged-adamw-8bit");
}

TEST(FinetuneOptions, LoraTargetsResolvePerArchitecture) {
  const ModelConfig& llama = find_preset("llama3-8b").model;
  const ModelConfig& gpt = find_preset("gpt2").model;
  const ModelConfig& phi = find_preset("phi3.5-mini").model;
  const LoraTargets qv = parse_lora_targets("q_proj,v_proj");
  EXPECT_EQ(parse_lora_targets("q_proj+v_proj"), qv);
  EXPECT_EQ(to_string(qv), "q_proj+v_proj");
  EXPECT_TRUE(lora_targets_module(qv, llama, LoraModule::q));
  EXPECT_FALSE(lora_targets_module(qv, llama, LoraModule::k));
  EXPECT_FALSE(lora_targets_module(qv, gpt, LoraModule::c_attn));
  EXPECT_FALSE(lora_targets_module(qv, phi, LoraModule::q));
  // "c_proj" names both gpt projections, as PEFT matches it.
  const LoraTargets c_proj = parse_lora_targets("c_proj");
  EXPECT_TRUE(lora_targets_module(c_proj, gpt, LoraModule::attn_c_proj));
  EXPECT_TRUE(lora_targets_module(c_proj, gpt, LoraModule::mlp_c_proj));
  EXPECT_FALSE(lora_targets_module(c_proj, gpt, LoraModule::c_fc));
  const LoraTargets attn = parse_lora_targets("attn");
  EXPECT_TRUE(lora_targets_module(attn, llama, LoraModule::o));
  EXPECT_FALSE(lora_targets_module(attn, llama, LoraModule::up));
  EXPECT_TRUE(lora_targets_module(parse_lora_targets("all-linear"), llama, LoraModule::down));
  // Phi-3's fused linears are one module each, and only its blocks have them.
  EXPECT_EQ(lora_module_list(phi), "qkv_proj,o_proj,gate_up_proj,down_proj");
  EXPECT_EQ(lora_module_list(gpt), "c_attn,c_proj,c_fc");
  EXPECT_TRUE(lora_targets_module(attn, phi, LoraModule::qkv_proj));
  EXPECT_FALSE(lora_targets_module(attn, phi, LoraModule::gate_up_proj));
  const LoraTargets fused = parse_lora_targets("qkv_proj,gate_up_proj");
  EXPECT_EQ(to_string(fused), "qkv_proj+gate_up_proj");
  EXPECT_TRUE(lora_targets_module(fused, phi, LoraModule::gate_up_proj));
  EXPECT_FALSE(lora_targets_module(fused, llama, LoraModule::qkv_proj));
  // PEFT's own targets when target_modules is None: gpt2's c_attn, llama's q_proj and v_proj.
  const LoraTargets peft = parse_lora_targets("peft-default");
  for (LoraModule m : lora_modules(llama))
    EXPECT_EQ(lora_targets_module(peft, llama, m), m == LoraModule::q || m == LoraModule::v)
        << lora_module_name(m);
  for (LoraModule m : lora_modules(gpt))
    EXPECT_EQ(lora_targets_module(peft, gpt, m), m == LoraModule::c_attn) << lora_module_name(m);
  EXPECT_EQ(to_string(peft), "peft-default");
  EXPECT_THROW(parse_lora_targets("q_proj,lm_head"), UsageError);
  // Round trip through the field table, as a sweep reads it.
  const FieldInfo& field = find_field("lora-targets");
  EXPECT_EQ(std::get<LoraTargets>(parse_field(field, field_text(field, qv))), qv);
}

TEST(FinetuneOptions, ValidateRefusesRecipesThatCannotBe) {
  RunConfig cfg;
  cfg.model = find_preset("tiny-llama").model;
  cfg.quant = QuantKind::nf4;
  EXPECT_THROW(validate(cfg), UsageError);  // a quantised base cannot train in full
  cfg.finetune = Finetune::lora;
  EXPECT_NO_THROW(validate(cfg));
  cfg.lora_targets = parse_lora_targets("c_attn");  // a gpt module on a llama block
  EXPECT_THROW(validate(cfg), UsageError);
  cfg.lora_targets = parse_lora_targets("q_proj");
  cfg.finetune = Finetune::qlora;
  cfg.quant = QuantKind::int8;
  EXPECT_THROW(validate(cfg), UsageError);
  cfg.quant = QuantKind::none;
  EXPECT_EQ(base_quant(cfg), QuantKind::nf4);  // qlora means nf4 unless told
  cfg.grad_accum = 0;
  EXPECT_THROW(validate(cfg), UsageError);
  // PEFT has no default targets for Phi-3; its fused modules are named.
  RunConfig phi;
  phi.model = find_preset("tiny-phi3").model;
  phi.finetune = Finetune::lora;
  EXPECT_NO_THROW(validate(phi));  // all-linear
  phi.lora_targets = parse_lora_targets("peft-default");
  EXPECT_THROW(validate(phi), UsageError);
  phi.lora_targets = parse_lora_targets("q_proj,v_proj");  // Llama's, not Phi-3's
  EXPECT_THROW(validate(phi), UsageError);
  phi.lora_targets = parse_lora_targets("qkv_proj");
  EXPECT_NO_THROW(validate(phi));
}

// Models past the bounds of docs/memory-model.md ("Limits") are refused when they are validated,
// before anything is built: 100,000 layers ran the estimate for over 8 minutes.
TEST(Limits, ModelsPastTheBoundsAreRefusedOnValidation) {
  RunConfig cfg;
  cfg.model.layers = kMaxLayers;
  EXPECT_NO_THROW(validate(cfg));
  for (const std::int64_t layers : {kMaxLayers + 1, std::int64_t{100'000}}) {
    cfg.model.layers = layers;
    try {
      validate(cfg);
      FAIL() << layers << " layers were accepted";
    } catch (const UsageError& e) {
      const std::string message = e.what();
      EXPECT_NE(message.find("--layers " + std::to_string(layers)), std::string::npos) << message;
      EXPECT_NE(message.find("at most 2048"), std::string::npos) << message;
    }
  }
  // 12 H^2 parameters a block: at H = 32768 and 2048 blocks 26.4 trillion, under the bound; at
  // H = 65536 four times that, 48 TiB of weights even at 4 bits.
  cfg.model.layers = kMaxLayers;
  cfg.model.heads = cfg.model.kv_heads = 64;
  cfg.model.hidden = 32768;
  cfg.model.ffn = 4 * cfg.model.hidden;
  EXPECT_LT(parameter_count(cfg.model), kMaxParameters);
  EXPECT_NO_THROW(validate(cfg));
  cfg.model.hidden = 65536;
  cfg.model.ffn = 4 * cfg.model.hidden;
  EXPECT_GT(parameter_count(cfg.model), kMaxParameters);
  try {
    validate(cfg);
    FAIL() << "106 trillion parameters were accepted";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("no GPU holds it"), std::string::npos) << e.what();
  }
  EXPECT_EQ(kMaxParameters / 2, std::int64_t{16} * 1024 * GiB);  // 16 TiB at 4 bits a weight
  for (const Preset& p : presets()) {
    RunConfig preset;
    preset.model = p.model;
    EXPECT_NO_THROW(validate(preset)) << p.name;
  }
}

}  // namespace
}  // namespace vrambench

// One rank's step program (program/shard.h): what each strategy shards, that a rank's program
// runs (its collectives rehearsed on the cpu device) and computes the single-device step when it
// is one rank's of one, that the per-GPU peak falls with the GPUs as each strategy says, and
// DeepSpeed's ZeRO estimators (tests/data/deepspeed_reference.json) against their own accounting
// of the program's tensors (estimate/deepspeed.h).
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "device/cpu_executor.h"
#include "device/host_runner.h"
#include "estimate/deepspeed.h"
#include "estimate/estimate.h"
#include "model/families.h"
#include "model/weights.h"
#include "program/program.h"
#include "program/scaled_program.h"
#include "program/shard.h"

namespace vrambench {
namespace {

constexpr Strategy kSharded[] = {Strategy::zero1, Strategy::zero2, Strategy::zero3, Strategy::fsdp,
                                 Strategy::hsdp};

RunConfig tiny(std::string_view preset, Strategy strategy, std::int64_t gpus) {
  RunConfig cfg;
  cfg.framework = Framework::hf;
  cfg.model = find_preset(preset).model;
  cfg.model.vocab = 32;
  cfg.model.max_positions = 16;
  cfg.seq = 8;
  cfg.batch = 2;
  cfg.dtype = Precision::fp32;
  cfg.optimizer = Optimizer::adamw;
  cfg.device = parse_device("cpu");
  cfg.strategy = strategy;
  cfg.gpus = gpus;
  return cfg;
}

InputFiller tokens(std::int64_t vocab) {
  return [vocab](const Program&, const Tensor& t, void* data) {
    if (t.name != "tokens" && t.name != "targets") return false;
    auto* ids = static_cast<std::int32_t*>(data);
    for (std::int64_t i = 0; i < t.elements(); ++i)
      ids[i] = static_cast<std::int32_t>((i * 7 + (t.name == "targets" ? 3 : 0)) % vocab);
    return true;
  };
}

struct StepValues {
  float loss = 0.0f;
  std::map<std::string, std::vector<float>> weights;  // after the step, by name
};

StepValues run_on_cpu(const RunConfig& cfg) {
  validate(cfg);
  const Program program = build_program(cfg, 4096);
  auto exec = make_cpu_executor(12, tokens(cfg.model.vocab));
  HostRunner run(program, *exec);
  run.step();
  StepValues out;
  out.loss = run.loss();
  for (const Tensor& t : program.tensors)
    if (t.role == Role::weight && t.component != MemoryComponent::communication_buffers)
      out.weights[t.name.str()] = run.values(t.id);
  return out;
}

// One rank of one: every collective copies the whole tensor, so the step is the single-device
// step, bit for bit, weights after the optimizer included.
TEST(RankProgram, OneRankComputesTheSingleDeviceStep) {
  for (std::string_view preset : {"tiny", "tiny-llama"}) {
    const StepValues ref = run_on_cpu(tiny(preset, Strategy::ddp, 1));
    for (Strategy s : kSharded) {
      const std::string label = fmt::format("{} {}", preset, to_string(s));
      const StepValues got = run_on_cpu(tiny(preset, s, 1));
      EXPECT_EQ(got.loss, ref.loss) << label;
      ASSERT_EQ(got.weights.size(), ref.weights.size()) << label;
      for (const auto& [name, values] : ref.weights) {
        ASSERT_EQ(got.weights.count(name), 1u) << label << " " << name;
        EXPECT_EQ(got.weights.at(name), values) << label << " " << name;
      }
    }
  }
}

// Over four ranks each strategy's program runs on the cpu device, its collectives rehearsed:
// full training in fp32 and in bf16 (ZeRO's fp32 master rows stepped and cast back), in the hf
// step and the lean one, LoRA, the tied gpt head and the llama one, gradient accumulation, and
// QLoRA's 4-bit storage gathered as bytes.
TEST(RankProgram, RanksRunOnTheCpu) {
  for (Framework framework : {Framework::hf, Framework::lean})
    for (Strategy s : {Strategy::zero1, Strategy::zero2, Strategy::zero3, Strategy::fsdp})
      for (std::string_view preset : {"tiny", "tiny-llama"}) {
        RunConfig cfg = tiny(preset, s, 4);
        cfg.framework = framework;
        cfg.dtype = Precision::bf16;
        const std::string label =
            fmt::format("{} {} bf16 {}", preset, to_string(s), to_string(framework));
        const StepValues got = run_on_cpu(cfg);
        EXPECT_TRUE(std::isfinite(got.loss)) << label;
        EXPECT_GT(got.loss, 0.0f) << label;
      }
  for (std::string_view preset : {"tiny", "tiny-llama"})
    for (Strategy s : {Strategy::ddp, Strategy::zero1, Strategy::zero2, Strategy::zero3,
                       Strategy::fsdp, Strategy::hsdp})
      for (Finetune finetune : {Finetune::full, Finetune::lora, Finetune::qlora}) {
        if (finetune == Finetune::qlora && preset == "tiny") continue;
        RunConfig cfg = tiny(preset, s, 4);
        cfg.finetune = finetune;
        if (finetune == Finetune::qlora) cfg.dtype = Precision::bf16;
        cfg.recompute = finetune == Finetune::lora ? Recompute::full : Recompute::none;
        cfg.grad_accum = finetune == Finetune::full ? 2 : 1;
        const std::string label =
            fmt::format("{} {} {}", preset, to_string(s), to_string(finetune));
        const StepValues got = run_on_cpu(cfg);
        EXPECT_TRUE(std::isfinite(got.loss)) << label;
        EXPECT_GT(got.loss, 0.0f) << label;
      }
}

// Bytes of `program`'s tensors of a role (the DDP buckets apart).
Bytes role_bytes(const Program& program, Role role) {
  Bytes total = 0;
  for (const Tensor& t : program.tensors)
    if (t.role == role && t.component != MemoryComponent::communication_buffers) total += t.bytes;
  return total;
}

// What each strategy keeps of the model on a rank of eight: the weights, gradients and optimizer
// state divided as the strategy says (each parameter's rows rounded up), DDP's buckets the size of
// the gradients beside them.
TEST(RankProgram, EachStrategyDividesWhatItShards) {
  RunConfig base = tiny("gpt2", Strategy::ddp, 1);
  base.dtype = Precision::bf16;
  base.device = {};
  const Program single = build_program(base, 0);
  const auto weights = static_cast<double>(role_bytes(single, Role::weight));
  const auto grads = static_cast<double>(role_bytes(single, Role::grad));
  const auto state = static_cast<double>(role_bytes(single, Role::optimizer_state));
  ASSERT_GT(weights, 0);
  const auto near = [](Bytes got, double want) {
    return std::abs(static_cast<double>(got) - want) <= 0.002 * want;
  };
  for (Strategy s :
       {Strategy::ddp, Strategy::zero1, Strategy::zero2, Strategy::zero3, Strategy::fsdp}) {
    RunConfig cfg = base;
    cfg.strategy = s;
    cfg.gpus = 8;
    const Program rank = build_program(cfg, 0);
    const double n = 8;
    const bool weights_split = s == Strategy::zero3 || s == Strategy::fsdp;
    const bool grads_split = s != Strategy::ddp && s != Strategy::zero1;
    // ZeRO keeps fp32 moments (and an fp32 master) for the bf16 model: twice torch's bf16 state.
    const double state_scale = is_zero(s) ? 2.0 : 1.0;
    const std::string label(to_string(s));
    // ZeRO-3 keeps parameters of at most 1e5 elements whole (gpt2's norms and biases).
    if (s != Strategy::zero3)
      EXPECT_TRUE(near(role_bytes(rank, Role::weight), weights_split ? weights / n : weights))
          << label << ": " << role_bytes(rank, Role::weight);
    else
      EXPECT_LT(static_cast<double>(role_bytes(rank, Role::weight)), weights / n * 1.02) << label;
    EXPECT_TRUE(near(role_bytes(rank, Role::grad), grads_split ? grads / n : grads)) << label;
    EXPECT_TRUE(near(role_bytes(rank, Role::optimizer_state),
                     s == Strategy::ddp ? state : state * state_scale / n))
        << label;
    EXPECT_EQ(role_bytes(rank, Role::master_weight) > 0, is_zero(s)) << label;
    Bytes buckets = 0;
    for (const Tensor& t : rank.tensors)
      if (t.name == "ddp.buckets") buckets = t.bytes;
    EXPECT_EQ(buckets, s == Strategy::ddp ? role_bytes(single, Role::grad) : 0) << label;
  }
}

// The per-GPU peak of a sweep over gpus=1,2,4,8: DDP's grows by its buckets past one GPU and then
// stays; every sharding strategy's falls with each doubling, ZeRO-3's and FSDP's the most.
TEST(RankProgram, PerGpuPeakFallsWithTheGpus) {
  std::map<Strategy, std::vector<Bytes>> peaks;
  for (Strategy s :
       {Strategy::ddp, Strategy::zero1, Strategy::zero2, Strategy::zero3, Strategy::fsdp})
    for (std::int64_t gpus : {1, 2, 4, 8}) {
      RunConfig cfg;
      cfg.model = find_preset("llama3.2-1b").model;
      cfg.seq = 1024;
      cfg.batch = 1;
      cfg.strategy = s;
      cfg.gpus = gpus;
      validate(cfg);
      BatchScaledProgram step(cfg, 0);
      DeviceOverhead overhead;
      overhead.allocator_share = false;
      peaks[s].push_back(analyze(step, overhead).peak(1));
    }
  const std::vector<Bytes>& ddp = peaks[Strategy::ddp];
  EXPECT_GT(ddp[1], ddp[0]);
  EXPECT_EQ(ddp[2], ddp[1]);
  EXPECT_EQ(ddp[3], ddp[1]);
  for (Strategy s : {Strategy::zero1, Strategy::zero2, Strategy::zero3, Strategy::fsdp})
    for (std::size_t k = 1; k < 4; ++k)
      EXPECT_LT(peaks[s][k], peaks[s][k - 1]) << to_string(s) << " at " << (1 << k) << " GPUs";
  for (std::size_t k = 1; k < 4; ++k) {
    EXPECT_LT(peaks[Strategy::zero2][k], peaks[Strategy::zero1][k]);
    EXPECT_LT(peaks[Strategy::zero3][k], peaks[Strategy::zero2][k]);
  }
}

// ZeRO-3 gathers a module of at most 5e7 elements ahead, with the module before it (the
// prefetch): the attention output projection's fetch runs before q|k|v's GEMM, and the embedding
// (over the bucket) is fetched just before its own lookup.
TEST(RankProgram, Zero3PrefetchesTheNextSmallModule) {
  RunConfig cfg;
  cfg.model = find_preset("llama3.2-1b").model;
  cfg.seq = 64;
  cfg.strategy = Strategy::zero3;
  cfg.gpus = 2;
  validate(cfg);
  const Program p = build_program(cfg, 0);
  const auto at = [&](std::string_view name) {
    for (std::size_t i = 0; i < p.ops.size(); ++i)
      if (p.ops[i].name == name) return static_cast<int>(i);
    ADD_FAILURE() << "no op " << name;
    return -1;
  };
  EXPECT_LT(at("layer0.attn.o.w.fetch"), at("layer0.attn.qkv"));
  EXPECT_GT(at("layer0.attn.o.w.fetch"), at("layer0.attn.qkv.w.fetch"));
  EXPECT_EQ(at("wte.fetch") + 1, at("layer0.attn.qkv.w.fetch"));
  EXPECT_LT(at("layer0.attn.qkv.w.fetch"), at("embed"));
}

// Offloaded state leaves the device: it is reported (host_offload), never in the peak.
TEST(RankProgram, OffloadMovesStateToTheHost) {
  RunConfig cfg;
  cfg.model = find_preset("llama3.2-1b").model;
  cfg.seq = 512;
  cfg.strategy = Strategy::zero3;
  cfg.gpus = 4;
  DeviceOverhead overhead;
  overhead.allocator_share = false;
  std::map<Offload, Breakdown> by;
  for (Offload o : {Offload::none, Offload::optimizer, Offload::params}) {
    cfg.offload = o;
    validate(cfg);
    BatchScaledProgram step(cfg, 0);
    by[o] = analyze(step, overhead);
  }
  EXPECT_EQ(by[Offload::none].component(MemoryComponent::host_offload), 0);
  EXPECT_GT(by[Offload::optimizer].component(MemoryComponent::host_offload), 0);
  EXPECT_GT(by[Offload::params].component(MemoryComponent::host_offload),
            by[Offload::optimizer].component(MemoryComponent::host_offload));
  EXPECT_LT(by[Offload::optimizer].peak(1), by[Offload::none].peak(1));
  EXPECT_LT(by[Offload::params].peak(1), by[Offload::optimizer].peak(1));
}

nlohmann::json read_data(const char* file) {
  const std::filesystem::path path =
      std::filesystem::path(VRAMBENCH_SOURCE_DIR) / "tests" / "data" / file;
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot read " + path.string());
  return nlohmann::json::parse(in);
}

// DeepSpeed's estimators, run from the deepspeed package (scripts/deepspeed_reference.py): the
// parameter counts and largest modules of every preset equal transformers' models', the
// estimate equals DeepSpeed's to the byte, and DeepSpeed's accounting of a rank's program holds
// it within 1% (the acceptance bound), for the presets whose programs are quick to build.
TEST(RankProgram, DeepSpeedEstimatorsAndTheirCountOfTheProgram) {
  const nlohmann::json doc = read_data("deepspeed_reference.json");
  const std::set<std::string> built = {"gpt2",      "llama3-8b",   "qwen2.5-7b",
                                       "gemma2-9b", "phi3.5-mini", "qwen3-8b"};
  int rows = 0, counted = 0;
  double worst = 0;
  for (const auto& [name, model] : doc.at("models").items()) {
    const ModelConfig m = find_preset(name).model;
    EXPECT_EQ(parameter_count(m), model.at("total_params").get<std::int64_t>()) << name;
    EXPECT_EQ(largest_module_parameters(m), model.at("largest_layer_params").get<std::int64_t>())
        << name;
  }
  for (const nlohmann::json& r : doc.at("rows")) {
    RunConfig cfg;
    cfg.model = find_preset(r.at("model").get<std::string>()).model;
    cfg.dtype = Precision::bf16;
    cfg.strategy = r.at("stage") == 2 ? Strategy::zero2 : Strategy::zero3;
    cfg.gpus = r.at("gpus_per_node");
    const std::string offload = r.at("offload");
    cfg.offload = offload == "none"        ? Offload::none
                  : offload == "optimizer" ? Offload::optimizer
                                           : Offload::params;
    cfg.seq = 128;
    const std::string label = fmt::format("{} zero{} {} GPUs offload {}", cfg.model.name,
                                          int(r.at("stage")), cfg.gpus, offload);
    const Bytes want = r.at("gpu_bytes");
    const std::optional<Bytes> estimate = deepspeed_estimate(cfg);
    ASSERT_TRUE(estimate) << label;
    EXPECT_EQ(*estimate, want) << label;
    ++rows;
    if (built.count(r.at("model")) == 0) continue;
    validate(cfg);
    const std::optional<Bytes> count = deepspeed_count(build_program(cfg, 0));
    ASSERT_TRUE(count) << label;
    EXPECT_NEAR(static_cast<double>(*count), static_cast<double>(want),
                0.01 * static_cast<double>(want))
        << label;
    worst =
        std::max(worst, std::abs(static_cast<double>(*count - want)) / static_cast<double>(want));
    ++counted;
  }
  EXPECT_GE(rows, 800);
  EXPECT_GE(counted, 100);
  std::cout << fmt::format("{} rows, {} counted on the program: worst {:.3f}%\n", rows, counted,
                           100 * worst);
}

}  // namespace
}  // namespace vrambench

// The estimate against the step replayed through the allocators (sim): over a grid of gpt2
// configurations, the max batch and peak to the byte under both allocators; the peak at the
// largest batch to the byte where the replay fills the capacity; the peak at any given batch, and
// the longest sequence at a batch, as the sim has them.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "device/device.h"
#include "estimate/estimate.h"
#include "estimate_grid.h"
#include "measure/measure.h"
#include "measure/trial.h"
#include "model/families.h"
#include "sweep/sweep.h"

namespace vrambench {
namespace {

// gpt2 on the h100-80gb profile, bf16, at S = 1024 and 8192, every attention and recompute mode:
// the estimate's max batch and peak are the sim's, to the byte.
void expect_grid_exact(AllocatorKind allocator) {
  int configurations = 0;
  for (std::int64_t S : {1024, 8192})
    for (Attention attention : {Attention::eager, Attention::flash})
      for (Recompute recompute : {Recompute::none, Recompute::selective, Recompute::full}) {
        RunConfig cfg;
        cfg.framework = Framework::lean;
        cfg.model = find_preset("gpt2").model;
        cfg.seq = S;
        cfg.dtype = Precision::bf16;
        cfg.attention = attention;
        cfg.recompute = recompute;
        cfg.allocator = allocator;
        cfg.device = parse_device("sim:h100-80gb");
        const Measurement m = measure(cfg, make_device(cfg), {});
        SCOPED_TRACE(fmt::format("S={} {} {}", S, to_string(attention), to_string(recompute)));
        EXPECT_GT(m.search.max_batch, 0);
        EXPECT_EQ(m.est_max_batch, m.search.max_batch);
        EXPECT_EQ(m.estimated_peak(), m.measured_peak());
        ++configurations;
      }
  EXPECT_EQ(configurations, 12);
}

// Tensor bytes alone, eager attention with selective recompute at S = 8192 was 26 % below the
// caching allocator's sim; a closed-form term for the attention matrices' segments read from -6 %
// to +24 %. The replay of the program's own allocations is exact.
TEST(EstimateAgainstSim, CachingAllocatorEqualsTheSimToTheByte) {
  expect_grid_exact(AllocatorKind::caching);
}

// Raw cudaMalloc rounds each tensor to its own segment: replayed, exact too.
TEST(EstimateAgainstSim, DirectAllocatorEqualsTheSimToTheByte) {
  expect_grid_exact(AllocatorKind::direct);
}

// A configuration of the estimate grid (AdamW, the caching allocator) on sim:rtx4090.
RunConfig on_rtx4090(const char* preset, std::int64_t seq, Precision dtype, Attention attention,
                     Recompute recompute) {
  RunConfig cfg = testing_grid::grid_config(preset, seq, dtype, attention, recompute,
                                            Optimizer::adamw, AllocatorKind::caching);
  cfg.device = parse_device("sim:rtx4090");
  return cfg;
}

// Configurations of every kind of step on sim:rtx4090: lean, hf (gpt2's eager attention has
// another step at batch 1), and a QLoRA recipe.
std::vector<RunConfig> at_batch_configurations() {
  std::vector<RunConfig> out;
  auto add = [&](const char* preset, std::int64_t seq, Precision dtype, Attention attention,
                 Recompute recompute, Framework framework) {
    RunConfig cfg = on_rtx4090(preset, seq, dtype, attention, recompute);
    cfg.framework = framework;
    out.push_back(cfg);
  };
  add("gpt2", 1024, Precision::bf16, Attention::eager, Recompute::selective, Framework::lean);
  add("gpt2", 2048, Precision::fp32, Attention::flash, Recompute::none, Framework::lean);
  add("gpt2", 1024, Precision::fp32, Attention::eager, Recompute::none, Framework::hf);
  add("tiny-llama", 4096, Precision::bf16, Attention::flash, Recompute::full, Framework::hf);
  add("llama3.2-1b", 256, Precision::bf16, Attention::eager, Recompute::none, Framework::hf);
  RunConfig qlora = out.front();
  qlora.model = find_preset("tiny-llama").model;
  qlora.framework = Framework::lean;
  qlora.finetune = Finetune::qlora;
  qlora.optimizer = Optimizer::paged_adamw_8bit;
  qlora.lora_rank = 8;
  out.push_back(qlora);
  return out;
}

std::string label(const RunConfig& cfg) {
  return fmt::format("{} S={} {} {} {} {} {}", cfg.model.name, cfg.seq, to_string(cfg.dtype),
                     to_string(cfg.attention), to_string(cfg.recompute), to_string(cfg.framework),
                     to_string(cfg.finetune));
}

// `estimate --batch B` and the longest sequence at a batch take the allocator's share at that
// batch (share_at_batch): the peak there is what a sim trial at that batch reserves, at every
// batch from 1 to past the largest, to the byte, not only at the largest (where the share is taken
// otherwise: read off that line, half the largest batch was up to 36% under on issue 13's grid,
// and batch 1 up to 15 times over).
TEST(EstimateAtABatch, PeakIsWhatASimTrialAtThatBatchReserves) {
  int compared = 0;
  for (RunConfig cfg : at_batch_configurations()) {
    validate(cfg);
    const Device device = make_device(cfg);
    const DeviceInfo& info = device.info;
    const DeviceOverhead overhead = estimate_overhead(info);
    DeviceOverhead at_overhead = overhead;
    at_overhead.share_at_batch = true;
    const std::int64_t most = analyze(cfg, overhead).max_batch(info.total);
    ASSERT_GT(most, 3) << label(cfg);
    for (std::int64_t batch :
         {std::int64_t{1}, std::int64_t{2}, most / 3, most - 1, most, most + 1}) {
      SCOPED_TRACE(label(cfg) + " B=" + std::to_string(batch));
      cfg.batch = batch;
      const Bytes est = analyze(cfg, at_overhead).peak(batch);
      const TrialResult trial = run_trial(cfg, device, batch, info.tensor_capacity(), nullptr);
      EXPECT_EQ(est <= info.total, trial.fit) << est;
      if (trial.fit) {
        EXPECT_EQ(est, trial.device_peak);
        ++compared;
      }
    }
  }
  EXPECT_GE(compared, 25);
}

// The allocated peak (the tensors alone, as torch.cuda.max_memory_allocated counts them) at a batch
// is a sim trial's tensor peak there, to the byte: at batch 1, where hf gpt2's eager attention has
// a structure of its own, and with paged optimizer state, which is not on the device.
TEST(EstimateAtABatch, AllocatedPeakIsASimTrialsTensorPeak) {
  for (RunConfig cfg : at_batch_configurations()) {
    validate(cfg);
    const Device device = make_device(cfg);
    BatchScaledProgram step(cfg, device.info.gemm_workspace);
    for (std::int64_t batch : {1, 2, 9}) {
      SCOPED_TRACE(label(cfg) + " B=" + std::to_string(batch));
      const TrialResult trial =
          run_trial(cfg, device, batch, std::numeric_limits<Bytes>::max() / 4, nullptr);
      ASSERT_TRUE(trial.fit);
      EXPECT_EQ(allocated_peak(step, batch), trial.tensor_peak);
    }
  }
}

// The longest sequence the estimate gives at a batch is the one the sim search finds.
TEST(EstimateAtABatch, LongestSequenceIsTheSimSearchs) {
  for (RunConfig cfg : at_batch_configurations())
    for (std::int64_t batch : {1, 4}) {
      cfg.batch = batch;
      validate(cfg);
      SCOPED_TRACE(label(cfg));
      const SeqMeasurement m = measure_max_seq(cfg, make_device(cfg));
      EXPECT_GT(m.search.max_seq, 0);
      EXPECT_EQ(m.est_max_seq, m.search.max_seq);
    }
}

// Where the largest batch fits only because the allocator freed its cache, the replay there often
// fills the capacity to the byte. The estimate's peak there is the replay's to the byte, so its
// max batch is the sim's: with the share's slope rounded up it was a few bytes over the capacity
// and one batch short on these configurations.
TEST(EstimateAgainstSim, AReplayThatFillsTheCapacityExactlyIsEstimatedToTheByte) {
  auto config = [](const char* preset, Precision dtype, Recompute recompute, Finetune finetune,
                   std::int64_t seq) {
    RunConfig cfg = on_rtx4090(preset, seq, dtype, Attention::flash, recompute);
    cfg.finetune = finetune;
    if (finetune == Finetune::qlora) cfg.optimizer = Optimizer::paged_adamw_8bit;
    // The fine-tuning cases are the hand-written trainer's step, where they were found to fill
    // the card to the byte.
    if (finetune != Finetune::full) cfg.framework = Framework::lean;
    return cfg;
  };
  int filled = 0;
  for (RunConfig cfg :
       {config("gpt2", Precision::fp32, Recompute::full, Finetune::qlora, 512),
        config("llama3.2-1b", Precision::fp32, Recompute::full, Finetune::lora, 512),
        config("tiny-llama", Precision::fp32, Recompute::none, Finetune::full, 512),
        config("tiny-llama", Precision::bf16, Recompute::none, Finetune::lora, 2048),
        config("gpt2-medium", Precision::fp32, Recompute::none, Finetune::lora, 512),
        config("qwen2.5-0.5b", Precision::fp32, Recompute::full, Finetune::lora, 2048)}) {
    validate(cfg);
    SCOPED_TRACE(label(cfg));
    const Device device = make_device(cfg);
    const Measurement m = measure(cfg, device, {});
    ASSERT_GT(m.search.max_batch, 0);
    EXPECT_EQ(m.est_max_batch, m.search.max_batch);
    EXPECT_EQ(m.estimated_peak(), m.measured_peak());
    if (m.measured_peak() == device.info.total) ++filled;
  }
  EXPECT_GE(filled, 2);  // the case this test is about
}

// Where the search stops at its limit (--max-batch), the peaks are compared at the limit, far from
// the estimate's own max batch where its allocator share was taken: the estimate's peak there is
// taken at that batch, and is the sim's. Read off the line of the estimate's max batch instead,
// it was 4% to 21% under on tiny-llama at S = 256 on sim:h200, hitting the limit of 65,536.
TEST(EstimateAgainstSim, AtTheSearchsLimitThePeaksAreComparedAtTheLimit) {
  for (const char* preset : {"gpt2", "tiny-llama"})
    for (Framework framework : {Framework::lean, Framework::hf}) {
      RunConfig cfg =
          testing_grid::grid_config(preset, 256, Precision::bf16, Attention::flash, Recompute::full,
                                    Optimizer::adamw, AllocatorKind::caching);
      cfg.framework = framework;
      validate(cfg);
      SCOPED_TRACE(label(cfg));
      const Device device = make_device(cfg);
      SearchLimits limits;
      limits.max_batch = 8;
      const Measurement m = measure(cfg, device, limits);
      ASSERT_TRUE(m.search.hit_limit);
      ASSERT_GT(m.est_max_batch, 4 * limits.max_batch);  // far from the limit
      EXPECT_EQ(m.compared_batch(), limits.max_batch);
      ASSERT_TRUE(m.est_peak_at_compared.has_value());
      EXPECT_EQ(m.estimated_peak(), m.measured_peak());
    }
}

// The 300 configurations of the engine's speed grid (bench/bench_grid.cpp: gpt2, gpt2-large,
// llama2-7b, llama3-8b, tiny-llama × seq 512..8192 × fp32, bf16 × eager, flash × recompute none,
// selective, full; no optimizer; hf under auto where it models the recipe), under both allocators.
TEST(EstimateAgainstSim, TheSpeedGridToTheByteUnderBothAllocators) {
  for (AllocatorKind allocator : {AllocatorKind::caching, AllocatorKind::direct}) {
    RunConfig base;
    base.device = parse_device("sim:h100-80gb");
    base.optimizer = Optimizer::none;
    base.allocator = allocator;
    std::vector<testing_grid::Case> cases;
    for (const RunConfig& cfg :
         expand(base,
                {parse_axis("preset=gpt2,gpt2-large,llama2-7b,llama3-8b,tiny-llama"),
                 parse_axis("seq=512..8192"), parse_axis("dtype=fp32,bf16"),
                 parse_axis("attention=eager,flash"), parse_axis("recompute=none,selective,full")}))
      cases.push_back({cfg, label(cfg)});
    ASSERT_EQ(cases.size(), 300u);
    testing_grid::expect_estimate_exact(cases, false);
  }
}

}  // namespace
}  // namespace vrambench

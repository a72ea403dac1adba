// The plan: the micro-batch / grad-accum rule on hand-worked cases, the safety margin, the longest
// sequence over a synthetic predicate, the budget, and the alternatives (ranked, each measured
// again here), all on sim.
#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <set>
#include <vector>

#include "core/error.h"
#include "device/device.h"
#include "model/families.h"
#include "plan/emit.h"
#include "plan/plan.h"
#include "measure/measure.h"
#include "search/search.h"

namespace vrambench {
namespace {

// A choice whose effective batch is micro x accum, with no near alternative, or with one.
MicroBatchChoice exact(std::int64_t max, std::int64_t micro, std::int64_t accum) {
  return {max, micro, accum, micro * accum, 0, 0};
}
MicroBatchChoice with_near(std::int64_t max, std::int64_t micro, std::int64_t accum,
                           std::int64_t near_micro, std::int64_t near_accum) {
  return {max, micro, accum, micro * accum, near_micro, near_accum};
}

// Each case worked by hand from the rule in plan.h (m0 = min(max, N), the largest divisor d <= m0
// of N, N / d steps; m0 x a listed when d < 3/4 m0 and m0 x a is within N / 8 of N).
TEST(PlanMicroBatch, HandWorkedCases) {
  // max 3, N 16 (the plan that asked for 16 and planned 3 x 6 = 18): 2 x 8 = 16; 3 x 5 = 15 is
  // 1 off (<= 2), and 2 < 9/4: listed.
  EXPECT_EQ(choose_micro_batch(3, 16), with_near(3, 2, 8, 3, 5));
  // max 5, N 16: 4 x 4; 4 is not below 15/4.
  EXPECT_EQ(choose_micro_batch(5, 16), exact(5, 4, 4));
  // max 7, N 32: 4 x 8; 7 x 5 = 35 is 3 off (<= 4), 7 x 4 = 28 4 off: 35 listed.
  EXPECT_EQ(choose_micro_batch(7, 32), with_near(7, 4, 8, 7, 5));
  // max 9, N 20: 5 x 4; 9 x 2 = 18 is 2 off (<= 2.5): listed.
  EXPECT_EQ(choose_micro_batch(9, 20), with_near(9, 5, 4, 9, 2));
  // max 7, N 24: 6 x 4, no cost.
  EXPECT_EQ(choose_micro_batch(7, 24), exact(7, 6, 4));
  // max 4, N 10: 2 x 5; 4 x 2 = 8 and 4 x 3 = 12 are both 2 off, more than 10 / 8: none listed.
  EXPECT_EQ(choose_micro_batch(4, 10), exact(4, 2, 5));
  // max 3, N 7 (prime): 1 x 7; 3 x 2 = 6 is 1 off, more than 7 / 8: none listed.
  EXPECT_EQ(choose_micro_batch(3, 7), exact(3, 1, 7));
  // max 16, N 17 (prime): 1 x 17; 16 x 1 = 16 is 1 off (<= 2.1): listed.
  EXPECT_EQ(choose_micro_batch(16, 17), with_near(16, 1, 17, 16, 1));
  // max 11, N 12: 6 x 2, 6 < 33/4 and 11 x 1 = 11 is 1 off (<= 1.5): listed.
  EXPECT_EQ(choose_micro_batch(11, 12), with_near(11, 6, 2, 11, 1));
  // At or above the target: one micro-batch of the target.
  EXPECT_EQ(choose_micro_batch(100, 16), exact(100, 16, 1));
  EXPECT_EQ(choose_micro_batch(16, 16), exact(16, 16, 1));
  EXPECT_EQ(choose_micro_batch(1, 16), exact(1, 1, 16));
  EXPECT_EQ(choose_micro_batch(4, 1), exact(4, 1, 1));
  // Nothing fits.
  EXPECT_EQ(choose_micro_batch(0, 16), (MicroBatchChoice{0, 0, 0, 0, 0, 0}));
  EXPECT_THROW(choose_micro_batch(4, 0), InternalError);
}

// Over a grid: micro x accum is the target, always; the micro-batch is the largest divisor that
// fits; a near alternative is at the largest micro-batch, near the target and never it, and only
// where the chosen micro-batch is well below the largest.
TEST(PlanMicroBatch, PropertiesOverAGrid) {
  for (std::int64_t max = 1; max <= 40; ++max)
    for (std::int64_t n = 1; n <= 130; ++n) {
      const MicroBatchChoice c = choose_micro_batch(max, n);
      const std::int64_t m0 = std::min(max, n);
      ASSERT_EQ(c.micro_batch * c.grad_accum, n) << max << " " << n;
      ASSERT_EQ(c.effective_batch, n) << max << " " << n;
      ASSERT_LE(c.micro_batch, m0) << max << " " << n;
      for (std::int64_t d = c.micro_batch + 1; d <= m0; ++d) ASSERT_NE(n % d, 0) << max << " " << n;
      if (c.near_micro_batch == 0) continue;
      ASSERT_EQ(c.near_micro_batch, m0) << max << " " << n;
      ASSERT_NE(c.near_effective_batch(), n) << max << " " << n;
      ASSERT_LE(8 * std::llabs(c.near_effective_batch() - n), n) << max << " " << n;
      ASSERT_LT(4 * c.micro_batch, 3 * m0) << max << " " << n;
    }
}

TEST(PlanSafetyMargin, SizesAndPercentages) {
  EXPECT_EQ(SafetyMargin{}.of(24 * GiB), GiB);  // the default
  EXPECT_EQ(parse_safety_margin("512MiB").of(24 * GiB), 512 * MiB);
  EXPECT_EQ(parse_safety_margin("2").of(24 * GiB), 2 * GiB);
  EXPECT_EQ(parse_safety_margin("0").of(24 * GiB), 0);
  EXPECT_EQ(parse_safety_margin("0GiB").of(24 * GiB), 0);
  EXPECT_EQ(parse_safety_margin("10%").of(20 * GiB), 2 * GiB);
  EXPECT_EQ(parse_safety_margin("0%").of(20 * GiB), 0);
  EXPECT_EQ(parse_safety_margin("10%").text(), "10%");
  for (const char* bad : {"100%", "-1%", "x%", "%", "1GX", "", "abc", "0XB", "."})
    EXPECT_THROW(parse_safety_margin(bad), UsageError) << bad;
}

// find_max_seq over a synthetic predicate: every probe a multiple of 64, the answer the largest
// multiple of 64 that fits, from any hint.
TEST(PlanSeqSearch, SyntheticPredicateFindsTheLargestMultipleOf64) {
  for (const std::int64_t true_max : {63, 64, 100, 4095, 4096, 5000, 131071})
    for (const std::int64_t hint : {1, 64, 1000, 4096, 9000, 1 << 18}) {
      std::set<std::int64_t> probed;
      const SeqSearchResult r = find_max_seq(
          [&](std::int64_t seq) {
            EXPECT_EQ(seq % 64, 0) << seq;
            EXPECT_TRUE(probed.insert(seq).second) << "probed twice: " << seq;
            return seq <= true_max;
          },
          hint);
      EXPECT_EQ(r.max_seq, true_max / 64 * 64) << true_max << " hint " << hint;
      EXPECT_FALSE(r.hit_limit);
      EXPECT_FALSE(r.non_monotone);
      EXPECT_EQ(r.trials.size(), probed.size());
    }
}

TEST(PlanSeqSearch, LimitAndGranule) {
  const SeqSearchResult all = find_max_seq([](std::int64_t) { return true; }, 64, {64, 1000});
  EXPECT_EQ(all.max_seq, 960);  // 1000 rounded down to the granule
  EXPECT_TRUE(all.hit_limit);
  const SeqSearchResult by128 =
      find_max_seq([](std::int64_t seq) { return seq <= 1000; }, 512, {128, 4096});
  EXPECT_EQ(by128.max_seq, 896);
  EXPECT_THROW(find_max_seq([](std::int64_t) { return true; }, 64, {0, 1000}), InternalError);
  EXPECT_THROW(find_max_seq([](std::int64_t) { return true; }, 64, {64, 32}), InternalError);
}

RunConfig gpt2_config() {
  RunConfig cfg;
  cfg.model = find_preset("gpt2").model;
  cfg.seq = 1024;
  validate(cfg);
  return cfg;
}

Device rtx4090() {
  RunConfig cfg;
  cfg.device = parse_device("sim:rtx4090");
  return make_device(cfg);
}

// measure_max_seq on sim agrees with trials at the answer and one granule past it.
TEST(PlanSeqSearch, MeasuredOnSimFitsAtMaxAndNotOneGranuleLonger) {
  RunConfig cfg = gpt2_config();
  cfg.batch = 4;
  const Device device = rtx4090();
  const SeqMeasurement m = measure_max_seq(cfg, device);
  ASSERT_GT(m.search.max_seq, 0);
  EXPECT_EQ(m.search.max_seq % 64, 0);
  ASSERT_NE(m.at_max(), nullptr);
  EXPECT_TRUE(m.at_max()->fit);
  RunConfig longer = cfg;
  longer.seq = m.search.max_seq + 64;
  EXPECT_FALSE(run_trial(longer, device, 4, device.info.tensor_capacity(), nullptr).fit);
  EXPECT_GT(m.est_max_seq, 0);
}

// The margin is for planning: the search on the whole capacity is what measure() finds, whatever
// the margin; only the planned micro-batch moves.
TEST(PlanSafetyMargin, NeverChangesTheSearchOnTheWholeCapacity) {
  const RunConfig cfg = gpt2_config();
  const Device device = rtx4090();
  const Measurement searched = measure(cfg, device, SearchLimits{});
  PlanRequest none, big;
  none.margin = parse_safety_margin("0");
  big.margin = parse_safety_margin("6GiB");
  const Plan a = make_plan(cfg, device, none);
  const Plan b = make_plan(cfg, device, big);
  EXPECT_EQ(a.whole.search.max_batch, searched.search.max_batch);
  EXPECT_EQ(b.whole.search.max_batch, searched.search.max_batch);
  EXPECT_EQ(a.planned.search.max_batch, searched.search.max_batch);  // no margin
  EXPECT_LT(b.planned.search.max_batch, searched.search.max_batch);
  EXPECT_EQ(b.planning_capacity, device.info.total - 6 * GiB);
  // The planned micro-batch is the search on the capacity less the margin.
  const Measurement less = measure(cfg, simulated(with_margin(device.info, 6 * GiB)), {});
  EXPECT_EQ(b.planned.search.max_batch, less.search.max_batch);
}

TEST(PlanBudget, LinesSumToTheCapacityAndThePeakIsTheReplays) {
  const RunConfig cfg = gpt2_config();
  const Device device = rtx4090();
  PlanRequest request;
  request.target_batch = 64;
  const Plan plan = make_plan(cfg, device, request);
  ASSERT_TRUE(plan.fits());
  Bytes on_device = 0, tensors = 0;
  for (const BudgetLine& l : plan.budget.lines) {
    if (l.on_device) on_device += l.bytes;
    if (l.on_device && l.key != "free" && l.key != "safety_margin" && l.key != "cuda_context" &&
        l.key != "allocator_fragmentation")
      tensors += l.bytes;
  }
  EXPECT_EQ(on_device, plan.capacity);
  EXPECT_EQ(plan.budget.device_peak + plan.margin + plan.budget.free(), plan.capacity);
  EXPECT_GE(plan.budget.free(), 0);
  EXPECT_TRUE(plan.budget.fits);
  const Device planning = simulated(with_margin(device.info, plan.margin));
  const TrialResult replay =
      run_trial(plan.config, planning, plan.budget.batch, planning.info.tensor_capacity(), nullptr);
  ASSERT_TRUE(replay.fit);
  EXPECT_EQ(plan.budget.device_peak, replay.device_peak);
  EXPECT_EQ(tensors, replay.tensor_peak);
  EXPECT_EQ(plan.budget.batch, plan.choice.micro_batch);
}

// Full training in fp32 with eager attention on a small card needs accumulation for 64: every
// alternative saves memory at the first micro-batch that did not fit, they come ranked by it, and
// each one's peak and max micro-batch hold when measured again here.
TEST(PlanAlternatives, RankedByMemorySavedAndEachMeasuredAgain) {
  RunConfig cfg = gpt2_config();
  cfg.dtype = Precision::fp32;
  cfg.attention = Attention::eager;
  validate(cfg);
  RunConfig device_cfg;
  device_cfg.device = parse_device("sim:rtx4060");
  const Device device = make_device(device_cfg);
  PlanRequest request;
  request.target_batch = 64;
  const Plan plan = make_plan(cfg, device, request);
  ASSERT_TRUE(plan.fits());
  ASSERT_LT(plan.planned.search.max_batch, 64);
  EXPECT_EQ(plan.compared_batch, plan.planned.search.max_batch + 1);
  ASSERT_GE(plan.alternatives.size(), 4u);
  std::set<std::string> flags;
  for (const Alternative& a : plan.alternatives) flags.insert(a.flags);
  for (const char* expected : {"--recompute full", "--attention flash", "--dtype bf16"})
    EXPECT_TRUE(flags.count(expected)) << expected;

  const Device planning = simulated(with_margin(device.info, plan.margin));
  const Bytes unlimited = std::numeric_limits<Bytes>::max() / 4;
  for (std::size_t i = 0; i < plan.alternatives.size(); ++i) {
    const Alternative& a = plan.alternatives[i];
    if (i > 0) {
      EXPECT_GE(plan.alternatives[i - 1].saved, a.saved) << a.change;
    }
    EXPECT_GT(a.saved, 0) << a.change;
    const Bytes peak =
        run_trial(a.config, simulated(device.info), plan.compared_batch, unlimited, nullptr)
            .device_peak;
    EXPECT_EQ(a.peak, peak) << a.change;
    EXPECT_EQ(a.saved, plan.compared_peak - peak) << a.change;
    // The max micro-batch: it fits (with accumulation below the target), one more does not.
    RunConfig at = a.config;
    at.grad_accum = a.max_micro_batch >= 64 ? 1 : 64;
    if (a.max_micro_batch > 0) {
      EXPECT_TRUE(
          run_trial(at, planning, a.max_micro_batch, planning.info.tensor_capacity(), nullptr).fit)
          << a.change;
    }
    if (a.max_micro_batch < 64) {
      EXPECT_FALSE(
          run_trial(at, planning, a.max_micro_batch + 1, planning.info.tensor_capacity(), nullptr)
              .fit)
          << a.change;
    }
    EXPECT_EQ(a.choice, choose_micro_batch(a.max_micro_batch, 64)) << a.change;
  }
}

TEST(PlanAlternatives, CandidatesChangeOneThingAndApplyOnlyWhereTheyCan) {
  RunConfig cfg = gpt2_config();
  cfg.recompute = Recompute::full;
  cfg.finetune = Finetune::qlora;
  cfg.optimizer = Optimizer::paged_adamw_8bit;
  cfg.lora_rank = 1;
  validate(cfg);
  std::set<std::string> flags;
  for (const Alternative& a : candidate_alternatives(cfg)) {
    flags.insert(a.flags);
    EXPECT_NE(a.config, cfg);
  }
  // Recompute, attention, optimizer, finetune kind and rank are already as small as they go.
  EXPECT_EQ(flags, (std::set<std::string>{"--seq 512", "--lora-targets c_attn"}));
}

// A plan with micro-batch 1 not fitting gets alternatives at micro-batch 1 and no settings.
TEST(PlanAlternatives, NothingFitsComparesAtMicroBatchOne) {
  RunConfig cfg;
  cfg.model = find_preset("llama2-13b").model;  // 26 GB of bf16 weights on a 24 GB card
  cfg.seq = 2048;
  cfg.finetune = Finetune::lora;
  validate(cfg);
  RunConfig device_cfg;
  device_cfg.device = parse_device("sim:rtx4090");
  PlanRequest request;
  request.target_batch = 8;
  const Plan plan = make_plan(cfg, make_device(device_cfg), request);
  EXPECT_FALSE(plan.fits());
  EXPECT_EQ(plan.compared_batch, 1);
  EXPECT_EQ(plan.choice.micro_batch, 0);
  EXPECT_LT(plan.budget.free(), 0);
  EXPECT_FALSE(plan.alternatives.empty());
  EXPECT_NE(plan_summary_line(plan).find("nothing fits"), std::string::npos);
}

TEST(PlanEmitNames, HuggingFaceOptimizerNamesComeFromTheAliasTable) {
  EXPECT_EQ(hf_optim_name(Optimizer::adamw), "adamw_torch");
  EXPECT_EQ(hf_optim_name(Optimizer::adamw_8bit), "adamw_bnb_8bit");
  EXPECT_EQ(hf_optim_name(Optimizer::paged_adamw), "paged_adamw_32bit");
  EXPECT_EQ(hf_optim_name(Optimizer::paged_adamw_8bit), "paged_adamw_8bit");
  for (const auto& [o, name] : enum_names<Optimizer>())
    EXPECT_EQ(parse_enum<Optimizer>(hf_optim_name(o), "optimizer"), o) << name;
  EXPECT_EQ(parse_plan_emit("axolotl"), PlanEmit::axolotl);
  EXPECT_THROW(parse_plan_emit("yaml"), UsageError);
}

// The plan names whose step it is for: hf (transformers on PyTorch), or lean, with the reason where
// auto fell back to it (a transformers run of that recipe keeps more than the plan holds).
TEST(PlanEmitNames, TheRecipeNamesTheFrameworkAndWhyAutoChoseLean) {
  RunConfig cfg;
  cfg.model = find_preset("gpt2").model;
  EXPECT_NE(describe_recipe(cfg).find("framework hf"), std::string::npos) << describe_recipe(cfg);
  cfg.finetune = Finetune::lora;
  EXPECT_NE(describe_recipe(cfg).find("framework hf"), std::string::npos) << describe_recipe(cfg);
  cfg.quant = QuantKind::int8;  // bitsandbytes' 8-bit layers: not modelled by hf yet
  const std::string int8 = describe_recipe(cfg);
  EXPECT_NE(int8.find("framework lean (a hand-written trainer"), std::string::npos) << int8;
  EXPECT_NE(int8.find("does not model bitsandbytes' 8-bit layers"), std::string::npos) << int8;
  cfg.framework = Framework::lean;
  const std::string lean = describe_recipe(cfg);
  EXPECT_NE(lean.find("framework lean"), std::string::npos) << lean;
  EXPECT_EQ(lean.find("does not model"), std::string::npos) << lean;
}

}  // namespace
}  // namespace vrambench

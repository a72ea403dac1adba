// BatchScaledProgram: the program a search replays at each batch, rescaled after two builds,
// has the bytes, names, roles and liveness build_program gives at that batch, over every
// architecture, attention, recompute, scope, optimizer and precision, and replays to the same
// result.
#include <gtest/gtest.h>

#include <limits>

#include "alloc/allocator.h"
#include "core/error.h"
#include "core/presets.h"
#include "device/sources.h"
#include "search/scaled_program.h"
#include "search/trial.h"

namespace vrambench {
namespace {

std::vector<RunConfig> configurations() {
  std::vector<RunConfig> out;
  for (const char* preset : {"tiny", "tiny-llama", "gpt2", "llama3-8b"})
    for (Attention attention : {Attention::eager, Attention::flash})
      for (Recompute recompute : {Recompute::none, Recompute::selective, Recompute::full})
        for (Scope scope : {Scope::model, Scope::layer, Scope::attention, Scope::mlp})
          for (Optimizer optimizer : {Optimizer::adamw, Optimizer::sgd, Optimizer::none})
            for (Precision dtype : {Precision::fp32, Precision::fp16, Precision::bf16}) {
              RunConfig cfg;
              cfg.model = find_preset(preset).model;
              cfg.seq = 128;
              cfg.attention = attention;
              cfg.recompute = recompute;
              cfg.scope = scope;
              cfg.optimizer = optimizer;
              cfg.dtype = dtype;
              cfg.dropout = optimizer == Optimizer::sgd ? 0.1 : 0.0;
              out.push_back(cfg);
            }
  return out;
}

void expect_same(const Program& scaled, const Liveness& scaled_liveness, const Program& built) {
  ASSERT_EQ(scaled.tensors.size(), built.tensors.size());
  ASSERT_EQ(scaled.ops.size(), built.ops.size());
  for (std::size_t i = 0; i < built.tensors.size(); ++i) {
    EXPECT_EQ(scaled.tensors[i].bytes, built.tensors[i].bytes) << built.tensors[i].name;
    EXPECT_EQ(scaled.tensors[i].name, built.tensors[i].name);
    EXPECT_EQ(scaled.tensors[i].role, built.tensors[i].role);
  }
  for (std::size_t i = 0; i < built.ops.size(); ++i) {
    EXPECT_EQ(scaled.ops[i].name, built.ops[i].name);
    EXPECT_EQ(scaled.ops[i].inputs, built.ops[i].inputs);
    EXPECT_EQ(scaled.ops[i].outputs, built.ops[i].outputs);
  }
  const Liveness liveness = compute_liveness(built);
  EXPECT_EQ(scaled_liveness.alloc_at, liveness.alloc_at);
  EXPECT_EQ(scaled_liveness.free_after, liveness.free_after);
  EXPECT_EQ(scaled_liveness.allocs_before, liveness.allocs_before);
  EXPECT_EQ(scaled_liveness.frees_after, liveness.frees_after);
  EXPECT_EQ(scaled_liveness.persistent, liveness.persistent);
  EXPECT_EQ(scaled.config.batch, built.config.batch);
}

TEST(BatchScaledProgram, EveryBatchMatchesTheBuiltProgramAfterTwoBuilds) {
  constexpr Bytes kWorkspace = 32 * MiB;
  for (const RunConfig& cfg : configurations()) {
    SCOPED_TRACE(testing::Message()
                 << cfg.model.name << " " << to_string(cfg.attention) << " "
                 << to_string(cfg.recompute) << " " << to_string(cfg.scope) << " "
                 << to_string(cfg.optimizer) << " " << to_string(cfg.dtype));
    BatchScaledProgram sizes(cfg, kWorkspace);
    // In a search's order: the hint, then batches above and below it.
    for (std::int64_t batch : {37, 38, 1, 2, 1000, 36, 65536}) {
      RunConfig at = cfg;
      at.batch = batch;
      const Program& scaled = sizes.at(batch);
      expect_same(scaled, sizes.liveness(), build_program(at, kWorkspace));
    }
    EXPECT_EQ(sizes.builds(), 2);
  }
}

TEST(BatchScaledProgram, ReplaysToTheSameTrialAsTheBuiltProgram) {
  RunConfig cfg;
  cfg.model = find_preset("gpt2").model;
  cfg.seq = 1024;
  BatchScaledProgram sizes(cfg, 32 * MiB);
  for (std::int64_t batch : {8, 9, 40, 3, 64}) {
    RunConfig at = cfg;
    at.batch = batch;
    const Program built = build_program(at, 32 * MiB);
    auto run = [&](const Program& program, const Liveness& liveness) {
      std::unique_ptr<SegmentSource> source = make_virtual_source(40 * GiB);
      std::unique_ptr<Allocator> allocator = make_caching_allocator(*source);
      return run_step(program, liveness, *allocator, nullptr, 512 * MiB);
    };
    const Program& scaled = sizes.at(batch);
    const TrialResult a = run(scaled, sizes.liveness());
    const TrialResult b = run(built, compute_liveness(built));
    EXPECT_EQ(a.fit, b.fit) << batch;
    EXPECT_EQ(a.device_peak, b.device_peak) << batch;
    EXPECT_EQ(a.tensor_peak, b.tensor_peak) << batch;
    EXPECT_EQ(a.peak_op, b.peak_op) << batch;
    EXPECT_EQ(a.peak_by_role, b.peak_by_role) << batch;
    EXPECT_EQ(a.oom.has_value(), b.oom.has_value()) << batch;
    if (a.oom && b.oom) {
      EXPECT_EQ(a.oom->tensor, b.oom->tensor);
      EXPECT_EQ(a.oom->requested, b.oom->requested);
    }
  }
}

TEST(BatchScaledProgram, ABatchTheBuilderRefusesIsRefusedTheSameWay) {
  RunConfig cfg;
  cfg.model = find_preset("gpt2").model;
  BatchScaledProgram sizes(cfg, 0);
  sizes.at(1);
  sizes.at(2);
  constexpr std::int64_t kHuge = std::numeric_limits<std::int64_t>::max() / 2;
  RunConfig at = cfg;
  at.batch = kHuge;
  EXPECT_THROW(build_program(at, 0), UsageError);
  EXPECT_THROW(sizes.at(kHuge), UsageError);
  EXPECT_THROW(sizes.at(0), UsageError);
  // And the batches after it are still right.
  at.batch = 5;
  expect_same(sizes.at(5), sizes.liveness(), build_program(at, 0));
}

}  // namespace
}  // namespace vrambench

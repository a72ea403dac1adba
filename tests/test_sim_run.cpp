// The replay of a training run on virtual memory (alloc/sim_run.h), the sim device's trial and the
// estimate's allocator share: the same result, field for field, as the trial runner over the same
// program with no executor (measure/trial.h), under either allocator, at capacities where the run
// fits at once, fits only after the caching allocator freed its cache, and does not fit; where it
// does not, the copy that went on without a limit is the run without a limit from the start. And
// a configuration's runs are replayed once.
#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <memory>
#include <string_view>

#include "alloc/sim_run.h"
#include "estimate_grid.h"
#include "program/scaled_program.h"
#include "measure/trial.h"

namespace vrambench {
namespace {

constexpr Bytes kUnlimited = std::numeric_limits<Bytes>::max() / 4;
constexpr Bytes kFixed = 300 * MiB;

// The trial runner's answer: the program at `batch` through a fresh allocator of `kind`.
TrialResult trial(const Program& program, AllocatorKind kind, Bytes capacity) {
  const std::unique_ptr<SegmentSource> source = make_virtual_source(capacity);
  const std::unique_ptr<Allocator> allocator = make_allocator(kind, *source);
  const std::unique_ptr<SegmentSource> paged_source = make_virtual_source(kUnlimited);
  const std::unique_ptr<Allocator> paged = make_allocator(AllocatorKind::direct, *paged_source);
  return run_step(program, compute_liveness(program), *allocator, nullptr, kFixed, kTrialSteps,
                  nullptr, paged.get());
}

TEST(SimRun, IsTheTrialRunnersAnswerFieldForField) {
  int fit_at_once = 0, fit_after_retry = 0, failed = 0;
  for (std::string_view preset : {"tiny", "tiny-llama"})
    for (Attention att : {Attention::eager, Attention::flash})
      for (Recompute rc : {Recompute::none, Recompute::full})
        for (Finetune finetune : {Finetune::full, Finetune::qlora}) {
          RunConfig cfg = testing_grid::grid_config(preset, 256, Precision::bf16, att, rc,
                                                    Optimizer::adamw, AllocatorKind::caching);
          cfg.framework = Framework::hf;
          cfg.finetune = finetune;
          if (finetune == Finetune::qlora) cfg.optimizer = Optimizer::paged_adamw_8bit;
          BatchScaledProgram sizes(cfg, 4 * MiB);
          const Program& two = sizes.at(2);  // before the schedule and the lines, which it makes
          const RunAllocations run = run_allocations(two, sizes.schedule(), sizes.byte_lines());
          for (std::int64_t batch : {2, 7}) {
            const Program& program = sizes.at(batch);
            const TrialResult whole = trial(program, AllocatorKind::caching, kUnlimited);
            ASSERT_TRUE(whole.fit);
            // From well below the peak to above it, in steps finer than a segment of 20 MiB.
            for (Bytes capacity = whole.reserved_peak / 2;
                 capacity <= whole.reserved_peak + 8 * MiB; capacity += 3 * MiB) {
              SCOPED_TRACE(std::string(preset) + " B=" + std::to_string(batch) + " capacity " +
                           std::to_string(capacity));
              const SimRun got =
                  sim_run(run, program, batch, AllocatorKind::caching, capacity, kFixed);
              const TrialResult want = trial(program, AllocatorKind::caching, capacity);
              EXPECT_EQ(got.at_capacity, want);
              EXPECT_EQ(got.unlimited().has_value(), !want.fit);
              if (got.unlimited()) {
                EXPECT_EQ(*got.unlimited(), whole);
              }
              EXPECT_EQ(got.needed_reserved(), want.fit ? want.reserved_peak : whole.reserved_peak);
              if (!want.fit)
                ++failed;
              else
                ++(want.reserved_peak < whole.reserved_peak ? fit_after_retry : fit_at_once);
            }
          }
        }
  // Every way a run can end was met.
  EXPECT_GT(fit_at_once, 0);
  EXPECT_GT(fit_after_retry, 0);
  EXPECT_GT(failed, 0);
}

TEST(SimRun, DirectIsTheTrialRunnersAnswerToo) {
  int fits = 0, fails = 0;
  for (std::string_view preset : {"tiny", "tiny-llama"})
    for (Finetune finetune : {Finetune::full, Finetune::qlora}) {
      RunConfig cfg =
          testing_grid::grid_config(preset, 256, Precision::bf16, Attention::flash, Recompute::none,
                                    Optimizer::adamw, AllocatorKind::direct);
      cfg.framework = Framework::lean;
      cfg.finetune = finetune;
      BatchScaledProgram sizes(cfg, 4 * MiB);
      const Program& two = sizes.at(2);  // before the schedule and the lines, which it makes
      const RunAllocations run = run_allocations(two, sizes.schedule(), sizes.byte_lines());
      for (std::int64_t batch : {2, 5}) {
        const Program& program = sizes.at(batch);
        const TrialResult whole = trial(program, AllocatorKind::direct, kUnlimited);
        for (Bytes capacity : {whole.reserved_peak - 1, whole.reserved_peak}) {
          const SimRun got = sim_run(run, program, batch, AllocatorKind::direct, capacity, kFixed);
          EXPECT_EQ(got.at_capacity, trial(program, AllocatorKind::direct, capacity));
          if (got.unlimited()) {
            EXPECT_EQ(*got.unlimited(), whole);
          }
          ++(got.at_capacity.fit ? fits : fails);
        }
      }
    }
  EXPECT_EQ(fits, 8);
  EXPECT_EQ(fails, 8);
}

// A configuration's run at a batch is replayed once, whoever asks: the same object comes back.
TEST(SimRun, RunsAreReplayedOnce) {
  RunConfig cfg =
      testing_grid::grid_config("tiny", 128, Precision::bf16, Attention::eager, Recompute::none,
                                Optimizer::adamw, AllocatorKind::caching);
  cfg.framework = Framework::hf;  // its eager attention has a structure of its own at batch 1
  BatchScaledProgram sizes(cfg, 4 * MiB);
  SimRuns runs(sizes, kTrialSteps, AllocatorKind::caching, 64 * MiB, kFixed);
  const SimRun& three = runs.at(3);
  EXPECT_EQ(&runs.at(3), &three);
  EXPECT_EQ(runs.at(1).at_capacity, trial(sizes.at(1), AllocatorKind::caching, 64 * MiB));
  EXPECT_EQ(runs.at(3).at_capacity, trial(sizes.at(3), AllocatorKind::caching, 64 * MiB));
}

}  // namespace
}  // namespace vrambench

// The cpu device end to end: the trial runner over capped host memory with the reference kernels
// (fit, out of memory, memory returned), and 16-bit recipes (bf16, fp16 with fp32 master weights)
// training through whole programs.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <vector>

#include "alloc/allocator.h"
#include "common/math.h"
#include "device/cpu_executor.h"
#include "device/host_runner.h"
#include "device/sources.h"
#include "measure/measure.h"
#include "measure/trial.h"
#include "model/families.h"
#include "program/program.h"
#include "program/schedule.h"

namespace vrambench {
namespace {

RunConfig tiny_16bit(Precision dtype) {
  RunConfig cfg;
  cfg.framework = Framework::lean;
  cfg.model = find_preset("tiny").model;
  cfg.model.vocab = 32;
  cfg.model.max_positions = 16;
  cfg.seq = 8;
  cfg.batch = 2;
  cfg.dtype = dtype;
  cfg.attention = Attention::eager;
  cfg.optimizer = Optimizer::adamw;
  cfg.dropout = 0.1;
  cfg.device = parse_device("cpu");
  return cfg;
}

TEST(CpuDevice, TrialFitsThenRunsOutOfMemoryAndReturnsEverything) {
  const Program program = build_program(tiny_16bit(Precision::bf16), 4096);
  const Liveness liveness = compute_liveness(program);
  const Bytes peak = live_profile(program, liveness).peak;
  auto executor = make_cpu_executor(3);
  {
    auto source = make_host_source(64 * MiB);
    auto allocator = make_allocator(AllocatorKind::caching, *source);
    const TrialResult result = run_step(program, liveness, *allocator, executor.get(), 0, 2);
    EXPECT_TRUE(result.fit);
    EXPECT_EQ(result.tensor_peak, peak);
    EXPECT_GE(result.reserved_peak, peak);
    EXPECT_EQ(source->in_use(), 0);
  }
  {
    // Half the program's own peak cannot fit, whatever the allocator does.
    auto source = make_host_source(peak / 2);
    auto allocator = make_allocator(AllocatorKind::direct, *source);
    const TrialResult result = run_step(program, liveness, *allocator, executor.get(), 0);
    EXPECT_FALSE(result.fit);
    ASSERT_TRUE(result.oom.has_value());
    EXPECT_GT(result.oom->requested, 0);
    EXPECT_EQ(source->in_use(), 0);
  }
}

// A few AdamW steps on one fixed batch: 16-bit weights and activations, fp32 master weights and
// optimizer state. The loss must fall, and every weight must stay the rounding of its master.
void check_16bit_training(Precision dtype) {
  Program program = build_program(tiny_16bit(dtype), 0);
  for (Op& op : program.ops)
    if (op.kind == OpKind::adamw_step) op.lr = 1e-2f;
  auto executor = make_cpu_executor(5);
  HostRunner run(program, *executor);
  run.step();
  const float initial = run.loss();
  float loss = initial;
  for (int step = 1; step < 30; ++step) {
    run.step();
    loss = run.loss();
    ASSERT_TRUE(std::isfinite(loss)) << "step " << step;
  }
  EXPECT_LT(loss, 0.8f * initial) << to_string(dtype);
  const DType storage = activation_dtype(dtype);
  int masters = 0;
  for (const Tensor& t : program.tensors) {
    if (t.role != Role::master_weight) continue;
    const auto master = run.values(t.id);
    const auto weight = run.values(find_tensor(program, t.name.substr(0, t.name.size() - 7)));
    for (std::size_t i = 0; i < master.size(); ++i)
      ASSERT_EQ(weight[i], kmath::round_to(storage, master[i])) << t.name << "[" << i << "]";
    ++masters;
  }
  EXPECT_GT(masters, 10);
}

// Real host allocations with real math report exactly the peaks of the replay on virtual memory,
// for the same program and allocator policy (no fixed overhead on either): sizes never depend on
// values, and the executor allocates nothing through the source.
TEST(CpuDevice, PeaksEqualTheSimReplayOverAGrid) {
  int compared = 0;
  for (const char* preset : {"tiny", "tiny-llama"})
    for (Attention attention : {Attention::eager, Attention::flash})
      for (Recompute recompute : {Recompute::none, Recompute::selective, Recompute::full})
        for (AllocatorKind allocator_kind : {AllocatorKind::caching, AllocatorKind::direct}) {
          RunConfig cfg = tiny_16bit(Precision::bf16);
          cfg.model = find_preset(preset).model;
          cfg.model.vocab = 32;
          cfg.model.max_positions = 16;
          cfg.attention = attention;
          cfg.recompute = recompute;
          cfg.allocator = allocator_kind;
          const Program program = build_program(cfg, 4096);
          const Liveness liveness = compute_liveness(program);
          auto executor = make_cpu_executor(5);
          auto host = make_host_source(64 * MiB);
          auto host_allocator = make_allocator(allocator_kind, *host);
          const TrialResult on_cpu =
              run_step(program, liveness, *host_allocator, executor.get(), 0);
          auto virt = make_virtual_source(64 * MiB);
          auto virt_allocator = make_allocator(allocator_kind, *virt);
          const TrialResult on_sim = run_step(program, liveness, *virt_allocator, nullptr, 0);
          SCOPED_TRACE(std::string(preset) + " " + std::string(to_string(attention)) + " " +
                       std::string(to_string(recompute)) + " " +
                       std::string(to_string(allocator_kind)));
          ASSERT_TRUE(on_cpu.fit);
          EXPECT_EQ(on_cpu.tensor_peak, on_sim.tensor_peak);
          EXPECT_EQ(on_cpu.reserved_peak, on_sim.reserved_peak);
          EXPECT_EQ(on_cpu.peak_by_role, on_sim.peak_by_role);
          ++compared;
        }
  EXPECT_EQ(compared, 24);
}

TEST(CpuDevice, Bf16WithMasterWeightsTrains) {
  check_16bit_training(Precision::bf16);
}
TEST(CpuDevice, Fp16WithMasterWeightsTrains) {
  check_16bit_training(Precision::fp16);
}

// Host memory whose "driver" also holds what the first trial loaded (as kernel modules and library
// plans stay on a GPU): device_used() = a context of 3 MiB, 2 MiB more once a trial has run, plus
// the segments handed out.
class LoadingHostSource : public SegmentSource {
 public:
  LoadingHostSource(Bytes capacity, bool& loaded)
      : inner_(make_host_source(capacity)), loaded_(loaded) {}
  std::optional<std::uintptr_t> allocate_segment(Bytes bytes) override {
    loaded_ = true;
    return inner_->allocate_segment(bytes);
  }
  void free_segment(std::uintptr_t address, Bytes bytes) override {
    inner_->free_segment(address, bytes);
  }
  Bytes capacity() const override { return inner_->capacity(); }
  Bytes in_use() const override { return inner_->in_use(); }
  std::optional<Bytes> device_used() const override {
    return 3 * MiB + (loaded_ ? 2 * MiB : 0) + inner_->in_use();
  }

 private:
  std::unique_ptr<SegmentSource> inner_;
  bool& loaded_;
};

TEST(CpuDevice, AWarmUpTrialComesFirstAndTheFixedOverheadIsMeasuredAfterIt) {
  RunConfig cfg = tiny_16bit(Precision::bf16);
  Device device;
  device.info.kind = DeviceKind::cpu;
  device.info.label = "cpu test";
  device.info.total = 64 * MiB;
  device.info.fixed_overhead = 1 * MiB;  // what was known before anything ran
  device.info.gemm_workspace = 4096;
  bool loaded = false;
  device.sources = [&](Bytes capacity) -> std::unique_ptr<SegmentSource> {
    return std::make_unique<LoadingHostSource>(capacity, loaded);
  };
  device.executors = [] { return make_cpu_executor(5); };
  std::vector<std::int64_t> started;
  const TrialStarting starting = [&](std::int64_t batch) { started.push_back(batch); };

  const Measurement cold = measure(cfg, device, {}, {}, starting);
  EXPECT_EQ(cold.fixed_overhead, 1 * MiB) << "no warm-up asked for";
  ASSERT_FALSE(started.empty());

  device.info.warm_up = true;
  loaded = false;
  started.clear();
  const Measurement warm = measure(cfg, device, {}, {}, starting);
  // Context and what the warm-up loaded, nothing of the step itself (all of it was freed).
  EXPECT_EQ(warm.fixed_overhead, 5 * MiB);
  // The estimate and the trials used it: the card holds 4 MiB less for the step than before (the
  // allocator's share is fitted where the largest batch is decided, which may move with it).
  EXPECT_EQ(warm.estimate.component(MemoryComponent::cuda_context) -
                cold.estimate.component(MemoryComponent::cuda_context),
            4 * MiB);
  ASSERT_NE(warm.at_max(), nullptr);
  EXPECT_GE(warm.at_max()->device_peak, warm.at_max()->reserved_peak + 5 * MiB);
  EXPECT_LE(warm.search.max_batch, cold.search.max_batch);
  // The warm-up ran as a trial at batch 1 before the search's first trial, and is not one of them.
  ASSERT_GE(started.size(), 2u);
  EXPECT_EQ(started[0], 1);
  EXPECT_EQ(started.size(), warm.search.trials.size() + 1);
}

}  // namespace
}  // namespace vrambench

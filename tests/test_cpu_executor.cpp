// The cpu device: the executor over small hand-built programs (storage rounding to bf16/fp16,
// accumulation into gradients, workspace tensors ignored, optimizer steps with master weights,
// initial contents), the host driver, and the capped host segment source.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "common/math.h"
#include "core/error.h"
#include "device/cpu_executor.h"
#include "device/host_runner.h"
#include "device/init_rule.h"
#include "device/sources.h"
#include "program_memory.h"

namespace vrambench {
namespace {

using test::Memory;

TEST(CpuExecutor, LinearStoresRoundedToBf16AndIgnoresWorkspace) {
  Program p;
  const int x = p.add_tensor("x", {2, 3}, DType::bf16, Role::input);
  const int w = p.add_tensor("fc.w", {4, 3}, DType::bf16, Role::weight);
  const int b = p.add_tensor("fc.b", {4}, DType::bf16, Role::weight);
  const int ws = p.add_tensor("gemm.workspace", {64}, DType::u8, Role::workspace);
  const int y = p.add_tensor("y", {2, 4}, DType::bf16, Role::transient);
  p.add_op(OpKind::linear_fwd, "fc", {x, w, b, ws}, {y});
  auto exec = make_cpu_executor(5);
  HostRunner run(p, *exec);
  run.keep_alive(y);
  run.step();
  const auto xs = run.values(x), ws_ = run.values(w), bs = run.values(b), ys = run.values(y);
  for (std::int64_t i = 0; i < 12; ++i)
    EXPECT_EQ(ws_[static_cast<std::size_t>(i)],
              kmath::round_to(DType::bf16, initial_weight_value(5, "fc.w", i)));
  for (float v : bs) EXPECT_EQ(v, 0.0f);  // biases start at zero
  for (std::int64_t m = 0; m < 2; ++m)
    for (std::int64_t o = 0; o < 4; ++o) {
      double acc = bs[static_cast<std::size_t>(o)];
      for (std::int64_t i = 0; i < 3; ++i)
        acc += static_cast<double>(xs[static_cast<std::size_t>(m * 3 + i)]) *
               ws_[static_cast<std::size_t>(o * 3 + i)];
      const float expected = kmath::round_to(DType::bf16, static_cast<float>(acc));
      EXPECT_EQ(ys[static_cast<std::size_t>(m * 4 + o)], expected);
    }
}

// Weights start N(0, 0.02): the sample moments of 200000 draws are within a few standard errors
// of it (the error of the mean is 0.02 / sqrt(n) ~ 4.5e-5), values are bounded by the Irwin-Hall
// construction (|v| <= 6 * 0.02), and the tails are there (beyond 3 sigma: about 0.3%).
TEST(CpuExecutor, WeightsStartNormalWithStandardDeviationPointZeroTwo) {
  const std::int64_t n = 200000;
  double sum = 0, squares = 0, largest = 0;
  std::int64_t beyond_three_sigma = 0;
  for (std::int64_t i = 0; i < n; ++i) {
    const double v = initial_weight_value(9, "layer0.mlp.fc.w", i);
    sum += v;
    squares += v * v;
    largest = std::max(largest, std::fabs(v));
    beyond_three_sigma += std::fabs(v) > 0.06;
  }
  const double mean = sum / n, sd = std::sqrt(squares / n - mean * mean);
  EXPECT_NEAR(mean, 0.0, 2.5e-4);
  EXPECT_NEAR(sd, 0.02, 2e-4);
  EXPECT_LE(largest, 0.12 + 1e-6);
  EXPECT_GT(largest, 0.07);
  EXPECT_NEAR(static_cast<double>(beyond_three_sigma) / n, 0.0027, 0.001);
  // Another stream (name) draws other values.
  EXPECT_NE(initial_weight_value(9, "layer0.mlp.fc.w", 0),
            initial_weight_value(9, "layer0.mlp.proj.w", 0));
}

TEST(CpuExecutor, GeluStoresRoundedToFp16) {
  Program p;
  const int x = p.add_tensor("x", {16}, DType::f16, Role::input);
  const int y = p.add_tensor("y", {16}, DType::f16, Role::transient);
  p.add_op(OpKind::gelu_fwd, "gelu", {x}, {y});
  Memory mem(p);
  auto exec = make_cpu_executor(1);
  exec->initialize(p, x, mem.data[static_cast<std::size_t>(x)]);
  exec->execute(p, 0, mem.data);
  bool any_rounded = false;
  for (std::int64_t i = 0; i < 16; ++i) {
    const float exact = kmath::gelu(mem.at(p, x, i));
    EXPECT_EQ(mem.at(p, y, i), kmath::round_to(DType::f16, exact));
    any_rounded |= mem.at(p, y, i) != exact;
  }
  EXPECT_TRUE(any_rounded);  // the test would not notice a missing rounding otherwise
}

TEST(CpuExecutor, AccumulateAddsIntoGradOutputsOnly) {
  Program p;
  const int dy = p.add_tensor("dy", {2, 2}, DType::f32, Role::input);
  const int x = p.add_tensor("x", {2, 3}, DType::f32, Role::input);
  const int w = p.add_tensor("w", {2, 3}, DType::f32, Role::weight);
  const int dx1 = p.add_tensor("dx1", {2, 3}, DType::f32, Role::transient);
  const int dx2 = p.add_tensor("dx2", {2, 3}, DType::f32, Role::transient);
  const int dw = p.add_tensor("w.grad", {2, 3}, DType::f32, Role::grad);
  p.add_op(OpKind::linear_bwd, "first", {dy, x, w}, {dx1, dw});
  p.add_op(OpKind::linear_bwd, "second", {dy, x, w}, {dx2, dw}).accumulate = true;
  Memory mem(p);
  auto exec = make_cpu_executor(2);
  for (int id : {dy, x, w}) exec->initialize(p, id, mem.data[static_cast<std::size_t>(id)]);
  exec->execute(p, 0, mem.data);
  std::vector<float> once(6);
  for (std::int64_t i = 0; i < 6; ++i) once[static_cast<std::size_t>(i)] = mem.at(p, dw, i);
  exec->execute(p, 1, mem.data);
  for (std::int64_t i = 0; i < 6; ++i) {
    EXPECT_FLOAT_EQ(mem.at(p, dw, i), 2.0f * once[static_cast<std::size_t>(i)]);
    EXPECT_FLOAT_EQ(mem.at(p, dx2, i), mem.at(p, dx1, i));  // not a grad: overwritten
  }
}

TEST(CpuExecutor, AdamwUpdatesMasterThenRoundsWeight) {
  Program p;
  const int w = p.add_tensor("w", {8}, DType::bf16, Role::weight);
  const int g = p.add_tensor("w.grad", {8}, DType::bf16, Role::grad);
  const int m = p.add_tensor("w.adam_m", {8}, DType::f32, Role::optimizer_state);
  const int v = p.add_tensor("w.adam_v", {8}, DType::f32, Role::optimizer_state);
  const int master = p.add_tensor("w.master", {8}, DType::f32, Role::master_weight);
  Op& op = p.add_op(OpKind::adamw_step, "w.adamw", {w, g, m, v, master}, {});
  op.lr = 1e-3f;
  op.weight_decay = 0.1f;
  Memory mem(p);
  auto exec = make_cpu_executor(3);
  for (int id : {w, m, v, master}) exec->initialize(p, id, mem.data[static_cast<std::size_t>(id)]);
  for (std::int64_t i = 0; i < 8; ++i) {
    EXPECT_EQ(mem.at(p, master, i), mem.at(p, w, i));  // the master starts as the weight's value
    EXPECT_EQ(mem.at(p, m, i), 0.0f);
    mem.set(p, g, i, 0.25f * static_cast<float>(i) - 1.0f);
  }
  // Reference: the same per-element update on fp32 copies, step 1 then step 2.
  std::vector<float> ref_w(8), ref_m(8, 0.0f), ref_v(8, 0.0f);
  for (std::int64_t i = 0; i < 8; ++i) ref_w[static_cast<std::size_t>(i)] = mem.at(p, master, i);
  const std::vector<float> start = ref_w;
  for (int step = 1; step <= 2; ++step) {
    exec->execute(p, 0, mem.data);
    kmath::AdamParams params;
    params.lr = 1e-3f;
    params.weight_decay = 0.1f;
    params.step = step;
    for (std::size_t i = 0; i < 8; ++i)
      kmath::adamw_update(&ref_w[i], mem.at(p, g, static_cast<std::int64_t>(i)), &ref_m[i],
                          &ref_v[i], params);
    for (std::int64_t i = 0; i < 8; ++i) {
      const auto k = static_cast<std::size_t>(i);
      EXPECT_EQ(mem.at(p, master, i), ref_w[k]);
      EXPECT_EQ(mem.at(p, w, i), kmath::round_to(DType::bf16, ref_w[k]));
      EXPECT_EQ(mem.at(p, m, i), ref_m[k]);
      EXPECT_EQ(mem.at(p, v, i), ref_v[k]);
    }
  }
  // Two steps with a constant gradient move each element by about 2 lr against its sign (the
  // decay term is 1e-4 of the weight); element 4 has a zero gradient and only decays.
  for (std::int64_t i = 0; i < 8; ++i) {
    const float moved = mem.at(p, master, i) - start[static_cast<std::size_t>(i)];
    const float grad = mem.at(p, g, i);
    if (grad == 0.0f)
      EXPECT_NEAR(moved, 0.0f, 1e-5f);
    else
      EXPECT_NEAR(moved, grad > 0 ? -2e-3f : 2e-3f, 1e-4f) << i;
  }
}

TEST(CpuExecutor, SgdStepWithoutMasterByHand) {
  Program p;
  const int w = p.add_tensor("w", {1}, DType::f32, Role::weight);
  const int g = p.add_tensor("w.grad", {1}, DType::f32, Role::grad);
  const int mom = p.add_tensor("w.momentum", {1}, DType::f32, Role::optimizer_state);
  Op& op = p.add_op(OpKind::sgd_step, "w.sgd", {w, g, mom}, {});
  op.lr = 0.5f;
  op.momentum = 0.9f;
  Memory mem(p);
  auto exec = make_cpu_executor(4);
  mem.set(p, w, 0, 1.0f);
  mem.set(p, g, 0, 0.2f);
  exec->execute(p, 0, mem.data);
  EXPECT_FLOAT_EQ(mem.at(p, mom, 0), 0.2f);
  EXPECT_FLOAT_EQ(mem.at(p, w, 0), 0.9f);
  exec->execute(p, 0, mem.data);
  EXPECT_FLOAT_EQ(mem.at(p, mom, 0), 0.38f);
  EXPECT_FLOAT_EQ(mem.at(p, w, 0), 0.9f - 0.19f);
}

TEST(CpuExecutor, InitialContentsFollowTheNames) {
  Program p;
  p.config.model.vocab = 11;
  const int ln = p.add_tensor("layer0.ln1.w", {4}, DType::f32, Role::weight);
  const int ln_b = p.add_tensor("layer0.ln1.b", {4}, DType::f32, Role::weight);
  const int norm = p.add_tensor("final_norm.w", {4}, DType::bf16, Role::weight);
  const int fc = p.add_tensor("layer0.mlp.fc.w", {64, 64}, DType::f32, Role::weight);
  const int tokens = p.add_tensor("tokens", {4, 64}, DType::i32, Role::input);
  const int targets = p.add_tensor("targets", {4, 64}, DType::i32, Role::input);
  Memory mem(p);
  InputFiller fill_targets = [](const Program&, const Tensor& t, void* data) {
    if (t.name != "targets") return false;
    auto* ids = static_cast<std::int32_t*>(data);
    for (std::int64_t i = 0; i < t.elements(); ++i) ids[i] = static_cast<std::int32_t>(i % 3);
    return true;
  };
  auto exec = make_cpu_executor(6, fill_targets);
  for (const Tensor& t : p.tensors)
    exec->initialize(p, t.id, mem.data[static_cast<std::size_t>(t.id)]);
  for (std::int64_t i = 0; i < 4; ++i) {
    EXPECT_EQ(mem.at(p, ln, i), 1.0f);
    EXPECT_EQ(mem.at(p, ln_b, i), 0.0f);
    EXPECT_EQ(mem.at(p, norm, i), 1.0f);
  }
  double sum = 0.0, sum_sq = 0.0;
  for (std::int64_t i = 0; i < 4096; ++i) {
    sum += mem.at(p, fc, i);
    sum_sq += static_cast<double>(mem.at(p, fc, i)) * mem.at(p, fc, i);
  }
  EXPECT_NEAR(sum / 4096, 0.0, 0.002);
  EXPECT_NEAR(std::sqrt(sum_sq / 4096), 0.02, 0.002);
  std::vector<int> seen(11, 0);
  for (std::int64_t i = 0; i < 256; ++i) {
    const float id = mem.at(p, tokens, i);
    ASSERT_GE(id, 0.0f);
    ASSERT_LT(id, 11.0f);
    ++seen[static_cast<std::size_t>(id)];
    EXPECT_EQ(mem.at(p, targets, i), static_cast<float>(i % 3));
  }
  for (int count : seen) EXPECT_GT(count, 0);
  // Same seed and name: same contents, in any program.
  Memory again(p);
  make_cpu_executor(6)->initialize(p, fc, again.data[static_cast<std::size_t>(fc)]);
  EXPECT_EQ(again.bytes[static_cast<std::size_t>(fc)], mem.bytes[static_cast<std::size_t>(fc)]);
}

TEST(CpuExecutor, RunnerUnbindsDeadTensors) {
  Program p;
  const int x = p.add_tensor("x", {4}, DType::f32, Role::input);
  const int a = p.add_tensor("a", {4}, DType::f32, Role::transient);
  const int c = p.add_tensor("c", {4}, DType::f32, Role::transient);
  p.add_op(OpKind::gelu_fwd, "g", {x}, {a});
  p.add_op(OpKind::add, "sum", {a, x}, {c});
  auto exec = make_cpu_executor(7);
  HostRunner run(p, *exec);
  run.keep_alive(c);
  run.step();
  EXPECT_THROW(run.values(a), InternalError);  // freed after its last use
  const auto xs = run.values(x), cs = run.values(c);
  for (std::size_t i = 0; i < 4; ++i) EXPECT_FLOAT_EQ(cs[i], kmath::gelu(xs[i]) + xs[i]);
}

TEST(CpuExecutor, RejectsAnOpThatDoesNotMatchItsSignature) {
  Program p;
  const int x = p.add_tensor("x", {4}, DType::f32, Role::input);
  const int y = p.add_tensor("y", {4}, DType::f32, Role::transient);
  // Past Program::add_op, which would refuse it: add takes two inputs.
  Op bad;
  bad.kind = OpKind::add;
  bad.name = "bad";
  bad.inputs = {x};
  bad.outputs = {y};
  p.ops.push_back(bad);
  Memory mem(p);
  EXPECT_THROW(make_cpu_executor(1)->execute(p, 0, mem.data), InternalError);
  // An attention op without its heads.
  p.ops.back() = Op{};
  p.ops.back().kind = OpKind::rope_fwd;
  p.ops.back().inputs = {x};
  p.ops.back().outputs = {y};
  EXPECT_THROW(make_cpu_executor(1)->execute(p, 0, mem.data), InternalError);
}

TEST(CpuSource, CapsAlignsAndFrees) {
  auto source = make_host_source(4 * KiB);
  EXPECT_EQ(source->capacity(), 4 * KiB);
  const auto a = source->allocate_segment(3 * KiB);
  ASSERT_TRUE(a.has_value());
  EXPECT_EQ(*a % 256, 0u);
  EXPECT_EQ(source->in_use(), 3 * KiB);
  EXPECT_FALSE(source->allocate_segment(2 * KiB).has_value());  // would exceed the capacity
  const auto b = source->allocate_segment(1 * KiB);
  ASSERT_TRUE(b.has_value());
  EXPECT_NE(*a, *b);
  // The memory is real: write all of it.
  auto* bytes = reinterpret_cast<std::uint8_t*>(*a);
  for (Bytes i = 0; i < 3 * KiB; ++i) bytes[i] = static_cast<std::uint8_t>(i);
  EXPECT_EQ(bytes[3 * KiB - 1], static_cast<std::uint8_t>(3 * KiB - 1));
  source->free_segment(*a, 3 * KiB);
  EXPECT_EQ(source->in_use(), 1 * KiB);
  EXPECT_THROW(source->free_segment(*a, 3 * KiB), InternalError);  // not handed out any more
  EXPECT_TRUE(source->allocate_segment(3 * KiB).has_value());
}

}  // namespace
}  // namespace vrambench

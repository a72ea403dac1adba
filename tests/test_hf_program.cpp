// The hf step program's structure where no measurement covers it: gradient accumulation.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <string>

#include "core/config.h"
#include "core/presets.h"
#include "program/program.h"

namespace vrambench {
namespace {

RunConfig hf_config(std::string_view preset, Precision dtype, std::int64_t grad_accum) {
  RunConfig cfg;
  cfg.model = find_preset(preset).model;
  cfg.framework = Framework::hf;
  cfg.dtype = dtype;
  cfg.seq = 64;
  cfg.batch = 2;
  cfg.grad_accum = grad_accum;
  validate(cfg);
  return cfg;
}

// Accumulating: every .grad is there before the first op and after the last, and the op that
// computes a gradient holds a new tensor of the same size (AccumulateGrad's new_grad) while
// writing into it; without accumulation there is no such tensor and the gradients start in
// backward.
TEST(HfProgram, GradAccumulationKeepsGradientsAndHoldsEachNewGradient) {
  for (std::string_view preset : {"tiny", "tiny-llama"})
    for (Precision dtype : {Precision::fp32, Precision::bf16, Precision::amp_bf16}) {
      SCOPED_TRACE(std::string(preset) + " " + std::string(to_string(dtype)));
      const Program one = build_program(hf_config(preset, dtype, 1), 0);
      const Program many = build_program(hf_config(preset, dtype, 4), 0);
      const Liveness live_one = compute_liveness(one);
      const Liveness live_many = compute_liveness(many);

      std::map<std::string, Bytes> grads;
      for (std::size_t t = 0; t < many.tensors.size(); ++t)
        if (many.tensors[t].role == Role::grad) {
          grads[many.tensors[t].name] = many.tensors[t].bytes;
          EXPECT_EQ(live_many.alloc_at[t], -1) << many.tensors[t].name;
          EXPECT_EQ(live_many.free_after[t], static_cast<int>(many.ops.size()))
              << many.tensors[t].name;
        }
      ASSERT_FALSE(grads.empty());

      int fresh = 0;
      for (const Op& op : many.ops)
        for (int out : op.outputs) {
          const Tensor& g = many.tensor(out);
          if (g.role != Role::grad) continue;
          const auto held = std::find_if(op.held.begin(), op.held.end(), [&](int id) {
            return many.tensor(id).name == g.name + ".new";
          });
          ASSERT_NE(held, op.held.end()) << op.name << " writes " << g.name;
          EXPECT_EQ(many.tensor(*held).bytes, g.bytes);
          EXPECT_EQ(many.tensor(*held).role, Role::transient);
          ++fresh;
        }
      EXPECT_GE(fresh, static_cast<int>(grads.size()));  // every gradient is written somewhere

      for (std::size_t t = 0; t < one.tensors.size(); ++t) {
        EXPECT_EQ(one.tensors[t].name.ends_with(".grad.new"), false) << one.tensors[t].name;
        if (one.tensors[t].role == Role::grad) {
          EXPECT_GE(live_one.alloc_at[t], 0) << one.tensors[t].name;
        }
      }
      EXPECT_GT(live_profile(many, live_many).peak, live_profile(one, live_one).peak);
    }
}

}  // namespace
}  // namespace vrambench

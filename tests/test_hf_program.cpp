// The hf step program's structure where no measurement covers it: gradient accumulation, and the
// training loop around the step (--loop).
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "config/run_config.h"
#include "core/error.h"
#include "model/families.h"
#include "program/program.h"
#include "program/schedule.h"

namespace vrambench {
namespace {

RunConfig hf_config(std::string_view preset, Precision dtype, std::int64_t grad_accum,
                    Finetune finetune = Finetune::full) {
  RunConfig cfg;
  cfg.model = find_preset(preset).model;
  cfg.framework = Framework::hf;
  cfg.dtype = dtype;
  cfg.seq = 64;
  cfg.batch = 2;
  cfg.grad_accum = grad_accum;
  cfg.finetune = finetune;
  validate(cfg);
  return cfg;
}

// Accumulating: every .grad is there before the first op and after the last, and the op that
// computes a gradient holds a new tensor of the same size (AccumulateGrad's new_grad) while
// writing into it; without accumulation there is no such tensor and the gradients start in
// backward. Under LoRA and QLoRA the gradients are the adapters' alone.
TEST(HfProgram, GradAccumulationKeepsGradientsAndHoldsEachNewGradient) {
  for (std::string_view preset : {"tiny", "tiny-llama"})
    for (Precision dtype : {Precision::fp32, Precision::bf16, Precision::amp_bf16})
      for (Finetune finetune : {Finetune::full, Finetune::lora, Finetune::qlora}) {
        SCOPED_TRACE(std::string(preset) + " " + std::string(to_string(dtype)) + " " +
                     std::string(to_string(finetune)));
        const Program one = build_program(hf_config(preset, dtype, 1, finetune), 0);
        const Program many = build_program(hf_config(preset, dtype, 4, finetune), 0);
        const Liveness live_one = compute_liveness(one);
        const Liveness live_many = compute_liveness(many);

        std::map<std::string, Bytes> grads;
        for (std::size_t t = 0; t < many.tensors.size(); ++t)
          if (many.tensors[t].role == Role::grad) {
            grads[many.tensors[t].name.str()] = many.tensors[t].bytes;
            if (finetune != Finetune::full) {
              EXPECT_TRUE(many.tensors[t].name.ends_with(".lora_A.grad") ||
                          many.tensors[t].name.ends_with(".lora_B.grad"))
                  << many.tensors[t].name;
            }
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

// --framework auto (the default) runs hf where the hf profile models the recipe and lean
// elsewhere; an explicit framework is kept, and an explicit hf refuses what it does not model.
TEST(HfProgram, AutoPicksHfWhereItModelsTheRecipeAndLeanElsewhere) {
  RunConfig cfg;
  cfg.model = find_preset("tiny").model;
  EXPECT_EQ(cfg.framework, Framework::automatic);
  EXPECT_EQ(framework_of(cfg), Framework::hf);
  EXPECT_EQ(hf_gap(cfg), "");
  struct Change {
    const char* what;
    void (*apply)(RunConfig&);
  };
  // Every fine-tuning recipe and optimizer is hf's: PEFT LoRA, bitsandbytes' 4-bit QLoRA and its
  // 8-bit and paged optimizers.
  for (const Change& c : std::initializer_list<Change>{
           {"lora", [](RunConfig& x) { x.finetune = Finetune::lora; }},
           {"qlora", [](RunConfig& x) { x.finetune = Finetune::qlora; }},
           {"qlora fp4",
            [](RunConfig& x) {
              x.finetune = Finetune::qlora;
              x.quant = QuantKind::fp4;
            }},
           {"8-bit", [](RunConfig& x) { x.optimizer = Optimizer::adamw_8bit; }},
           {"paged 8-bit", [](RunConfig& x) { x.optimizer = Optimizer::paged_adamw_8bit; }},
           {"paged 32-bit", [](RunConfig& x) { x.optimizer = Optimizer::paged_adamw; }}}) {
    SCOPED_TRACE(c.what);
    RunConfig x = cfg;
    c.apply(x);
    EXPECT_EQ(hf_gap(x), "");
    EXPECT_EQ(framework_of(x), Framework::hf);
    EXPECT_NO_THROW(validate(x));
    x.framework = Framework::hf;
    EXPECT_NO_THROW(validate(x));
    EXPECT_NO_THROW(build_program(x, 0));
  }
  // What transformers does not do, or hf does not model yet: lean, and an explicit hf refuses.
  for (const Change& c : std::initializer_list<Change>{
           {"int8 base",
            [](RunConfig& x) {
              x.finetune = Finetune::lora;
              x.quant = QuantKind::int8;
            }},
           {"selective", [](RunConfig& x) { x.recompute = Recompute::selective; }},
           {"layer scope", [](RunConfig& x) { x.scope = Scope::layer; }}}) {
    SCOPED_TRACE(c.what);
    RunConfig x = cfg;
    c.apply(x);
    EXPECT_NE(hf_gap(x), "");
    EXPECT_EQ(framework_of(x), Framework::lean);
    EXPECT_NO_THROW(validate(x));
    x.framework = Framework::hf;
    EXPECT_THROW(validate(x), UsageError);
    // Autocast is an hf precision: with auto it needs a recipe hf models, and says why not.
    x.framework = Framework::automatic;
    x.dtype = Precision::amp_bf16;
    try {
      validate(x);
      ADD_FAILURE() << "amp-bf16 accepted where auto picks lean";
    } catch (const UsageError& e) {
      EXPECT_NE(std::string(e.what()).find("auto chose lean"), std::string::npos) << e.what();
    }
  }
  RunConfig lean = cfg;
  lean.framework = Framework::lean;
  EXPECT_EQ(framework_of(lean), Framework::lean);
  // The default step is the hf one, whose program holds more than the lean one.
  const Liveness hf_live = compute_liveness(build_program(cfg, 0));
  EXPECT_GT(live_profile(build_program(cfg, 0), hf_live).peak,
            live_profile(build_program(lean, 0), compute_liveness(build_program(lean, 0))).peak);
}

// --loop native keeps the model's output object, and with it the logits in the model's dtype,
// through backward to the end of the step; Trainer (the default) drops them after the loss. A
// lean step has no output object: the option is refused there, auto's lean choice included.
TEST(HfProgram, NativeLoopKeepsTheLogitsToTheEndOfTheStep) {
  for (Precision dtype : {Precision::fp32, Precision::bf16}) {
    SCOPED_TRACE(to_string(dtype));
    RunConfig cfg = hf_config("tiny", dtype, 1);
    const Program trainer = build_program(cfg, 0);
    cfg.loop = Loop::native;
    validate(cfg);
    const Program native = build_program(cfg, 0);
    auto logits_live_until = [](const Program& p) {
      const Liveness live = compute_liveness(p);
      for (const Tensor& t : p.tensors)
        if (t.name.str() == "logits") return live.free_after[static_cast<std::size_t>(t.id)];
      return -1;
    };
    const int last = static_cast<int>(native.ops.size()) - 1;
    EXPECT_EQ(logits_live_until(native), last);
    EXPECT_LT(logits_live_until(trainer), last);
    const Bytes logits = cfg.batch * cfg.seq * cfg.model.vocab *
                         static_cast<Bytes>(dtype_size(activation_dtype(dtype)));
    // At the end of the step the logits are all that is added.
    const LiveProfile a = live_profile(trainer, compute_liveness(trainer));
    const LiveProfile b = live_profile(native, compute_liveness(native));
    EXPECT_EQ(b.live_after.at(static_cast<std::size_t>(last) - 1) -
                  a.live_after.at(static_cast<std::size_t>(last) - 1),
              logits);
    EXPECT_GE(b.peak, a.peak);
  }
  RunConfig lean = hf_config("tiny", Precision::bf16, 1);
  lean.loop = Loop::native;
  lean.framework = Framework::lean;
  EXPECT_THROW(validate(lean), UsageError);
  lean.framework = Framework::automatic;
  lean.recompute = Recompute::selective;  // auto runs lean for selective recomputation
  EXPECT_THROW(validate(lean), UsageError);
}

// A tied-embedding model (Llama 3.2, the small Qwen2.5s) has one embedding weight and, trained in
// full, one gradient for it, which the lm head's and the embedding's contributions are summed
// into; an untied one has two weights and two gradients.
TEST(HfProgram, ATiedEmbeddingModelKeepsOneEmbeddingGradient) {
  for (const char* preset : {"qwen2.5-0.5b", "llama3.2-1b", "llama3-8b"}) {
    RunConfig cfg;
    cfg.model = find_preset(preset).model;
    cfg.model.layers = 1;
    cfg.framework = Framework::hf;
    cfg.seq = 16;
    validate(cfg);
    const Program p = build_program(cfg, 0);
    int embedding_grads = 0, head_weights = 0;
    for (const Tensor& t : p.tensors) {
      if (t.role == Role::grad && (t.name.str() == "wte.grad" || t.name.str() == "lm_head.w.grad"))
        ++embedding_grads;
      if (t.role == Role::weight && t.name.str() == "lm_head.w") ++head_weights;
    }
    const bool tied = cfg.model.tied_embeddings;
    EXPECT_EQ(embedding_grads, tied ? 1 : 2) << preset;
    EXPECT_EQ(head_weights, tied ? 0 : 1) << preset;
  }
}

// What a training run makes on the way, as PyTorch does, and keeps (Tensor::lazy): the cuBLAS
// workspace of each thread that runs GEMMs, the main thread's at the first forward GEMM and the
// autograd engine's at the first GEMM of the backward (replays included), listed by their own
// thread's GEMMs and by nothing else; torch.optim's state, all of it at the first optimizer step,
// in the parameters' order; AdamW's foreach temporaries, one per parameter, from the first step
// op to the last. The lean step keeps one workspace of the step, made up front like its state.
TEST(HfProgram, ARunMakesWorkspacesAndOptimizerStateWhereTorchDoes) {
  for (Recompute recompute : {Recompute::none, Recompute::full}) {
    SCOPED_TRACE(std::string(to_string(recompute)));
    RunConfig cfg = hf_config("tiny-llama", Precision::bf16, 1);
    cfg.recompute = recompute;
    const Program p = build_program(cfg, 4 * MiB);
    const Liveness live = compute_liveness(p);
    const auto id_of = [&](std::string_view name) {
      for (const Tensor& t : p.tensors)
        if (t.name == name) return t.id;
      ADD_FAILURE() << "no tensor " << name;
      return -1;
    };
    const int main_ws = id_of("gemm.workspace"), autograd_ws = id_of("gemm.workspace.autograd");
    std::size_t backward = 0;  // the first op on the autograd thread
    while (backward < p.ops.size() && p.ops[backward].name != "ce.bwd") ++backward;
    ASSERT_LT(backward, p.ops.size());
    int first_main = -1, first_autograd = -1;
    for (std::size_t i = 0; i < p.ops.size(); ++i) {
      const auto& in = p.ops[i].inputs;
      const bool main = std::find(in.begin(), in.end(), main_ws) != in.end();
      const bool autograd = std::find(in.begin(), in.end(), autograd_ws) != in.end();
      EXPECT_FALSE(main && i >= backward) << p.ops[i].name;
      EXPECT_FALSE(autograd && i < backward) << p.ops[i].name;
      if (main && first_main < 0) first_main = static_cast<int>(i);
      if (autograd && first_autograd < 0) first_autograd = static_cast<int>(i);
    }
    ASSERT_GE(first_main, 0);
    ASSERT_GE(first_autograd, 0);
    for (int ws : {main_ws, autograd_ws}) {
      EXPECT_TRUE(p.tensor(ws).lazy);
      EXPECT_EQ(p.tensor(ws).bytes, 4 * MiB);
      EXPECT_NE(std::find(live.persistent.begin(), live.persistent.end(), ws),
                live.persistent.end());
    }
    const auto made_at = [&](int id) {
      for (std::size_t i = 0; i < p.ops.size(); ++i)
        for (int made : live.first_step_allocs[i])
          if (made == id) return static_cast<int>(i);
      return -1;
    };
    EXPECT_EQ(made_at(main_ws), first_main);
    EXPECT_EQ(made_at(autograd_ws), first_autograd);

    // The state: every moment made before the first step op, in the parameters' order.
    std::size_t first_step = 0;
    while (p.ops[first_step].kind != OpKind::adamw_step) ++first_step;
    std::vector<int> state;
    for (const Tensor& t : p.tensors)
      if (t.role == Role::optimizer_state) {
        EXPECT_TRUE(t.lazy) << t.name;
        EXPECT_FALSE(t.name.ends_with(".step")) << "a CPU tensor on the device: " << t.name;
        EXPECT_EQ(made_at(t.id), static_cast<int>(first_step)) << t.name;
        state.push_back(t.id);
      }
    const auto made = live.first_step_allocs[first_step];
    EXPECT_EQ(std::vector<int>(made.begin(), made.end()), state);
    // One square-root temporary per parameter, from the first step op to the last.
    int steps = 0, temps = 0;
    for (const Op& op : p.ops) steps += op.kind == OpKind::adamw_step;
    for (const Tensor& t : p.tensors) {
      if (!t.name.ends_with(".exp_avg_sq.sqrt")) continue;
      ++temps;
      EXPECT_EQ(live.alloc_at[static_cast<std::size_t>(t.id)], static_cast<int>(first_step));
      EXPECT_EQ(live.free_after[static_cast<std::size_t>(t.id)],
                static_cast<int>(first_step) + steps - 1);
    }
    EXPECT_EQ(temps, steps);
  }
  // lean: one workspace, not lazy, no per-thread copy.
  RunConfig lean = hf_config("tiny-llama", Precision::bf16, 1);
  lean.framework = Framework::lean;
  const Program p = build_program(lean, 4 * MiB);
  int workspaces = 0;
  for (const Tensor& t : p.tensors) {
    EXPECT_FALSE(t.lazy) << t.name;
    workspaces += t.name.starts_with("gemm.workspace");
  }
  EXPECT_EQ(workspaces, 1);
}

}  // namespace
}  // namespace vrambench

// Preference training (docs/preference.md): what --trainer dpo|kto and --reference accept, the
// step TRL runs (the pairs' 2B sequences, the reference and KL forwards under no_grad, the fused
// LM head), what each reference holds, the operands both executors read, the losses' values and
// the gradients of a step on the CPU against finite differences.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "common/preference_math.h"
#include "config/run_config.h"
#include "core/error.h"
#include "device/cpu_executor.h"
#include "device/host_runner.h"
#include "finite_difference.h"
#include "model/families.h"
#include "op/operands.h"
#include "program/program.h"
#include "program/signature.h"
#include "program_counts.h"

namespace vrambench {
namespace {

RunConfig preference_config(std::string_view preset, Trainer trainer, Finetune finetune,
                            Reference reference = Reference::automatic) {
  RunConfig cfg;
  cfg.model = find_preset(preset).model;
  cfg.framework = Framework::hf;
  cfg.seq = 16;
  cfg.batch = 2;
  cfg.trainer = trainer;
  cfg.finetune = finetune;
  cfg.reference = reference;
  cfg.lora_rank = 4;
  cfg.lora_alpha = 8;
  return cfg;
}

// ---- what is accepted ------------------------------------------------------------------------

TEST(PreferenceConfig, RefusesWhatIsNotModelledWithOneLine) {
  auto refused = [](RunConfig cfg, std::string_view words) {
    try {
      validate(cfg);
    } catch (const UsageError& e) {
      EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << e.what();
      EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos) << e.what();
      return;
    }
    ADD_FAILURE() << "accepted: " << words;
  };
  RunConfig sft = preference_config("tiny-llama", Trainer::sft, Finetune::lora, Reference::copy);
  refused(sft, "add --trainer dpo or kto");
  RunConfig lean = preference_config("tiny-llama", Trainer::dpo, Finetune::lora);
  lean.framework = Framework::lean;
  refused(lean, "use --framework hf");
  RunConfig dropout = preference_config("tiny", Trainer::kto, Finetune::full);
  dropout.dropout = 0.1;
  refused(dropout, "disable_dropout");
  refused(preference_config("tiny", Trainer::dpo, Finetune::full, Reference::adapters),
          "--reference adapters disables a PEFT model's adapters");
  RunConfig sharded = preference_config("tiny-llama", Trainer::dpo, Finetune::full);
  sharded.gpus = 4;
  sharded.strategy = Strategy::fsdp;
  refused(sharded, "one GPU");
  RunConfig native = preference_config("tiny-llama", Trainer::dpo, Finetune::lora);
  native.loop = Loop::native;
  refused(native, "--loop trainer");
  RunConfig one = preference_config("tiny-llama", Trainer::dpo, Finetune::lora);
  one.seq = 1;
  refused(one, "at least 2");
}

TEST(PreferenceConfig, TheReferenceDefaultsAsTrlDoes) {
  EXPECT_EQ(reference_of(preference_config("tiny", Trainer::dpo, Finetune::lora)),
            Reference::adapters);
  EXPECT_EQ(reference_of(preference_config("tiny", Trainer::dpo, Finetune::qlora)),
            Reference::adapters);
  EXPECT_EQ(reference_of(preference_config("tiny", Trainer::kto, Finetune::full)), Reference::copy);
  EXPECT_EQ(
      reference_of(preference_config("tiny", Trainer::kto, Finetune::full, Reference::precomputed)),
      Reference::precomputed);
  EXPECT_EQ(rows_per_sample(preference_config("tiny", Trainer::dpo, Finetune::full)), 2);
  EXPECT_EQ(rows_per_sample(preference_config("tiny", Trainer::kto, Finetune::full)), 1);
}

// ---- the step
// ------------------------------------------------------------------------------------

// DPO's batch is of pairs: one forward of 2B sequences through the policy, and through the
// reference under no_grad; the pairs grow the program by two sequences each.
TEST(PreferenceProgram, DpoReadsBothCompletionsOfAPairInOneForward) {
  RunConfig cfg = preference_config("tiny-llama", Trainer::dpo, Finetune::lora);
  validate(cfg);
  const Program p = build_program(cfg, 4096);
  EXPECT_EQ(p.tensor(find_tensor(p, "tokens")).shape, (Shape{4, 16}));
  EXPECT_EQ(p.tensor(find_tensor(p, "logps")).shape, (Shape{4, 16}));
  EXPECT_EQ(count_ops(p, OpKind::logprob_fwd), 2);  // the policy's and the reference's
  EXPECT_EQ(count_ops(p, OpKind::logprob_bwd), 1);
  EXPECT_EQ(count_ops(p, OpKind::preference_loss), 1);
  EXPECT_EQ(count_ops(p, OpKind::cross_entropy_fwd), 0);
  // No [M,V] logits anywhere: the head's tile is the largest vocabulary-wide tensor.
  for (const Tensor& t : p.tensors)
    EXPECT_FALSE(t.shape.size() == 2 && t.shape[0] == 64 && t.shape[1] == cfg.model.vocab)
        << t.name;
  RunConfig three = cfg;
  three.batch = 3;
  const Program q = build_program(three, 4096);
  EXPECT_EQ(q.tensor(find_tensor(q, "tokens")).shape, (Shape{6, 16}));
}

// KTO: the policy under no_grad over the KL sequences, then with grad over the examples, then the
// reference over both, in that order.
TEST(PreferenceProgram, KtoRunsItsKlForwardFirstAndTheReferenceAfterThePolicy) {
  RunConfig cfg = preference_config("tiny-llama", Trainer::kto, Finetune::lora);
  validate(cfg);
  const Program p = build_program(cfg, 4096);
  std::vector<std::string> heads;
  for (const Op& op : p.ops)
    if (op.kind == OpKind::logprob_fwd) heads.push_back(op.name.str());
  EXPECT_EQ(heads, (std::vector<std::string>{"lm_head.logprob.kl", "lm_head.logprob",
                                             "lm_head.logprob.ref_kl", "lm_head.logprob.ref"}));
  EXPECT_EQ(p.tensor(find_tensor(p, "tokens")).shape, (Shape{2, 16}));
  // The adapters are off in the reference's forwards and on in the KL one.
  int ref_lora = 0, kl_lora = 0;
  for (const Op& op : p.ops) {
    if (op.kind != OpKind::lora_fwd) continue;
    ref_lora += op.name.ends_with(".ref") || op.name.ends_with(".ref_kl");
    kl_lora += op.name.ends_with(".kl") && !op.name.ends_with(".ref_kl");
  }
  EXPECT_EQ(ref_lora, 0);
  EXPECT_GT(kl_lora, 0);
}

// What each reference holds: a copy is one more model (the policy's weights again, frozen, in its
// dtype); the adapters disabled and precomputed log-probabilities hold no weights beyond SFT's.
TEST(PreferenceProgram, ACopyHoldsOneMoreModelAndTheAdaptersNone) {
  for (std::string_view preset : {"tiny", "tiny-llama"})
    for (Trainer trainer : {Trainer::dpo, Trainer::kto}) {
      RunConfig sft = preference_config(preset, Trainer::sft, Finetune::full);
      RunConfig full = preference_config(preset, trainer, Finetune::full);
      validate(sft);
      validate(full);
      const Program s = build_program(sft, 4096), f = build_program(full, 4096);
      EXPECT_EQ(role_bytes(f, Role::weight) - role_bytes(s, Role::weight),
                role_bytes(s, Role::weight))
          << preset << " " << to_string(trainer);
      Bytes reference = 0;
      for (const Tensor& t : f.tensors)
        if (t.component == MemoryComponent::reference_weights) reference += t.bytes;
      EXPECT_EQ(reference, role_bytes(s, Role::weight));
      // Same gradients and optimizer state: the copy is frozen.
      EXPECT_EQ(role_bytes(f, Role::grad), role_bytes(s, Role::grad));
      EXPECT_EQ(role_bytes(f, Role::optimizer_state), role_bytes(s, Role::optimizer_state));
      for (Reference r : {Reference::adapters, Reference::precomputed}) {
        RunConfig lora_sft = preference_config(preset, Trainer::sft, Finetune::lora);
        RunConfig lora = preference_config(preset, trainer, Finetune::lora, r);
        validate(lora);
        const Program ls = build_program(lora_sft, 4096), l = build_program(lora, 4096);
        EXPECT_EQ(role_bytes(l, Role::weight), role_bytes(ls, Role::weight))
            << preset << " " << to_string(trainer) << " " << to_string(r);
      }
    }
}

// Nothing a no_grad forward makes outlives it: the reference's tensors are all freed by the loss,
// and precomputed log-probabilities run no reference forward at all.
TEST(PreferenceProgram, TheNoGradForwardsKeepNothingForTheBackward) {
  for (Reference r : {Reference::copy, Reference::adapters, Reference::precomputed}) {
    RunConfig cfg = preference_config("tiny-llama", Trainer::kto, Finetune::lora, r);
    cfg.recompute = Recompute::full;
    validate(cfg);
    const Program p = build_program(cfg, 4096);
    const Liveness live = compute_liveness(p);
    int loss_op = -1;
    for (std::size_t i = 0; i < p.ops.size(); ++i)
      if (p.ops[i].kind == OpKind::preference_loss) loss_op = static_cast<int>(i);
    ASSERT_GE(loss_op, 0);
    int no_grad = 0;
    for (const Tensor& t : p.tensors) {
      // What they leave is their log-probabilities, which the loss and its backward read.
      if (t.component != MemoryComponent::reference_forward || t.name.starts_with("logps"))
        continue;
      ++no_grad;
      EXPECT_LE(live.free_after[static_cast<std::size_t>(t.id)], loss_op) << t.name;
    }
    // The KL forward always runs (the policy's); the reference's only where not precomputed.
    int ref_heads = 0;
    for (const Op& op : p.ops)
      ref_heads +=
          op.kind == OpKind::logprob_fwd && op.name.str().find(".ref") != std::string::npos;
    EXPECT_EQ(ref_heads, r == Reference::precomputed ? 0 : 2) << to_string(r);
    EXPECT_GT(no_grad, 0);
  }
}

// Every preference step over the presets, dtypes, recipes and references decodes operand for
// operand as both executors read it, the fused head's tile and rows included.
TEST(PreferenceProgram, EveryStepIsReadOperandForOperand) {
  int heads = 0;
  for (const char* preset :
       {"tiny", "tiny-llama", "tiny-qwen3", "tiny-gemma2", "tiny-phi3", "tiny-mixtral"})
    for (Precision dtype : {Precision::fp32, Precision::bf16, Precision::amp_bf16})
      for (Finetune finetune : {Finetune::full, Finetune::lora, Finetune::qlora})
        for (Trainer trainer : {Trainer::dpo, Trainer::kto})
          for (Reference reference : {Reference::copy, Reference::adapters, Reference::precomputed})
            for (Recompute recompute : {Recompute::none, Recompute::full}) {
              RunConfig c = preference_config(preset, trainer, finetune, reference);
              c.device = parse_device("cuda");
              c.dtype = dtype;
              c.recompute = recompute;
              c.attention = Attention::flash;
              try {
                validate(c);
              } catch (const UsageError&) {
                continue;
              }
              const Program p = build_program(c, 64);
              const std::vector<void*> data(p.tensors.size(),
                                            reinterpret_cast<void*>(std::uintptr_t{64}));
              for (std::size_t i = 0; i < p.ops.size(); ++i) {
                const Operands a = decode_operands(p, i, data);
                const Operand* o = operand_of_another_dtype(a);
                ASSERT_EQ(o, nullptr) << preset << " " << p.ops[i].name.str() << " reads "
                                      << o->tensor->name.str() << " in another dtype";
                if (a.op.kind != OpKind::logprob_fwd && a.op.kind != OpKind::logprob_bwd) continue;
                LogprobOperands d;
                ASSERT_NO_THROW(d = logprob_operands(a)) << preset << " " << p.ops[i].name.str();
                EXPECT_EQ(d.x_rows != nullptr,
                          dtype == Precision::amp_bf16 ||
                              (finetune == Finetune::qlora && dtype == Precision::bf16))
                    << preset << " " << p.ops[i].name.str();
                ++heads;
              }
            }
  EXPECT_GT(heads, 500);
}

// ---- the losses
// ----------------------------------------------------------------------------------

TEST(PreferenceLoss, DpoAndKtoAtTheirKnownPoints) {
  // Equal log-ratios: DPO's loss is log 2 a pair, its gradient -+beta/2 over the pairs.
  const double zero[4] = {0, 0, 0, 0};
  kmath::PreferenceRows dpo{zero, 4, 0.0, 0.1, true};
  EXPECT_NEAR(kmath::preference_loss(dpo), std::log(2.0), 1e-12);
  EXPECT_NEAR(kmath::preference_grad(dpo, 0), -0.1 * 0.5 / 2, 1e-12);
  EXPECT_NEAR(kmath::preference_grad(dpo, 3), 0.1 * 0.5 / 2, 1e-12);
  // KTO at r = z: every example's loss is 1/2; the desirable ones' gradient pushes r up.
  kmath::PreferenceRows kto{zero, 4, 0.0, 0.1, false};
  EXPECT_NEAR(kmath::preference_loss(kto), 0.5, 1e-12);
  EXPECT_LT(kmath::preference_grad(kto, 0), 0.0);
  EXPECT_GT(kmath::preference_grad(kto, 1), 0.0);
  // A chosen completion far ahead of its rejected one costs almost nothing.
  const double apart[2] = {100.0, -100.0};
  kmath::PreferenceRows easy{apart, 2, 0.0, 0.1, true};
  EXPECT_LT(kmath::preference_loss(easy), 1e-8);
}

// The directional derivative of the loss along a random direction through weights of each kind
// against central differences, on the CPU in fp32: the fused head's log-probabilities and their
// backward, the DPO and KTO losses, through the policy (its adapters under LoRA), with the
// reference's and KL forwards beside.
TEST(PreferenceGradients, MatchFiniteDifferences) {
  for (std::string_view preset : {"tiny", "tiny-llama"})
    for (Trainer trainer : {Trainer::dpo, Trainer::kto})
      for (Finetune finetune : {Finetune::full, Finetune::lora}) {
        RunConfig cfg = preference_config(preset, trainer, finetune);
        cfg.dtype = Precision::fp32;
        GradientStep step(cfg, 7);
        const auto& grads = step.grads;
        ASSERT_FALSE(grads.empty());
        // Two gradients of each step: the head's (full) or an adapter's, and a first-layer one.
        std::vector<std::string> names;
        for (const auto& [name, g] : grads)
          if (name.find("lm_head") != std::string::npos || name.find("wte") != std::string::npos ||
              name.find("layer0") != std::string::npos)
            names.push_back(name.substr(0, name.size() - 5));  // less ".grad"
        ASSERT_FALSE(names.empty());
        double largest = 0.0;  // the check compares something: some gradient is not zero
        for (const std::string& name : names) {
          const Directional d =
              directional_check(step.run, step.program, name, grads.at(name + ".grad"), 1e-3);
          const double along = d.along, numeric = d.numeric;
          largest = std::max(largest, std::fabs(along));
          EXPECT_NEAR(along, numeric, 1e-4 + 0.03 * std::fabs(numeric))
              << preset << " " << to_string(trainer) << " " << to_string(finetune) << " " << name;
        }
        EXPECT_GT(largest, 1e-4) << preset << " " << to_string(trainer) << " "
                                 << to_string(finetune);
      }
}

}  // namespace
}  // namespace vrambench

// BatchScaledProgram: the program a search replays at each batch, rescaled after one build, is
// the program build_program gives at that batch (every tensor's bytes, shape, role and name, every
// op with its attributes, the liveness), over every architecture, attention, recompute, scope,
// optimizer and precision and the fine-tuning recipes, and replays to the same result; measure()
// on sim, which replays rescaled programs, gets the trials of programs built per batch.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "alloc/allocator.h"
#include "core/error.h"
#include "core/quant_layout.h"
#include "model/families.h"
#include "device/device.h"
#include "device/sources.h"
#include "model/families.h"
#include "program/scaled_program.h"
#include "program/signature.h"
#include "measure/measure.h"
#include "measure/trial.h"
#include "program/scaled_program.h"

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
              cfg.framework = Framework::lean;
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

// Every field of every tensor and op, the liveness and the program's own fields.
void expect_same(const Program& scaled, const Liveness& scaled_liveness, const Program& built) {
  ASSERT_EQ(scaled.tensors.size(), built.tensors.size());
  ASSERT_EQ(scaled.ops.size(), built.ops.size());
  for (std::size_t i = 0; i < built.tensors.size(); ++i) {
    const Tensor& s = scaled.tensors[i];
    const Tensor& b = built.tensors[i];
    EXPECT_EQ(s.bytes, b.bytes) << b.name;
    EXPECT_EQ(s.shape, b.shape) << b.name;
    EXPECT_EQ(s.name, b.name);
    EXPECT_EQ(s.role, b.role) << b.name;
    EXPECT_EQ(s.dtype, b.dtype) << b.name;
    EXPECT_EQ(s.id, b.id) << b.name;
    EXPECT_TRUE(s == b) << b.name;
  }
  for (std::size_t i = 0; i < built.ops.size(); ++i) {
    const Op& s = scaled.ops[i];
    const Op& b = built.ops[i];
    EXPECT_EQ(s.name, b.name);
    EXPECT_EQ(s.kind, b.kind) << b.name;
    EXPECT_EQ(s.inputs, b.inputs) << b.name;
    EXPECT_EQ(s.outputs, b.outputs) << b.name;
    EXPECT_EQ(s.grad_scale, b.grad_scale) << b.name;
    EXPECT_TRUE(s == b) << b.name;  // the attributes too
  }
  const Liveness liveness = compute_liveness(built);
  EXPECT_EQ(scaled_liveness.alloc_at, liveness.alloc_at);
  EXPECT_EQ(scaled_liveness.free_after, liveness.free_after);
  EXPECT_EQ(scaled_liveness.allocs_before, liveness.allocs_before);
  EXPECT_EQ(scaled_liveness.frees_after, liveness.frees_after);
  EXPECT_EQ(scaled_liveness.persistent, liveness.persistent);
  EXPECT_EQ(scaled.config, built.config);
  EXPECT_EQ(scaled.loss_tensor, built.loss_tensor);
  EXPECT_EQ(scaled.output_grad_tensor, built.output_grad_tensor);
  EXPECT_EQ(scaled.batch_dims, built.batch_dims);
}

TEST(BatchScaledProgram, EveryBatchMatchesTheBuiltProgramAfterOneBuild) {
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
    EXPECT_EQ(sizes.builds(), 1);
  }
}

// The fine-tuning recipes: full training, lora and qlora over plain, int8 and 4-bit (nested or
// not) frozen bases, with AdamW, 8-bit, paged and paged 8-bit state (a rank whose adapters pass
// the paged threshold on gpt2), LoRA dropout and model dropout (their masks),
// gradient accumulation, recompute none and full, eager and flash, fp16 (whose loss scale moves
// with the batch) and bf16.
std::vector<RunConfig> finetune_configurations() {
  std::vector<RunConfig> out;
  int i = 0;
  for (const char* preset : {"tiny", "tiny-llama", "gpt2"})
    for (Finetune finetune : {Finetune::full, Finetune::lora, Finetune::qlora})
      for (Optimizer optimizer : {Optimizer::adamw, Optimizer::adamw_8bit, Optimizer::paged_adamw,
                                  Optimizer::paged_adamw_8bit})
        for (Recompute recompute : {Recompute::none, Recompute::full})
          for (Attention attention : {Attention::eager, Attention::flash})
            for (Precision dtype : {Precision::fp16, Precision::bf16}) {
              RunConfig cfg;
              cfg.framework = Framework::lean;
              cfg.model = find_preset(preset).model;
              cfg.seq = 128;
              cfg.finetune = finetune;
              cfg.optimizer = optimizer;
              cfg.recompute = recompute;
              cfg.attention = attention;
              cfg.dtype = dtype;
              // The options below alternate over the grid so that each meets every recipe.
              cfg.dropout = i % 3 == 0 ? 0.1 : 0.0;
              if (finetune != Finetune::full) {
                cfg.lora_dropout = i % 2 == 0 ? 0.05 : 0.0;
                cfg.lora_rank = i % 4 < 2 ? 16 : 160;  // 160 x 768: paged adapters on gpt2
                cfg.lora_targets = parse_lora_targets(i % 5 == 0 ? "attn" : "all-linear");
              }
              if (finetune == Finetune::lora)
                cfg.quant = i % 3 == 1 ? QuantKind::int8 : QuantKind::none;
              if (finetune == Finetune::qlora) {
                cfg.quant = i % 3 == 2 ? QuantKind::fp4 : QuantKind::nf4;
                cfg.double_quant = i % 2 == 0 ? Toggle::on : Toggle::off;
              }
              cfg.grad_accum = i % 7 == 3 ? 2 : 1;
              validate(cfg);
              out.push_back(cfg);
              ++i;
            }
  return out;
}

std::string describe(const RunConfig& cfg) {
  return fmt::format("{} {} {} q={} dq={} {} {} {} {} rank {} lora_dropout {} dropout {} accum {}",
                     cfg.model.name, to_string(cfg.finetune), to_string(cfg.optimizer),
                     to_string(cfg.quant), to_string(cfg.double_quant), to_string(cfg.recompute),
                     to_string(cfg.attention), to_string(cfg.dtype), to_string(cfg.lora_targets),
                     cfg.lora_rank, cfg.lora_dropout, cfg.dropout, cfg.grad_accum);
}

TEST(BatchScaledProgram, FineTuningProgramsMatchTheBuiltProgramAtEveryBatch) {
  constexpr Bytes kWorkspace = 32 * MiB;
  const std::vector<RunConfig> configs = finetune_configurations();
  int with_paged = 0, with_quant = 0, with_adapters = 0, with_masks = 0;
  for (const RunConfig& cfg : configs) {
    SCOPED_TRACE(describe(cfg));
    BatchScaledProgram sizes(cfg, kWorkspace);
    // In a search's order: the hint, the batch after it, then batches below and above (fp16's
    // loss scale differs between them).
    for (std::int64_t batch : {37, 38, 1, 2, 300, 36, 4097}) {
      RunConfig at = cfg;
      at.batch = batch;
      const Program built = build_program(at, kWorkspace);
      const Program& scaled = sizes.at(batch);  // before liveness(), which is of the last
      expect_same(scaled, sizes.liveness(), built);
      if (batch == 1)
        for (const Tensor& t : built.tensors) {
          with_paged += t.role == Role::paged_optimizer_state;
          with_quant += t.name.ends_with(".w.weight");
          with_adapters += t.name.ends_with(".lora_xa");
          with_masks += t.name.ends_with(".mask");
        }
    }
    EXPECT_EQ(sizes.builds(), 1);
  }
  // The grid holds what it is meant to.
  EXPECT_GT(with_paged, 0);
  EXPECT_GT(with_quant, 0);
  EXPECT_GT(with_adapters, 0);
  EXPECT_GT(with_masks, 0);
}

// The hf programs (framework hf): both architectures, every precision, eager and flash, recompute
// none and full, with and without dropout, an optimizer and gradient accumulation.
std::vector<RunConfig> hf_configurations() {
  std::vector<RunConfig> out;
  int i = 0;
  for (const char* preset : {"tiny", "tiny-llama"})
    for (Precision dtype : {Precision::fp32, Precision::fp16, Precision::bf16, Precision::amp_bf16})
      for (Attention attention : {Attention::eager, Attention::flash})
        for (Recompute recompute : {Recompute::none, Recompute::full}) {
          RunConfig cfg;
          cfg.model = find_preset(preset).model;
          cfg.framework = Framework::hf;
          cfg.seq = 128;
          cfg.dtype = dtype;
          cfg.attention = attention;
          cfg.recompute = recompute;
          cfg.dropout = i % 2 == 0 ? 0.1 : 0.0;
          cfg.optimizer = i % 3 == 0 ? Optimizer::none : Optimizer::adamw;
          cfg.grad_accum = i % 5 == 1 ? 2 : 1;
          ++i;
          validate(cfg);
          out.push_back(cfg);
        }
  return out;
}

// Their extra tensors (kv caches, autocast copies, fp32 loss intermediates, AccumulateGrad's new
// gradients) and the ops' held lists rescale like the rest.
TEST(BatchScaledProgram, HfProgramsMatchTheBuiltProgramAtEveryBatch) {
  constexpr Bytes kWorkspace = 32 * MiB;
  const std::vector<RunConfig> configs = hf_configurations();
  for (const RunConfig& cfg : configs) {
    SCOPED_TRACE(describe(cfg) + " hf");
    BatchScaledProgram sizes(cfg, kWorkspace);
    for (std::int64_t batch : {37, 38, 1, 2, 300, 36}) {
      SCOPED_TRACE(batch);
      RunConfig at = cfg;
      at.batch = batch;
      const Program& scaled = sizes.at(batch);  // before liveness(), which is of the last
      expect_same(scaled, sizes.liveness(), build_program(at, kWorkspace));
    }
    // gpt2-style eager attention keeps other tensors at batch 1: built apart.
    const bool apart = structure_key(cfg, 1) != structure_key(cfg, 2);
    EXPECT_EQ(apart, cfg.model.arch == Arch::gpt && cfg.attention == Attention::eager);
    EXPECT_EQ(sizes.builds(), apart ? 2 : 1);
  }
  EXPECT_EQ(configs.size(), 32u);
}

// The builders say which dimensions hold the batch, and only those: between two builds exactly
// the marked dimensions differ, each by its per-sample growth times the batches between, one
// such dimension a tensor at most (so that its bytes are a line), listed in tensor order.
TEST(BatchScaledProgram, BuildersMarkEveryDimensionThatHoldsTheBatchAndNoOther) {
  std::vector<RunConfig> configs = configurations();
  for (const std::vector<RunConfig>& more : {finetune_configurations(), hf_configurations()})
    configs.insert(configs.end(), more.begin(), more.end());
  int marked = 0;
  for (const RunConfig& cfg : configs) {
    SCOPED_TRACE(describe(cfg) + " " + std::string(to_string(cfg.scope)));
    RunConfig at3 = cfg, at8 = cfg;
    at3.batch = 3;
    at8.batch = 8;
    const Program a = build_program(at3, 32 * MiB);
    const Program b = build_program(at8, 32 * MiB);
    ASSERT_EQ(a.tensors.size(), b.tensors.size());
    EXPECT_EQ(a.batch_dims, b.batch_dims);
    std::size_t next = 0;  // the next mark, in tensor order
    for (std::size_t i = 0; i < a.tensors.size(); ++i) {
      const Tensor& ta = a.tensors[i];
      const Tensor& tb = b.tensors[i];
      ASSERT_EQ(ta.shape.size(), tb.shape.size()) << ta.name;
      int marks = 0;
      for (std::size_t d = 0; d < ta.shape.size(); ++d) {
        std::int64_t per_sample = 0;
        if (next < a.batch_dims.size() && a.batch_dims[next].tensor == static_cast<int>(i) &&
            a.batch_dims[next].dim == static_cast<int>(d)) {
          per_sample = a.batch_dims[next++].per_sample;
          ++marks;
          ++marked;
        }
        EXPECT_EQ(tb.shape[d] - ta.shape[d], 5 * per_sample) << ta.name << " dim " << d;
      }
      EXPECT_LE(marks, 1) << ta.name;
    }
    EXPECT_EQ(next, a.batch_dims.size()) << "marks out of tensor order, or of no dimension";
  }
  EXPECT_GT(marked, 0);
}

// What the tensors of a fine-tuning program look like against the batch: quantised weights, their
// constants and the adapters do not grow with it, x A^T is [B, S, r], the dequantised weight
// transients do not grow, paged state neither; the rescaled program has them all as built.
TEST(BatchScaledProgram, FineTuningTensorsGrowWithTheBatchOnlyWhereTheyHoldIt) {
  RunConfig cfg;
  cfg.framework = Framework::lean;
  cfg.model = find_preset("tiny-llama").model;
  cfg.seq = 64;
  cfg.finetune = Finetune::qlora;
  cfg.optimizer = Optimizer::paged_adamw_8bit;
  cfg.lora_rank = 8;
  cfg.lora_dropout = 0.1;
  cfg.dropout = 0.1;
  validate(cfg);
  BatchScaledProgram sizes(cfg, 0);
  sizes.at(2);
  sizes.at(3);
  const Program one = sizes.at(1);  // rescaled, as every batch after the first
  const Program& five = sizes.at(5);
  EXPECT_EQ(sizes.builds(), 1);
  ASSERT_EQ(one.tensors.size(), five.tensors.size());
  int checked = 0;
  for (std::size_t i = 0; i < one.tensors.size(); ++i) {
    const Tensor& a = one.tensors[i];
    const Tensor& b = five.tensors[i];
    const bool quant_part = a.name.find(".w.") != std::string::npos;  // codes, absmax, dq
    if (a.role == Role::weight || a.role == Role::optimizer_state ||
        a.role == Role::paged_optimizer_state || a.role == Role::grad || quant_part) {
      EXPECT_EQ(a.bytes, b.bytes) << a.name;
      ++checked;
    }
    if (a.name.ends_with(".lora_xa")) {
      EXPECT_EQ(a.shape, (std::vector<std::int64_t>{1, 64, 8})) << a.name;
      EXPECT_EQ(b.shape, (std::vector<std::int64_t>{5, 64, 8})) << a.name;
      EXPECT_EQ(b.bytes, 5 * a.bytes) << a.name;
    }
    if (a.name.ends_with(".mask")) {
      EXPECT_EQ(b.bytes, 5 * a.bytes) << a.name;
    }
  }
  EXPECT_GT(checked, 0);
  RunConfig at = cfg;
  at.batch = 5;
  expect_same(five, sizes.liveness(), build_program(at, 0));
}

// measure() on sim replays rescaled programs; every trial it reports (peaks by role, paged bytes,
// the OOM) and the replay of the first failure are what programs built per batch give.
TEST(BatchScaledProgram, MeasuredFineTuningTrialsMatchProgramsBuiltPerBatch) {
  // tiny-llama's recipes, and a third of gpt2's (every third: each value of each option).
  std::vector<RunConfig> configs;
  int gpt2 = 0;
  for (const RunConfig& cfg : finetune_configurations())
    if (cfg.model.name == "tiny-llama" || (cfg.model.name == "gpt2" && gpt2++ % 3 == 0))
      configs.push_back(cfg);
  int paged = 0;
  for (RunConfig cfg : configs) {
    cfg.device = parse_device("sim:rtx4090");
    SCOPED_TRACE(describe(cfg));
    const Device device = make_device(cfg);
    const Measurement m = measure(cfg, device, {.max_batch = 4096});
    ASSERT_FALSE(m.trials.empty());
    for (const auto& [batch, trial] : m.trials) {
      const TrialResult built =
          run_trial(cfg, device, batch, device.info.tensor_capacity(), nullptr);
      EXPECT_EQ(trial.fit, built.fit) << batch;
      EXPECT_EQ(trial.device_peak, built.device_peak) << batch;
      EXPECT_EQ(trial.paged_bytes, built.paged_bytes) << batch;
      EXPECT_TRUE(trial == built) << batch;  // every field: peaks by role, the OOM, the peak op
      paged += trial.paged_bytes > 0;
    }
    if (m.next_needed) {
      const TrialResult built = run_trial(cfg, simulated(device.info), m.search.max_batch + 1,
                                          std::numeric_limits<Bytes>::max() / 4, nullptr);
      EXPECT_TRUE(*m.next_needed == built);
      EXPECT_EQ(m.next_needed->paged_bytes, built.paged_bytes);
    }
  }
  EXPECT_GT(paged, 0);
}

TEST(BatchScaledProgram, ReplaysToTheSameTrialAsTheBuiltProgram) {
  RunConfig cfg;
  cfg.framework = Framework::lean;
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
  cfg.framework = Framework::lean;
  cfg.model = find_preset("gpt2").model;
  BatchScaledProgram sizes(cfg, 0);
  sizes.at(1);
  sizes.at(2);
  constexpr std::int64_t kHuge = std::numeric_limits<std::int64_t>::max() / 2;
  RunConfig at = cfg;
  at.batch = kHuge;
  EXPECT_THROW(build_program(at, 0), UsageError);
  EXPECT_THROW(sizes.at(kHuge), UsageError);
  // And the batches after it are still right.
  at.batch = 5;
  const Program& scaled = sizes.at(5);
  expect_same(scaled, sizes.liveness(), build_program(at, 0));
}

// Where a program's marks give no lines (two in one tensor, one past its tensor's rank or
// growing past its size) or its loss scale is not the one the config gives, every batch is built:
// each batch is the builder's program at that batch, never one rescaled from wrong lines.
TEST(BatchScaledProgram, MarksThatAreNoLinesBuildEveryBatch) {
  RunConfig cfg;
  cfg.framework = Framework::lean;
  cfg.model = find_preset("tiny").model;
  cfg.seq = 64;
  cfg.dtype = Precision::fp16;  // a loss scale on the loss backward and the optimizer step
  validate(cfg);
  using Spoil = void (*)(Program&);
  const std::vector<std::pair<std::string, Spoil>> spoilers{
      {"two marks in one tensor",
       [](Program& p) {
         BatchDim twice = p.batch_dims.front();
         twice.dim = twice.dim == 0 ? 1 : 0;
         p.batch_dims.insert(p.batch_dims.begin() + 1, twice);
       }},
      {"a mark past its tensor's rank",
       [](Program& p) {
         BatchDim& d = p.batch_dims.back();
         d.dim = static_cast<int>(p.tensors[static_cast<std::size_t>(d.tensor)].shape.size());
       }},
      {"a mark growing past its size",
       [](Program& p) {
         BatchDim& d = p.batch_dims.front();
         d.per_sample =
             p.tensors[static_cast<std::size_t>(d.tensor)].shape[static_cast<std::size_t>(d.dim)] +
             1;
       }},
      {"a loss scale that is not the config's",
       [](Program& p) {
         for (Op& op : p.ops)
           if (signature(op.kind).attrs.grad_scale) op.grad_scale *= 2.0f;
       }},
  };
  // The unspoilt builder is rescaled after its first build, which is what makes the rest a test.
  {
    BatchScaledProgram sizes(cfg, 0);
    for (std::int64_t batch : {3, 1, 7}) sizes.at(batch);
    ASSERT_EQ(sizes.builds(), 1);
  }
  for (const auto& [what, spoil] : spoilers) {
    SCOPED_TRACE(what);
    int spoilt = 0;
    auto builder = [&, spoil = spoil](const RunConfig& at, Bytes workspace) {
      Program p = build_program(at, workspace);
      auto marks_and_scales = [](const Program& q) {
        std::vector<float> scales;
        for (const Op& op : q.ops) scales.push_back(op.grad_scale);
        return std::make_pair(q.batch_dims, scales);
      };
      const auto before = marks_and_scales(p);
      spoil(p);
      if (marks_and_scales(p) != before) ++spoilt;
      return p;
    };
    BatchScaledProgram sizes(cfg, 0, builder);
    int calls = 0;
    for (std::int64_t batch : {3, 1, 7, 3}) {
      const Program& got = sizes.at(batch);
      ++calls;
      EXPECT_EQ(sizes.builds(), calls);
      RunConfig at = cfg;
      at.batch = batch;
      expect_same(got, sizes.liveness(), builder(at, 0));
    }
    EXPECT_EQ(spoilt, 2 * calls);  // each spoiler changed every program it was given
  }
}

}  // namespace
}  // namespace vrambench

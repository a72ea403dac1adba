// The step program builders: liveness invariants over every recipe, Korthikanti's activation count
// for a GPT block, what each recompute mode keeps, parameter bytes, tied embeddings, GQA shapes,
// and the printed listing.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <set>
#include <span>
#include <string>
#include <vector>

#include "config/run_config.h"
#include "core/error.h"
#include "model/families.h"
#include "model/weights.h"
#include "program/program.h"
#include "program/schedule.h"
#include "program_counts.h"
#include "report/program_table.h"

namespace vrambench {
namespace {

bool whole_step_role(Role r) {
  return r == Role::weight || r == Role::master_weight || r == Role::optimizer_state ||
         r == Role::input;
}

RunConfig tiny_config(Arch arch) {
  RunConfig cfg;
  cfg.framework = Framework::lean;
  cfg.model.arch = arch;
  cfg.model.hidden = 16;
  cfg.model.heads = 4;
  cfg.model.kv_heads = arch == Arch::llama ? 2 : 4;
  cfg.model.layers = 2;
  cfg.model.ffn = arch == Arch::llama ? 40 : 64;
  cfg.model.vocab = 11;
  cfg.model.max_positions = arch == Arch::gpt ? 8 : 1;
  cfg.model.tied_embeddings = arch == Arch::gpt;
  cfg.seq = 8;
  cfg.batch = 2;
  return cfg;
}

// The GPT block of the brief: B=2, S=64, H=64, A=4, F=4H, bf16, 3 layers so that block 1 has a
// block on each side.
RunConfig korthikanti_config() {
  RunConfig cfg;
  cfg.framework = Framework::lean;
  cfg.model.arch = Arch::gpt;
  cfg.model.hidden = 64;
  cfg.model.heads = 4;
  cfg.model.kv_heads = 4;
  cfg.model.layers = 3;
  cfg.model.ffn = 256;
  cfg.model.vocab = 101;
  cfg.model.max_positions = 64;
  cfg.model.tied_embeddings = true;
  cfg.seq = 64;
  cfg.batch = 2;
  cfg.dtype = Precision::bf16;
  cfg.attention = Attention::eager;
  cfg.recompute = Recompute::none;
  cfg.dropout = 0.1;
  return cfg;
}

int find_op(const Program& p, std::string_view name) {
  for (std::size_t i = 0; i < p.ops.size(); ++i)
    if (p.ops[i].name == name) return static_cast<int>(i);
  ADD_FAILURE() << "no op named " << name;
  return -1;
}

int find_tensor(const Program& p, std::string_view name) {
  for (const Tensor& t : p.tensors)
    if (t.name == name) return t.id;
  ADD_FAILURE() << "no tensor named " << name;
  return -1;
}

bool live_after(const Liveness& live, int id, int op) {
  const auto t = static_cast<std::size_t>(id);
  return live.alloc_at[t] <= op && live.free_after[t] > op;
}

bool is_gemm(OpKind k) {
  return k == OpKind::linear_fwd || k == OpKind::linear_bwd || k == OpKind::attn_scores ||
         k == OpKind::attn_values || k == OpKind::attn_values_bwd || k == OpKind::attn_scores_bwd;
}

bool sums_rows(OpKind k) {
  return k == OpKind::layernorm_bwd || k == OpKind::rmsnorm_bwd || k == OpKind::embedding_bwd;
}

// Every structural property a builder must keep, whatever the recipe.
void check_invariants(const Program& p, const RunConfig& cfg, Bytes gemm_workspace) {
  const Liveness live = compute_liveness(p);
  const std::size_t n_tensors = p.tensors.size();
  std::vector<int> allocs(n_tensors, 0), frees(n_tensors, 0), uses(n_tensors, 0);
  std::vector<bool> defined(n_tensors, false);
  for (std::size_t t = 0; t < n_tensors; ++t) {
    const Role role = p.tensors[t].role;
    defined[t] = whole_step_role(role) || role == Role::workspace;
  }
  for (std::size_t i = 0; i < p.ops.size(); ++i) {
    const Op& op = p.ops[i];
    for (int id : live.allocs_before[i]) ++allocs[static_cast<std::size_t>(id)];
    for (int id : live.frees_after[i]) ++frees[static_cast<std::size_t>(id)];
    for (int id : op.inputs) {
      const auto t = static_cast<std::size_t>(id);
      EXPECT_TRUE(defined[t]) << "op " << op.name << " reads " << p.tensors[t].name
                              << " before anything wrote it";
      ++uses[t];
    }
    for (int id : op.outputs) {
      const auto t = static_cast<std::size_t>(id);
      EXPECT_FALSE(whole_step_role(p.tensors[t].role))
          << "op " << op.name << " writes the whole-step tensor " << p.tensors[t].name;
      defined[t] = true;
      ++uses[t];
    }
    for (const auto* list : {&op.inputs, &op.outputs})
      for (int id : *list) {
        const auto t = static_cast<std::size_t>(id);
        EXPECT_LE(live.alloc_at[t], static_cast<int>(i)) << p.tensors[t].name;
        EXPECT_GE(live.free_after[t], static_cast<int>(i))
            << "op " << op.name << " uses " << p.tensors[t].name << " after it was freed";
      }
  }
  for (std::size_t t = 0; t < n_tensors; ++t) {
    const Tensor& tensor = p.tensors[t];
    EXPECT_GT(uses[t], 0) << "unused tensor " << tensor.name;
    EXPECT_GT(tensor.bytes, 0) << tensor.name;
    EXPECT_LE(frees[t], 1) << tensor.name << " freed twice";
    if (whole_step_role(tensor.role)) {
      EXPECT_EQ(allocs[t], 0) << tensor.name;
      EXPECT_EQ(frees[t], 0) << tensor.name;
    } else {
      EXPECT_EQ(allocs[t], 1) << tensor.name << " not allocated exactly once";
      if (tensor.role == Role::grad) {
        EXPECT_EQ(frees[t], 0) << tensor.name;
      }
    }
  }
  // Names are unique: the estimate, kernels and listings address tensors by name.
  std::set<std::string> names;
  for (const Tensor& t : p.tensors) EXPECT_TRUE(names.insert(t.name.str()).second) << t.name;

  EXPECT_EQ(p.config.batch, cfg.batch);
  EXPECT_EQ(p.config.scope, cfg.scope);
  if (cfg.scope == Scope::model) {
    ASSERT_GE(p.loss_tensor, 0);
    EXPECT_EQ(p.tensor(p.loss_tensor).name, "loss");
    EXPECT_EQ(p.output_grad_tensor, -1);
  } else {
    EXPECT_EQ(p.loss_tensor, -1);
    ASSERT_GE(p.output_grad_tensor, 0);
    EXPECT_EQ(p.tensor(p.output_grad_tensor).role, Role::input);
  }

  // The GEMM workspace, when there is one, is the last input of every GEMM op and of every op
  // whose kernels sum over the rows into its partials (norm and embedding backward), and of
  // nothing else.
  for (const Op& op : p.ops) {
    const bool has_ws = !op.inputs.empty() && p.tensor(op.inputs.back()).name == "gemm.workspace";
    EXPECT_EQ(has_ws, gemm_workspace > 0 && (is_gemm(op.kind) || sums_rows(op.kind))) << op.name;
  }

  // Recompute ops exist exactly when the mode replays something, and only after the forward.
  const bool replays = cfg.recompute == Recompute::full ||
                       (cfg.recompute == Recompute::selective &&
                        cfg.attention == Attention::eager && cfg.scope != Scope::mlp);
  int last_forward = -1;
  for (std::size_t i = 0; i < p.ops.size(); ++i) {
    const Op& op = p.ops[i];
    const bool step = op.kind == OpKind::adamw_step || op.kind == OpKind::sgd_step;
    if (!op.recompute && !step && !op.name.ends_with(".bwd")) last_forward = static_cast<int>(i);
  }
  ASSERT_GE(last_forward, 0);
  int n_recompute = 0;
  for (std::size_t i = 0; i < p.ops.size(); ++i)
    if (p.ops[i].recompute) {
      ++n_recompute;
      EXPECT_GT(static_cast<int>(i), last_forward) << p.ops[i].name;
      EXPECT_TRUE(p.ops[i].name.ends_with(".recompute")) << p.ops[i].name;
    }
  EXPECT_EQ(n_recompute > 0, replays);

  // One optimizer op per weight, after every backward op.
  int n_weights = 0, n_steps = 0, last_non_step = -1, first_step = static_cast<int>(p.ops.size());
  for (const Tensor& t : p.tensors) n_weights += t.role == Role::weight;
  for (std::size_t i = 0; i < p.ops.size(); ++i) {
    const bool step = p.ops[i].kind == OpKind::adamw_step || p.ops[i].kind == OpKind::sgd_step;
    n_steps += step;
    if (step)
      first_step = std::min(first_step, static_cast<int>(i));
    else
      last_non_step = static_cast<int>(i);
  }
  EXPECT_EQ(n_steps, cfg.optimizer == Optimizer::none ? 0 : n_weights);
  EXPECT_LT(last_non_step, first_step);
}

TEST(ProgramLiveness, InvariantsHoldForEveryRecipe) {
  int combination = 0;
  for (Arch arch : {Arch::gpt, Arch::llama})
    for (Attention attention : {Attention::eager, Attention::flash})
      for (Recompute recompute : {Recompute::none, Recompute::selective, Recompute::full})
        for (double dropout : {0.0, 0.1})
          for (Scope scope : {Scope::model, Scope::layer, Scope::attention, Scope::mlp}) {
            RunConfig cfg = tiny_config(arch);
            cfg.attention = attention;
            cfg.recompute = recompute;
            cfg.dropout = dropout;
            cfg.scope = scope;
            // Walk the precisions and optimizers along the grid rather than multiplying it.
            cfg.dtype =
                std::array{Precision::bf16, Precision::fp32, Precision::fp16}[combination % 3];
            cfg.optimizer =
                std::array{Optimizer::adamw, Optimizer::sgd, Optimizer::none}[combination / 3 % 3];
            const Bytes workspace = combination % 2 == 0 ? 4 * KiB : 0;
            ++combination;
            SCOPED_TRACE(fmt::format("{} {} {} dropout {} {} {} {} workspace {}", to_string(arch),
                                     to_string(attention), to_string(recompute), dropout,
                                     to_string(scope), to_string(cfg.dtype),
                                     to_string(cfg.optimizer), workspace));
            const Program p = build_program(cfg, workspace);
            check_invariants(p, cfg, workspace);
          }
}

TEST(ProgramLiveness, WorkspaceTensorOnlyWhenAskedAndUsed) {
  RunConfig cfg = tiny_config(Arch::gpt);
  auto count_ws = [](const Program& p) {
    return std::count_if(p.tensors.begin(), p.tensors.end(),
                         [](const Tensor& t) { return t.name == "gemm.workspace"; });
  };
  const Program with = build_program(cfg, 32 * MiB);
  ASSERT_EQ(count_ws(with), 1);
  EXPECT_EQ(with.tensor(find_tensor(with, "gemm.workspace")).bytes, 32 * MiB);
  EXPECT_EQ(with.tensor(find_tensor(with, "gemm.workspace")).role, Role::workspace);
  EXPECT_EQ(count_ws(build_program(cfg, 0)), 0);
  // The flash attention core runs no GEMM op of its own.
  cfg.scope = Scope::attention;
  cfg.attention = Attention::flash;
  EXPECT_EQ(count_ws(build_program(cfg, 32 * MiB)), 0);
}

// The norm and embedding backward keep their partial sums in the GEMM workspace, so it lives
// until the last of them: the embedding backward in a model, the first norm's backward in a layer.
TEST(ProgramLiveness, WorkspaceLivesUntilTheLastRowSum) {
  for (Arch arch : {Arch::gpt, Arch::llama}) {
    SCOPED_TRACE(to_string(arch));
    RunConfig cfg = tiny_config(arch);
    cfg.optimizer = Optimizer::adamw;
    const Program model = build_program(cfg, 4 * KiB);
    Liveness live = compute_liveness(model);
    const auto ws = static_cast<std::size_t>(find_tensor(model, "gemm.workspace"));
    EXPECT_EQ(live.free_after[ws], find_op(model, "embed.bwd"));
    cfg.scope = Scope::layer;
    const Program layer = build_program(cfg, 4 * KiB);
    live = compute_liveness(layer);
    const std::string norm1 = arch == Arch::gpt ? "layer0.ln1.bwd" : "layer0.attn_norm.bwd";
    EXPECT_EQ(live.free_after[static_cast<std::size_t>(find_tensor(layer, "gemm.workspace"))],
              find_op(layer, norm1));
  }
}

// fp16: the smallest power of two that lifts 1 / (V M), the gradient of a uniform softmax row of
// the mean loss, to fp16's smallest normal 2^-14, at most 2^16; other precisions: 1.
TEST(ProgramLossScale, Fp16ScalesTheTypicalGradientOutOfTheSubnormals) {
  for (Precision p : {Precision::fp32, Precision::tf32, Precision::bf16})
    EXPECT_EQ(static_loss_scale(p, 8192, 50257), 1.0f) << to_string(p);
  const double min_normal = std::ldexp(1.0, -14);
  for (std::int64_t M : {1, 7, 1024, 8192, 65536})
    for (std::int64_t V : {11, 32000, 50257, 128256}) {
      SCOPED_TRACE(fmt::format("M={} V={}", M, V));
      const double s = static_loss_scale(Precision::fp16, M, V);
      int exponent = 0;
      EXPECT_EQ(std::frexp(s, &exponent), 0.5) << "a power of two";
      EXPECT_GE(s, 1.0);
      EXPECT_LE(s, 65536.0);
      const double typical = 1.0 / (static_cast<double>(V) * static_cast<double>(M));
      if (s < 65536.0) {
        EXPECT_GE(typical * s, min_normal);
      }
      if (s > 1.0) {
        EXPECT_LT(typical * s / 2, min_normal) << "the smallest such power";
      }
      // The largest element, (1 - p) / M of the target, stays far inside fp16's range.
      EXPECT_LT(s / static_cast<double>(M), 65504.0 / 1024);
    }
  EXPECT_EQ(static_loss_scale(Precision::fp16, 8192, 50257), 32768.0f);  // 8192 * 50257 / 2^14
}

TEST(ProgramLossScale, SetOnTheLossGradientAndTheOptimizerStepsOnly) {
  for (Precision p : {Precision::fp16, Precision::bf16}) {
    SCOPED_TRACE(to_string(p));
    RunConfig cfg = tiny_config(Arch::gpt);
    cfg.model.vocab = 4096;  // M * V = 16 * 4096 = 2^16: a scale of 4 in fp16
    cfg.dtype = p;
    cfg.optimizer = Optimizer::sgd;
    const Program model = build_program(cfg, 0);
    const float want = static_loss_scale(p, cfg.batch * cfg.seq, cfg.model.vocab);
    EXPECT_EQ(want, p == Precision::fp16 ? 4.0f : 1.0f);
    for (const Op& op : model.ops) {
      const bool scaled = op.kind == OpKind::cross_entropy_bwd || op.kind == OpKind::sgd_step;
      EXPECT_EQ(op.grad_scale, scaled ? want : 1.0f) << op.name;
    }
    // A layer has no loss: nothing to scale, nothing to divide.
    cfg.scope = Scope::layer;
    for (const Op& op : build_program(cfg, 0).ops) EXPECT_EQ(op.grad_scale, 1.0f) << op.name;
  }
}

// Bytes of one block's saved activations live right after its forward ends: 16-bit (and u8 mask)
// bytes, and the fp32 statistics separately.
struct SavedBytes {
  Bytes narrow = 0;
  Bytes f32 = 0;
};

SavedBytes block_saved_bytes(const Program& p, int layer) {
  const Liveness live = compute_liveness(p);
  const int end = find_op(p, fmt::format("layer{}.mlp.residual", layer));
  const char* norm = p.config.model.arch == Arch::gpt ? "ln1" : "attn_norm";
  const int begin = find_op(p, fmt::format("layer{}.{}", layer, norm));
  const int x_in = p.ops[static_cast<std::size_t>(begin)].inputs.front();
  const std::string prefix = fmt::format("layer{}.", layer);
  const std::string x_out = prefix + "x_out";
  SavedBytes saved;
  for (const Tensor& t : p.tensors) {
    const bool mine = t.id == x_in || (t.name.starts_with(prefix) && t.name != x_out);
    if (!mine || whole_step_role(t.role) || !live_after(live, t.id, end)) continue;
    EXPECT_EQ(t.role, Role::activation) << t.name;
    (t.dtype == DType::f32 ? saved.f32 : saved.narrow) += t.bytes;
  }
  return saved;
}

TEST(ProgramActivations, GptBlockSavesKorthikantiBytes) {
  const RunConfig cfg = korthikanti_config();
  const std::int64_t s = cfg.seq, b = cfg.batch, h = cfg.model.hidden, a = cfg.model.heads;
  const Program p = build_program(cfg, 0);
  const SavedBytes saved = block_saved_bytes(p, 1);
  // s*b*h*(34 + 5*a*s/h) = 8192 * (34 + 20) = 442368 bytes.
  EXPECT_EQ(saved.narrow, s * b * h * (34 + 5 * a * s / h));
  EXPECT_EQ(saved.narrow, 442368);
  // Two layer norms, mean and rstd each, one fp32 per token.
  EXPECT_EQ(saved.f32, 2 * 2 * s * b * 4);
}

TEST(ProgramActivations, SelectiveRecomputeRemovesExactlyTheQuadraticTerm) {
  RunConfig cfg = korthikanti_config();
  const std::int64_t s = cfg.seq, b = cfg.batch, h = cfg.model.hidden, a = cfg.model.heads;
  const Bytes none = block_saved_bytes(build_program(cfg, 0), 1).narrow;
  cfg.recompute = Recompute::selective;
  const Program p = build_program(cfg, 0);
  const SavedBytes selective = block_saved_bytes(p, 1);
  EXPECT_EQ(none - selective.narrow, 5 * a * s * s * b);
  EXPECT_EQ(selective.narrow, 34 * s * b * h);
  // The replay sits in the backward, right before the attention backward that reads it.
  EXPECT_LT(find_op(p, "layer1.attn.proj.bwd"), find_op(p, "layer1.attn.scores.recompute"));
  EXPECT_LT(find_op(p, "layer1.attn.probs_dropout.recompute"),
            find_op(p, "layer1.attn.values.bwd"));
}

TEST(ProgramActivations, FlashKeepsOutputAndLogSumExpOnly) {
  RunConfig cfg = korthikanti_config();
  cfg.attention = Attention::flash;
  const std::int64_t s = cfg.seq, b = cfg.batch, h = cfg.model.hidden, a = cfg.model.heads;
  const SavedBytes saved = block_saved_bytes(build_program(cfg, 0), 1);
  EXPECT_EQ(saved.narrow, 34 * s * b * h);
  EXPECT_EQ(saved.f32, 2 * 2 * s * b * 4 + b * a * s * 4);
}

TEST(ProgramActivations, LlamaBlockSavesRotatedQkvAndThreeMlpTensors) {
  RunConfig cfg = korthikanti_config();
  cfg.model.arch = Arch::llama;
  cfg.model.kv_heads = 2;
  cfg.model.ffn = 176;
  cfg.model.max_positions = 1;
  cfg.model.tied_embeddings = false;
  const std::int64_t s = cfg.seq, b = cfg.batch, h = cfg.model.hidden, a = cfg.model.heads;
  const std::int64_t q = (4 + 2 * 2) * 16, f = cfg.model.ffn;
  const SavedBytes saved = block_saved_bytes(build_program(cfg, 0), 1);
  // 16-bit x_in, attn_norm.out, attn.y, x_mid, mlp_norm.out (2sbh each), qkv_rot (2sbQ),
  // gate, up, swiglu outputs (2sbF each), two u8 masks (sbh each); probs, probs_drop and the
  // probs mask (5as^2b); fp32 rstd of both norms.
  EXPECT_EQ(saved.narrow, s * b * (12 * h + 2 * q + 6 * f) + 5 * a * s * s * b);
  EXPECT_EQ(saved.f32, 2 * s * b * 4);
}

TEST(ProgramActivations, FlashHasNoSequenceSquaredTensor) {
  for (Arch arch : {Arch::gpt, Arch::llama})
    for (Attention attention : {Attention::eager, Attention::flash})
      for (Recompute recompute : {Recompute::none, Recompute::selective, Recompute::full})
        for (Scope scope : {Scope::model, Scope::layer, Scope::attention}) {
          RunConfig cfg = tiny_config(arch);
          cfg.seq = 7;  // no other dimension is 7
          cfg.attention = attention;
          cfg.recompute = recompute;
          cfg.scope = scope;
          cfg.dropout = 0.1;
          const Program p = build_program(cfg, 0);
          int square = 0;
          for (const Tensor& t : p.tensors)
            square += std::count(t.shape.begin(), t.shape.end(), cfg.seq) >= 2;
          SCOPED_TRACE(
              fmt::format("{} {} {}", to_string(arch), to_string(recompute), to_string(scope)));
          if (attention == Attention::flash)
            EXPECT_EQ(square, 0);
          else
            EXPECT_GT(square, 0);
        }
}

TEST(ProgramActivations, FullRecomputeKeepsOnlyBlockInputs) {
  for (Arch arch : {Arch::gpt, Arch::llama}) {
    RunConfig cfg = korthikanti_config();
    cfg.model.arch = arch;
    cfg.model.tied_embeddings = arch == Arch::gpt;
    cfg.model.max_positions = arch == Arch::gpt ? 64 : 1;
    cfg.recompute = Recompute::full;
    const Program p = build_program(cfg, 0);
    const Liveness live = compute_liveness(p);
    const int first_backward = find_op(p, "ce.bwd");
    std::set<std::string> kept;
    for (const Tensor& t : p.tensors)
      if (t.role == Role::activation && live_after(live, t.id, first_backward - 1))
        kept.insert(t.name.str());
    // Block inputs: x0, then each block's output (the last one is the final norm's input).
    std::set<std::string> expected{"x0",     "layer0.x_out", "layer1.x_out", "layer2.x_out",
                                   "logits", "ce.lse",       "embed.mask"};
    if (arch == Arch::gpt)
      expected.insert({"ln_f.out", "ln_f.mean", "ln_f.rstd"});
    else
      expected.insert({"norm.out", "norm.rstd"});
    EXPECT_EQ(kept, expected) << to_string(arch);
    // Each block is replayed just before its own backward.
    EXPECT_EQ(find_op(p, "layer2.mlp.residual.recompute") + 1,
              find_op(p, arch == Arch::gpt ? "layer2.mlp.proj_dropout.bwd"
                                           : "layer2.mlp.down_dropout.bwd"));
  }
}

TEST(ProgramActivations, DropoutReplaysReuseTheForwardSeed) {
  RunConfig cfg = korthikanti_config();
  cfg.recompute = Recompute::full;
  const Program p = build_program(cfg, 0);
  std::set<std::uint64_t> forward_seeds;
  int replays = 0;
  for (const Op& op : p.ops) {
    if (op.kind != OpKind::dropout_fwd) continue;
    EXPECT_DOUBLE_EQ(op.dropout_p, 0.1);
    if (!op.recompute) {
      EXPECT_TRUE(forward_seeds.insert(op.seed).second) << "seed reused by " << op.name;
      continue;
    }
    ++replays;
    const std::string original(
        op.name.substr(0, op.name.size() - std::string(".recompute").size()));
    EXPECT_EQ(p.ops[static_cast<std::size_t>(find_op(p, original))].seed, op.seed) << op.name;
    const std::string backward = original + ".bwd";
    EXPECT_EQ(p.ops[static_cast<std::size_t>(find_op(p, backward))].seed, op.seed) << op.name;
  }
  // Embedding, then three sites in each of three blocks.
  EXPECT_EQ(forward_seeds.size(), 10u);
  EXPECT_EQ(replays, 9);
}

TEST(ProgramParameters, WeightBytesMatchParameterCount) {
  RunConfig gqa;
  gqa.model = tiny_config(Arch::llama).model;
  for (const ModelConfig& model :
       {find_preset("gpt2").model, find_preset("tiny").model, find_preset("tiny-llama").model,
        gqa.model, find_preset("tiny-qwen3").model, find_preset("tiny-gemma2").model,
        find_preset("tiny-gemma3").model, find_preset("tiny-phi3").model}) {
    for (Precision dtype : {Precision::bf16, Precision::fp32}) {
      RunConfig cfg;
      cfg.framework = Framework::lean;
      cfg.model = model;
      cfg.seq = std::min<std::int64_t>(64, model.arch == Arch::gpt ? model.max_positions : 64);
      cfg.dtype = dtype;
      cfg.optimizer = Optimizer::adamw;
      const Program p = build_program(cfg, 0);
      const Bytes n = parameter_count(model);
      SCOPED_TRACE(fmt::format("{} {}", model.name, to_string(dtype)));
      EXPECT_EQ(role_bytes(p, Role::weight), n * dtype_size(activation_dtype(dtype)));
      EXPECT_EQ(role_bytes(p, Role::grad), n * dtype_size(activation_dtype(dtype)));
      EXPECT_EQ(role_bytes(p, Role::master_weight), has_master_weights(dtype) ? n * 4 : 0);
      EXPECT_EQ(role_bytes(p, Role::optimizer_state), 2 * n * 4);
    }
  }
  // gpt2 in bf16 with Adam: ZeRO's 16 bytes per parameter.
  RunConfig cfg;
  cfg.framework = Framework::lean;
  cfg.model = find_preset("gpt2").model;
  cfg.seq = 128;
  const Program p = build_program(cfg, 0);
  EXPECT_EQ(role_bytes(p, Role::weight) + role_bytes(p, Role::grad) +
                role_bytes(p, Role::master_weight) + role_bytes(p, Role::optimizer_state),
            16 * parameter_count(cfg.model));
}

TEST(ProgramParameters, SgdKeepsMomentumAndNoneKeepsNothing) {
  RunConfig cfg = tiny_config(Arch::gpt);
  const Bytes n = parameter_count(cfg.model);
  cfg.optimizer = Optimizer::sgd;
  Program p = build_program(cfg, 0);
  EXPECT_EQ(role_bytes(p, Role::optimizer_state), n * 4);
  EXPECT_EQ(role_bytes(p, Role::master_weight), n * 4);
  EXPECT_NE(find_tensor(p, "wte.momentum"), -1);
  cfg.optimizer = Optimizer::none;
  p = build_program(cfg, 0);
  EXPECT_EQ(role_bytes(p, Role::optimizer_state), 0);
  EXPECT_EQ(role_bytes(p, Role::master_weight), 0);
  EXPECT_EQ(role_bytes(p, Role::grad), n * 2);
}

TEST(ProgramParameters, LongSequencesGrowThePositionTable) {
  RunConfig cfg = tiny_config(Arch::gpt);
  cfg.seq = 20;  // past max_positions = 8
  const Program p = build_program(cfg, 0);
  EXPECT_EQ(p.tensor(find_tensor(p, "wpe")).shape, (std::vector<std::int64_t>{20, 16}));
}

std::vector<int> writers(const Program& p, int tensor) {
  std::vector<int> ops;
  for (std::size_t i = 0; i < p.ops.size(); ++i)
    if (std::count(p.ops[i].outputs.begin(), p.ops[i].outputs.end(), tensor) > 0)
      ops.push_back(static_cast<int>(i));
  return ops;
}

TEST(ProgramEmbeddings, TiedGradientWrittenTwiceSecondAccumulates) {
  const Program p = build_program(tiny_config(Arch::gpt), 0);
  const int grad = find_tensor(p, "wte.grad");
  const std::vector<int> w = writers(p, grad);
  ASSERT_EQ(w.size(), 2u);
  const Op& first = p.ops[static_cast<std::size_t>(w[0])];
  const Op& second = p.ops[static_cast<std::size_t>(w[1])];
  EXPECT_EQ(first.kind, OpKind::linear_bwd);
  EXPECT_FALSE(first.accumulate);
  EXPECT_EQ(p.ops[static_cast<std::size_t>(find_op(p, "lm_head"))].inputs[1],
            find_tensor(p, "wte"));
  EXPECT_EQ(second.kind, OpKind::embedding_bwd);
  EXPECT_TRUE(second.accumulate);
  // Every other gradient has exactly one writer.
  for (const Tensor& t : p.tensors)
    if (t.role == Role::grad && t.id != grad) {
      EXPECT_EQ(writers(p, t.id).size(), 1u) << t.name;
    }
}

TEST(ProgramEmbeddings, UntiedLlamaHasItsOwnHead) {
  const Program p = build_program(tiny_config(Arch::llama), 0);
  const std::vector<int> w = writers(p, find_tensor(p, "wte.grad"));
  ASSERT_EQ(w.size(), 1u);
  EXPECT_FALSE(p.ops[static_cast<std::size_t>(w[0])].accumulate);
  EXPECT_EQ(writers(p, find_tensor(p, "lm_head.w.grad")).size(), 1u);
}

TEST(ProgramShapes, GroupedQueryAttentionPacksFewerKeyValueHeads) {
  RunConfig cfg = tiny_config(Arch::llama);
  cfg.model.hidden = 64;
  cfg.model.heads = 8;
  cfg.model.kv_heads = 2;  // D = 8, Q = (8 + 2*2) * 8 = 96
  cfg.attention = Attention::eager;
  const Program p = build_program(cfg, 0);
  EXPECT_EQ(p.tensor(find_tensor(p, "layer0.attn.qkv.w")).shape,
            (std::vector<std::int64_t>{96, 64}));
  EXPECT_EQ(p.tensor(find_tensor(p, "layer1.attn.qkv_rot")).shape,
            (std::vector<std::int64_t>{2, 8, 96}));
  EXPECT_EQ(p.tensor(find_tensor(p, "layer1.attn.probs")).shape,
            (std::vector<std::int64_t>{2, 8, 8, 8}));
  for (const Op& op : p.ops)
    if (op.kind == OpKind::attn_scores || op.kind == OpKind::rope_fwd) {
      EXPECT_EQ(op.heads, 8) << op.name;
      EXPECT_EQ(op.kv_heads, 2) << op.name;
    }
}

TEST(ProgramShapes, FlashOpsListTheScratchCudnnAsksFor) {
  for (Arch arch : {Arch::gpt, Arch::llama}) {
    RunConfig cfg = tiny_config(arch);
    cfg.attention = Attention::flash;
    cfg.dtype = Precision::bf16;
    const Program p = build_program(cfg, 0);
    const Liveness live = compute_liveness(p);
    const Op& fwd = p.ops[static_cast<std::size_t>(find_op(p, "layer0.attn.flash"))];
    const Op& bwd = p.ops[static_cast<std::size_t>(find_op(p, "layer0.attn.flash.bwd"))];
    ASSERT_EQ(fwd.outputs.size(), 3u);
    ASSERT_EQ(bwd.outputs.size(), 2u);
    const Tensor& fwd_scratch = p.tensor(fwd.outputs.back());
    const Tensor& bwd_scratch = p.tensor(bwd.outputs.back());
    EXPECT_EQ(fwd_scratch.name, "layer0.attn.flash.scratch");
    EXPECT_EQ(bwd_scratch.name, "layer0.attn.flash_bwd.scratch");
    // The engine's own 256 bytes in the forward.
    EXPECT_EQ(fwd_scratch.bytes, 256);
    // B=2, A=4, S=8, D=4: the fp32 dq accumulator and row sums (4 B A S (D + 1)), two int32
    // sequence lengths per sample, the engine's 256; llama's 2 kv heads for 4 query heads add dK
    // and dV per query head in bf16 (2 B A S D 2).
    const Bytes gqa = arch == Arch::llama ? 2 * (2 * 4 * 8 * 4) * 2 : 0;
    EXPECT_EQ(bwd_scratch.bytes, 4 * (2 * 4 * 8 * (4 + 1)) + 8 * 2 + 256 + gqa);
    for (const Tensor* t : {&fwd_scratch, &bwd_scratch}) {
      EXPECT_EQ(t->role, Role::workspace);
      // Workspace scratch lives for its op alone.
      EXPECT_EQ(live.alloc_at[static_cast<std::size_t>(t->id)],
                live.free_after[static_cast<std::size_t>(t->id)])
          << t->name;
    }
  }
}

TEST(ProgramPrint, ListsEveryOpAndMarksThePeak) {
  RunConfig cfg = tiny_config(Arch::gpt);
  cfg.attention = Attention::eager;
  const Program p = build_program(cfg, 4 * KiB);
  const Liveness live = compute_liveness(p);
  const LiveProfile profile = live_profile(p, live);
  const std::string text = format_program(p, live);

  std::vector<std::string> lines;
  std::size_t start = 0;
  for (std::size_t end; (end = text.find('\n', start)) != std::string::npos; start = end + 1)
    lines.push_back(text.substr(start, end - start));
  // Header, delimiter, one row per op, a blank line, the summary.
  ASSERT_EQ(lines.size(), p.ops.size() + 4);
  for (std::size_t i = 0; i < p.ops.size() + 2; ++i)
    EXPECT_EQ(lines[i].size(), lines[0].size()) << "row " << i << " is not aligned";
  std::size_t marks = 0;
  for (std::size_t pos = 0; (pos = text.find("<- peak", pos)) != std::string::npos; ++pos) ++marks;
  EXPECT_EQ(marks, 1u);
  ASSERT_GE(profile.peak_op, 0);
  EXPECT_NE(lines[static_cast<std::size_t>(profile.peak_op) + 2].find("<- peak"),
            std::string::npos);
  EXPECT_NE(lines.back().find(format_bytes(profile.peak)), std::string::npos);
  EXPECT_NE(lines.back().find(p.ops[static_cast<std::size_t>(profile.peak_op)].name),
            std::string::npos);

  Bytes total = 0;
  for (Bytes b : live_bytes_by_role(p, live, profile.peak_op)) total += b;
  EXPECT_EQ(total, profile.peak);
}

// Per-op id lists in one array: each op's ids in increasing order, ids of no op (-1, or an op
// past the last) in no list, ops with none empty.
// A lazy tensor is persistent in the steady state (live the whole step), and made by a run's
// first step before the op that first lists it; one no op lists is a builder's mistake.
TEST(ProgramLiveness, LazyTensorsArePersistentAndMadeAtTheirFirstUse) {
  Program p;
  const int x = p.add_tensor("x", {8}, DType::f32, Role::activation);
  const int y = p.add_tensor("y", {8}, DType::f32, Role::transient);
  const int state = p.add_tensor("state", {8}, DType::f32, Role::optimizer_state);
  const int ws = p.add_tensor("ws", {64}, DType::u8, Role::workspace);
  p.tensors[static_cast<std::size_t>(state)].lazy = true;
  p.tensors[static_cast<std::size_t>(ws)].lazy = true;
  p.add_op(OpKind::gelu_fwd, "a", {x}, {y});
  p.add_op(OpKind::linear_fwd, "b", {x, y, ws}, {x});
  p.add_op(OpKind::add, "c", {x, state}, {y});
  const Liveness live = compute_liveness(p);
  for (int id : {state, ws}) {
    EXPECT_EQ(live.alloc_at[static_cast<std::size_t>(id)], -1);
    EXPECT_EQ(live.free_after[static_cast<std::size_t>(id)], 3);
    EXPECT_NE(std::find(live.persistent.begin(), live.persistent.end(), id), live.persistent.end());
  }
  EXPECT_TRUE(live.first_step_allocs[0].empty());
  EXPECT_EQ(std::vector<int>(live.first_step_allocs[1].begin(), live.first_step_allocs[1].end()),
            std::vector<int>{ws});
  EXPECT_EQ(std::vector<int>(live.first_step_allocs[2].begin(), live.first_step_allocs[2].end()),
            std::vector<int>{state});
  const int unused = p.add_tensor("unused", {8}, DType::f32, Role::optimizer_state);
  p.tensors[static_cast<std::size_t>(unused)].lazy = true;
  EXPECT_THROW(compute_liveness(p), InternalError);
}

TEST(ProgramLiveness, IdsPerOpListsEachIdUnderItsOp) {
  //                           id: 0  1   2  3  4  5  6  7
  const std::vector<int> op_of{2, -1, 0, 2, 4, 0, 9, 2};
  const IdsPerOp lists(op_of, 5);
  ASSERT_EQ(lists.size(), 5u);
  auto as_vector = [](std::span<const int> ids) {
    return std::vector<int>(ids.begin(), ids.end());
  };
  EXPECT_EQ(as_vector(lists[0]), (std::vector<int>{2, 5}));
  EXPECT_TRUE(lists[1].empty());
  EXPECT_EQ(as_vector(lists[2]), (std::vector<int>{0, 3, 7}));
  EXPECT_TRUE(lists[3].empty());
  EXPECT_EQ(as_vector(lists[4]), (std::vector<int>{4}));
  EXPECT_EQ(IdsPerOp(op_of, 5), lists);
  EXPECT_FALSE(IdsPerOp(op_of, 6) == lists);
  EXPECT_EQ(IdsPerOp({}, 0).size(), 0u);
  EXPECT_EQ(IdsPerOp().size(), 0u);
}

}  // namespace
}  // namespace vrambench

// The operand decoder both executors read an op through: every kind's operands bound in its
// signature's order and found by the signature's names (optional ones absent when left out), the
// workspace apart, ops that do not match their signature or are not bound refused, and the figures
// read off the operands taken from the operand the signature names.
#include <gtest/gtest.h>

#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "core/error.h"
#include "model/families.h"
#include "op/operands.h"
#include "program_memory.h"

namespace vrambench {
namespace {

using test::Memory;

// The attributes check_op asks of a kind, set to values it accepts.
void give_attributes(Op& op) {
  const OpAttrs& uses = signature(op.kind).attrs;
  if (uses.heads) op.heads = op.kv_heads = 1;
  if (uses.quant) {
    op.quant = QuantKind::nf4;
    op.rows = 1;
  }
  if (uses.lora) op.lora_scale = 1.0f;
  if (uses.softcap) op.softcap = 1.0f;
  if (uses.aux) op.aux_coef = 0.01f;
  if (uses.preference) {
    op.trainer = Trainer::dpo;
    op.beta = 0.1f;
  }
}

// An op of `kind` over one tensor per listed operand, named after it ("in.x", "out.y"), with the
// first `inputs` and `outputs` of them, and a workspace tensor after the inputs.
struct OneOp {
  Program p;
  std::vector<int> in, out;
  int workspace = -1;
  OneOp(OpKind kind, std::size_t inputs, std::size_t outputs) {
    const OpSignature& s = signature(kind);
    TensorIds in_ids, out_ids;
    for (std::size_t i = 0; i < inputs; ++i) {
      in.push_back(p.add_tensor("in." + std::string(operand_name(s.inputs[i])), {4}, DType::f32,
                                Role::transient));
      in_ids.push_back(in.back());
    }
    for (std::size_t i = 0; i < outputs; ++i) {
      out.push_back(p.add_tensor("out." + std::string(operand_name(s.outputs[i])), {4}, DType::f32,
                                 Role::transient));
      out_ids.push_back(out.back());
    }
    workspace = p.add_tensor("workspace", {64}, DType::u8, Role::workspace);
    in_ids.push_back(workspace);
    give_attributes(p.add_op(kind, "op", in_ids, out_ids));
  }
};

TEST(Operands, EveryKindBindsItsOperandsInTheSignaturesOrder) {
  for (std::size_t k = 0; k < kOpKindCount; ++k) {
    const auto kind = static_cast<OpKind>(k);
    const OpSignature& s = signature(kind);
    for (bool optional : {false, true}) {
      const std::size_t inputs = optional ? s.max_inputs() : s.min_inputs();
      const std::size_t outputs = optional ? s.max_outputs() : s.min_outputs();
      OneOp one(kind, inputs, outputs);
      Memory mem(one.p);
      const Operands a = decode_operands(one.p, 0, mem.data);
      SCOPED_TRACE(std::string(s.name) + (optional ? " with its optional operands" : ""));
      ASSERT_EQ(a.in.size(), inputs);
      ASSERT_EQ(a.out.size(), outputs);
      for (std::size_t i = 0; i < inputs; ++i) {
        EXPECT_EQ(a.in[i].tensor, &one.p.tensor(one.in[i]));
        EXPECT_EQ(a.in[i].data, mem.of(one.in[i]));
      }
      for (std::size_t i = 0; i < outputs; ++i) {
        EXPECT_EQ(a.out[i].tensor, &one.p.tensor(one.out[i]));
        EXPECT_EQ(a.out[i].data, mem.of(one.out[i]));
      }
      // By name: the operand at the signature's place, or nothing where the op leaves it out.
      for (std::size_t i = 0; i < s.max_inputs(); ++i)
        EXPECT_EQ(a.input(operand_name(s.inputs[i])), i < inputs ? &a.in[i] : nullptr)
            << s.inputs[i];
      for (std::size_t i = 0; i < s.max_outputs(); ++i)
        EXPECT_EQ(a.output(operand_name(s.outputs[i])), i < outputs ? &a.out[i] : nullptr)
            << s.outputs[i];
      EXPECT_EQ(a.workspace, mem.of(one.workspace));
      EXPECT_EQ(a.workspace_bytes, 64);
    }
  }
}

TEST(Operands, WrongCountsAreRefused) {
  for (std::size_t k = 0; k < kOpKindCount; ++k) {
    const auto kind = static_cast<OpKind>(k);
    const OpSignature& s = signature(kind);
    SCOPED_TRACE(s.name);
    OneOp one(kind, s.max_inputs(), s.max_outputs());
    const int extra = one.p.add_tensor("extra", {4}, DType::f32, Role::transient);
    Memory mem(one.p);
    const Op good = one.p.ops[0];
    ASSERT_NO_THROW(decode_operands(one.p, 0, mem.data));
    // Past Program::add_op, which would refuse them: one input too many, one output too many, and
    // one fewer than the kind needs.
    Op& op = one.p.ops[0];
    op.inputs.insert(op.inputs.begin(), extra);
    EXPECT_THROW(decode_operands(one.p, 0, mem.data), InternalError);
    op = good;
    op.outputs.push_back(extra);
    EXPECT_THROW(decode_operands(one.p, 0, mem.data), InternalError);
    if (s.min_inputs() > 0) {
      op = good;
      op.inputs.erase(op.inputs.begin() + static_cast<std::ptrdiff_t>(s.max_inputs() - 1));
      if (s.min_inputs() < s.max_inputs()) {  // an optional one left out: still fine
        EXPECT_NO_THROW(decode_operands(one.p, 0, mem.data));
      }
      while (op.inputs.size() > s.min_inputs())  // the workspace stays
        op.inputs.erase(op.inputs.begin());
      EXPECT_THROW(decode_operands(one.p, 0, mem.data), InternalError);
    }
    if (s.min_outputs() > 0) {
      op = good;
      op.outputs.clear();
      EXPECT_THROW(decode_operands(one.p, 0, mem.data), InternalError);
    }
  }
}

TEST(Operands, UnboundTensorsUnknownNamesAndAttributesAreRefused) {
  OneOp one(OpKind::add, 2, 1);
  const int empty = one.p.add_tensor("empty", {0}, DType::f32, Role::transient);
  Memory mem(one.p);
  EXPECT_EQ(mem.of(empty), nullptr);
  const Operands a = decode_operands(one.p, 0, mem.data);
  try {
    (void)a.input("x");  // add reads a and b
    FAIL() << "add lists no input x";
  } catch (const InternalError& e) {
    EXPECT_NE(std::string(e.what()).find("'op' (add)"), std::string::npos) << e.what();
  }
  EXPECT_THROW((void)a.output("a"), InternalError);
  // A tensor of no bytes needs no memory; one of some bytes does, the workspace too.
  one.p.ops[0].inputs[1] = empty;
  EXPECT_NO_THROW(decode_operands(one.p, 0, mem.data));
  one.p.ops[0].inputs[1] = one.in[1];
  for (int id : {one.in[0], one.out[0], one.workspace}) {
    std::vector<void*> data = mem.data;
    data[static_cast<std::size_t>(id)] = nullptr;
    EXPECT_THROW(decode_operands(one.p, 0, data), InternalError) << one.p.tensor(id).name;
  }
  // check_op runs first: heads on a kind without them.
  one.p.ops[0].heads = one.p.ops[0].kv_heads = 2;
  EXPECT_THROW(decode_operands(one.p, 0, mem.data), InternalError);
}

TEST(Operands, LinearDimsReadWAtEachKindsPlace) {
  Program p;
  const int x = p.add_tensor("x", {2, 3, 5}, DType::f32, Role::transient);  // M = 6, In = 5
  const int w = p.add_tensor("w", {4, 5}, DType::f32, Role::weight);        // Out = 4
  const int y = p.add_tensor("y", {6, 4}, DType::f32, Role::transient);
  const int dx = p.add_tensor("dx", {6, 5}, DType::f32, Role::transient);
  const int dw = p.add_tensor("dw", {4, 5}, DType::f32, Role::grad);
  p.add_op(OpKind::linear_fwd, "fwd", {x, w}, {y});
  p.add_op(OpKind::linear_bwd, "bwd", {y, x, w}, {dx, dw});
  p.add_op(OpKind::linear_dgrad, "dgrad", {y, w}, {dx});
  Memory mem(p);
  for (std::size_t i = 0; i < 3; ++i) {
    const LinearDims d = linear_dims(decode_operands(p, i, mem.data));
    EXPECT_EQ(d.M, 6) << i;
    EXPECT_EQ(d.In, 5) << i;
    EXPECT_EQ(d.Out, 4) << i;
  }
  // y of the wrong size; and a kind that is not a linear one.
  const int y_bad = p.add_tensor("y_bad", {6, 3}, DType::f32, Role::transient);
  p.add_op(OpKind::linear_fwd, "bad", {x, w}, {y_bad});
  Memory more(p);
  EXPECT_THROW(linear_dims(decode_operands(p, 3, more.data)), InternalError);
  p.add_op(OpKind::gelu_fwd, "gelu", {x}, {dx});
  Memory most(p);
  EXPECT_THROW(linear_dims(decode_operands(p, 4, most.data)), InternalError);
}

// The attention shape comes from the operand the signature names qkv, wherever it stands.
TEST(Operands, AttentionShapeReadsTheQkvOperand) {
  Program p;
  const std::int64_t B = 2, S = 5, A = 4, K = 2, D = 8;
  const int qkv = p.add_tensor("qkv", {B, S, (A + 2 * K) * D}, DType::f32, Role::transient);
  const int probs = p.add_tensor("probs", {B, A, S, S}, DType::f32, Role::transient);
  const int y = p.add_tensor("y", {B, S, A * D}, DType::f32, Role::transient);
  const int dqkv = p.add_tensor("dqkv", {B, S, (A + 2 * K) * D}, DType::f32, Role::transient);
  auto attention = [&](OpKind kind, TensorIds in, TensorIds out) {
    Op& op = p.add_op(kind, std::string(to_string(kind)), in, out);
    op.heads = A;
    op.kv_heads = K;
  };
  attention(OpKind::attn_scores, {qkv}, {probs});
  attention(OpKind::attn_values, {probs, qkv}, {y});
  attention(OpKind::attn_values_bwd, {y, probs, qkv}, {probs, dqkv});
  attention(OpKind::attn_scores_bwd, {probs, qkv, dqkv}, {dqkv});
  attention(OpKind::rope_bwd, {dqkv}, {qkv});
  Memory mem(p);
  for (std::size_t i = 0; i < p.ops.size(); ++i) {
    const QkvShape s = attention_shape(decode_operands(p, i, mem.data));
    EXPECT_EQ(s.batch, B) << p.ops[i].name;
    EXPECT_EQ(s.seq, S) << p.ops[i].name;
    EXPECT_EQ(s.heads, A) << p.ops[i].name;
    EXPECT_EQ(s.kv_heads, K) << p.ops[i].name;
    EXPECT_EQ(s.head_dim, D) << p.ops[i].name;
  }
}

TEST(Operands, LoraDimsAndTheirChecks) {
  Program p;
  const std::int64_t M = 6, In = 5, R = 2, N = 3, Out = 8;
  const int x = p.add_tensor("x", {M, In}, DType::f32, Role::transient);
  const int a_w = p.add_tensor("lora_A", {R, In}, DType::f32, Role::weight);
  const int b_w = p.add_tensor("lora_B", {N, R}, DType::f32, Role::weight);
  const int y = p.add_tensor("y", {M, Out}, DType::f32, Role::transient);
  const int xa = p.add_tensor("xa", {M, R}, DType::f32, Role::transient);
  const int other = p.add_tensor("other", {M, Out}, DType::f32, Role::transient);
  const int da = p.add_tensor("da", {R, In}, DType::f32, Role::grad);
  const int db = p.add_tensor("db", {N, R}, DType::f32, Role::grad);
  const int dxa = p.add_tensor("dxa", {M, R}, DType::f32, Role::transient);
  auto lora = [&](OpKind kind, TensorIds in, TensorIds out) -> Op& {
    Op& op = p.add_op(kind, std::string(to_string(kind)), in, out);
    op.lora_scale = 0.5f;
    op.col_offset = 4;
    return op;
  };
  lora(OpKind::lora_fwd, {x, a_w, b_w, y}, {xa, y});
  lora(OpKind::lora_bwd, {y, x, xa, a_w, b_w}, {da, db, dxa});
  lora(OpKind::lora_fwd, {x, a_w, b_w, y}, {xa, other});             // y not in place
  lora(OpKind::lora_fwd, {x, a_w, b_w, y}, {xa, y}).col_offset = 6;  // past y's columns
  Memory mem(p);
  for (std::size_t i = 0; i < 2; ++i) {
    const LoraDims d = lora_dims(decode_operands(p, i, mem.data));
    EXPECT_EQ(d.M, M);
    EXPECT_EQ(d.In, In);
    EXPECT_EQ(d.R, R);
    EXPECT_EQ(d.N, N);
    EXPECT_EQ(d.Out, Out);
  }
  EXPECT_THROW(lora_dims(decode_operands(p, 2, mem.data)), InternalError);
  EXPECT_THROW(lora_dims(decode_operands(p, 3, mem.data)), InternalError);
}

// Every step of either framework, every family, recipe and precision, is one the kernels read
// operand for operand: the lean step in one dtype but what the table types (statistics, masks,
// token ids, optimizer state); the hf step with PyTorch's mixed dtypes (LlamaRMSNorm's fp32 input,
// autocast's and QLoRA's fp32 stream, PEFT's fp32 adapters, fp32 norm weights, Llama's fp32
// softmax, eager attention's scores promoted by autocast's fp32 mask), which the signature frees.
// And where a kernel keeps what PyTorch allocates (a LoRA op's columns, eager attention's
// product) the op holds it. A builder change that mixes dtypes some kernel cannot read fails here,
// not on the GPU.
TEST(Operands, EveryStepIsReadOperandForOperand) {
  int built = 0, optimizer_ops = 0;
  // The kinds seen reading or writing an operand of another dtype than their op's, per framework.
  std::set<std::string> mixed_lean, mixed_hf;
  int moe_ops = 0;
  for (const char* preset : {"tiny", "tiny-llama", "tiny-qwen3", "tiny-gemma2", "tiny-gemma3",
                             "tiny-phi3", "tiny-mixtral", "tiny-qwen3-moe", "tiny-olmoe"})
    for (Framework framework : {Framework::lean, Framework::hf})
      for (Precision dtype : {Precision::fp32, Precision::bf16, Precision::fp16,
                              Precision::amp_bf16, Precision::amp_fp16})
        for (Finetune finetune : {Finetune::full, Finetune::lora, Finetune::qlora})
          for (Attention attention : {Attention::eager, Attention::flash})
            for (Recompute recompute : {Recompute::none, Recompute::full}) {
              // Each recipe meets each optimizer over its four attention and recompute forms.
              const Optimizer optimizers[] = {Optimizer::adamw, Optimizer::sgd,
                                              Optimizer::adamw_8bit, Optimizer::paged_adamw_8bit};
              RunConfig c;
              c.model = find_preset(preset).model;
              c.framework = framework;
              c.device = parse_device("cuda");
              c.seq = 16;
              c.batch = 2;
              c.dtype = dtype;
              c.finetune = finetune;
              c.attention = attention;
              c.recompute = recompute;
              c.optimizer =
                  optimizers[2 * (attention == Attention::flash) + (recompute == Recompute::full)];
              c.dropout = finetune == Finetune::full ? 0.1 : 0.0;
              c.lora_dropout = finetune == Finetune::lora ? 0.05 : 0.0;
              try {
                validate(c);
              } catch (const UsageError&) {
                continue;  // a recipe the framework or precision does not allow
              }
              const Program p = build_program(c, 64);
              ++built;
              // Never read: the decoder binds pointers, the checks read dtypes and shapes.
              const std::vector<void*> data(p.tensors.size(),
                                            reinterpret_cast<void*>(std::uintptr_t{64}));
              for (std::size_t i = 0; i < p.ops.size(); ++i) {
                const Operands a = decode_operands(p, i, data);
                const Operand* o = operand_of_another_dtype(a);
                ASSERT_EQ(o, nullptr)
                    << preset << " " << to_string(framework) << " " << to_string(dtype) << " "
                    << to_string(finetune) << " " << to_string(attention) << " "
                    << to_string(recompute) << ": " << p.ops[i].name.str() << " reads "
                    << o->tensor->name.str() << " in another dtype";
                if (mixes_dtypes(a))
                  (framework == Framework::lean ? mixed_lean : mixed_hf)
                      .insert(std::string(to_string(a.op.kind)));
                if (a.op.kind == OpKind::adamw_step || a.op.kind == OpKind::sgd_step) {
                  // As both executors read them: under hf, torch.optim keeps the state in the
                  // parameter's dtype (no master there); bitsandbytes' 32-bit state (its
                  // optimizers' small parameters) is fp32, and so is the lean trainer's.
                  OptimizerOperands opt;
                  ASSERT_NO_THROW(opt = optimizer_operands(a)) << p.ops[i].name.str();
                  ++optimizer_ops;
                  const bool torch_optim =
                      c.optimizer == Optimizer::adamw || c.optimizer == Optimizer::sgd;
                  if (opt.master != nullptr || framework == Framework::lean || !torch_optim) {
                    EXPECT_EQ(opt.state_dtype, DType::f32) << p.ops[i].name.str();
                  } else {
                    EXPECT_EQ(opt.state_dtype, opt.dtype) << p.ops[i].name.str();
                  }
                }
                // The quantised weight's and the 8-bit state's buffers, through the checked
                // accessors both executors read them by.
                if (a.op.kind == OpKind::dequantize) {
                  EXPECT_NO_THROW(dequantize_operands(a)) << p.ops[i].name.str();
                }
                if (a.op.kind == OpKind::adamw8bit_step) {
                  EXPECT_NO_THROW(adamw_8bit_state(a)) << p.ops[i].name.str();
                }
                // A mixture of experts' ops, through the dimensions both executors read.
                if (signature(a.op.kind).name.find("moe") != std::string_view::npos ||
                    a.op.kind == OpKind::router_topk || a.op.kind == OpKind::router_topk_bwd ||
                    a.op.kind == OpKind::grouped_linear_fwd ||
                    a.op.kind == OpKind::grouped_linear_bwd) {
                  EXPECT_NO_THROW(moe_dims(a)) << p.ops[i].name.str();
                  ++moe_ops;
                }
                if (framework == Framework::lean) continue;
                if (a.op.kind == OpKind::lora_fwd || a.op.kind == OpKind::lora_bwd) {
                  EXPECT_NO_THROW(lora_columns(a, lora_dims(a))) << p.ops[i].name.str();
                }
                if (a.op.kind == OpKind::attn_scores && a.out[0].tensor->dtype != a.dtype()) {
                  EXPECT_NE(a.held_like(a.dtype(), a.out[0].tensor->shape), nullptr)
                      << p.ops[i].name.str();
                }
              }
            }
  EXPECT_GE(built, 600);  // the rest are recipes validate() refuses (a mixture of experts on lean)
  EXPECT_GT(optimizer_ops, 10000);
  EXPECT_GT(moe_ops, 1000);
  // The lean step keeps one dtype per op but the optimizer's fp32 state beside 16-bit weights and
  // the router's fp32 probabilities beside 16-bit logits; the hf step mixes them in each of these
  // kinds (AdamW's where bitsandbytes keeps a small parameter's state in fp32; the MoE combine's
  // where Mixtral's routing weights stay fp32 or QLoRA's experts compute in fp32).
  // A router reads the logits in the step's dtype and keeps its probabilities in fp32, as
  // transformers' softmax over logits.float() does, under either framework.
  EXPECT_EQ(mixed_lean,
            (std::set<std::string>{"adamw_step", "router_topk", "router_topk_bwd", "sgd_step"}));
  EXPECT_EQ(mixed_hf, (std::set<std::string>{"adamw_step", "add", "attn_scores", "lora_bwd",
                                             "lora_fwd", "moe_combine", "moe_combine_bwd",
                                             "qk_norm_bwd", "qk_norm_fwd", "rmsnorm_bwd",
                                             "rmsnorm_fwd", "rope_bwd", "rope_fwd", "router_topk",
                                             "router_topk_bwd", "softmax_bwd", "softmax_fwd"}));
}

// The signature frees the operands the hf step mixes ("any", "=x"), and no other: RMSNorm's input
// and weight (dx and dw in their dtypes), the q/k norm's weights (one dtype for both), a sum's
// second operand, a LoRA op's y and dy (and RoPE's input, the softmax's scores and dscores, eager
// attention's scores).
// Everything else must be of the op's dtype, which an operand of free dtype does not set.
TEST(Operands, TheSignatureFreesTheMixedOperandsAndNoOthers) {
  Program p;
  auto t = [&](const char* name, Shape shape, DType dt) {
    return p.add_tensor(name, std::move(shape), dt, Role::transient);
  };
  const int x32 = t("x32", {4, 8}, DType::f32), x16 = t("x16", {4, 8}, DType::f16),
            x8 = t("x8", {4, 8}, DType::u8), w = t("w", {8}, DType::bf16),
            w16 = t("w16", {8}, DType::f16), y = t("y", {4, 8}, DType::bf16),
            rstd = t("rstd", {4}, DType::f32), dx32 = t("dx32", {4, 8}, DType::f32),
            dx16 = t("dx16", {4, 8}, DType::bf16), c32 = t("c32", {4, 8}, DType::f32);
  p.add_op(OpKind::rmsnorm_fwd, "fp32 x", {x32, w}, {y, rstd});
  p.add_op(OpKind::rmsnorm_fwd, "fp16 x", {x16, w}, {y, rstd});
  p.add_op(OpKind::rmsnorm_fwd, "u8 x", {x8, w}, {y, rstd});
  p.add_op(OpKind::rmsnorm_bwd, "fp32 dx", {y, x32, w, rstd}, {dx32});
  p.add_op(OpKind::rmsnorm_bwd, "dx not x's", {y, x32, w, rstd}, {dx16});
  p.add_op(OpKind::rmsnorm_bwd, "fp16 w, dw not w's", {y, x32, w16, rstd}, {dx32, w});
  p.add_op(OpKind::add, "16-bit b", {x32, y}, {c32});
  p.add_op(OpKind::add, "16-bit a", {y, x32}, {c32});
  // LoRA: fp32 adapters over a bf16 layer; then an x that is not the adapters'.
  const int lx = t("lx", {4, 8}, DType::f32), la = t("la", {2, 8}, DType::f32),
            lb = t("lb", {8, 2}, DType::f32), xa = t("xa", {4, 2}, DType::f32),
            lx16 = t("lx16", {4, 8}, DType::bf16);
  give_attributes(p.add_op(OpKind::lora_fwd, "fp32 adapters", {lx, la, lb, y}, {xa, y}));
  give_attributes(p.add_op(OpKind::lora_fwd, "bf16 x", {lx16, la, lb, y}, {xa, y}));
  // q/k norm weights of another dtype than q|k|v, but one dtype for both.
  const int qkv = t("qkv", {1, 2, 12}, DType::bf16), qkv_y = t("qkv_y", {1, 2, 12}, DType::bf16),
            qw = t("qw", {4}, DType::f32), kw32 = t("kw32", {4}, DType::f32),
            kw16 = t("kw16", {4}, DType::bf16), qk_rstd = t("qk_rstd", {1, 2, 2}, DType::f32);
  give_attributes(p.add_op(OpKind::qk_norm_fwd, "fp32 weights", {qkv, qw, kw32}, {qkv_y, qk_rstd}));
  give_attributes(
      p.add_op(OpKind::qk_norm_fwd, "k_w not q_w's", {qkv, qw, kw16}, {qkv_y, qk_rstd}));
  const std::vector<void*> data(p.tensors.size(), reinterpret_cast<void*>(std::uintptr_t{64}));
  auto decoded = [&](std::size_t op) { return decode_operands(p, op, data); };
  auto flagged = [&](std::size_t op) -> std::string {
    const Operands a = decoded(op);
    const Operand* o = operand_of_another_dtype(a);
    return o ? o->tensor->name.str() : "";
  };
  std::vector<std::string> found;
  for (std::size_t i = 0; i < p.ops.size(); ++i) found.push_back(flagged(i));
  EXPECT_EQ(found, (std::vector<std::string>{"", "", "x8", "", "dx16", "w", "", "y", "", "lx16", "",
                                             "kw16"}));
  // Mixed forms: a freed operand of another dtype (fp32 x, a 16-bit b); a flagged 'a' is not one.
  EXPECT_TRUE(mixes_dtypes(decoded(0)));
  EXPECT_TRUE(mixes_dtypes(decoded(6)));
  EXPECT_FALSE(mixes_dtypes(decoded(7)));
  // The op's dtype comes from an operand it does not free: dy's (not dx's), the adapters'.
  EXPECT_EQ(decoded(3).dtype(), DType::bf16);
  EXPECT_EQ(decoded(8).dtype(), DType::f32);
  EXPECT_EQ(decoded(6).dtype(), DType::f32);
}

// A LoRA op over a y of another dtype keeps the adapter's columns in its first held [M,N] tensor
// of the adapters' dtype; one of its own dtype needs none, and one that holds none is refused.
TEST(Operands, LoraOverAnotherDtypeKeepsItsColumnsInAHeldTensor) {
  Program p;
  auto t = [&](const char* name, Shape shape, DType dt) {
    return p.add_tensor(name, std::move(shape), dt, Role::transient);
  };
  const int x = t("x", {4, 8}, DType::f32), a = t("a", {2, 8}, DType::f32),
            b = t("b", {3, 2}, DType::f32), xa = t("xa", {4, 2}, DType::f32),
            y16 = t("y16", {4, 8}, DType::bf16), y32 = t("y32", {4, 8}, DType::f32),
            other = t("sum", {4, 3}, DType::bf16), cols = t("lora_B.out", {4, 3}, DType::f32);
  Op& mixed = p.add_op(OpKind::lora_fwd, "mixed", {x, a, b, y16}, {xa, y16});
  give_attributes(mixed);
  mixed.held = {other, cols};
  give_attributes(p.add_op(OpKind::lora_fwd, "same", {x, a, b, y32}, {xa, y32}));
  give_attributes(p.add_op(OpKind::lora_fwd, "nothing held", {x, a, b, y16}, {xa, y16}));
  std::vector<void*> data(p.tensors.size(), reinterpret_cast<void*>(std::uintptr_t{64}));
  data[static_cast<std::size_t>(cols)] = reinterpret_cast<void*>(std::uintptr_t{128});
  auto columns = [&](std::size_t op) {
    const Operands o = decode_operands(p, op, data);
    return lora_columns(o, lora_dims(o));
  };
  const Operand* kept = columns(0);
  ASSERT_NE(kept, nullptr);
  EXPECT_EQ(kept->tensor->name, "lora_B.out");
  EXPECT_EQ(kept->data, reinterpret_cast<void*>(std::uintptr_t{128}));
  EXPECT_EQ(columns(1), nullptr);
  EXPECT_THROW(columns(2), InternalError);
}

// The typed accessors both executors read operands through check the dtype. On the first GPU
// the hf bf16 step's AdamW state (bf16, as torch.optim keeps a bf16 parameter's) was read through
// a float pointer: 4-byte reads past a 2-byte-per-element buffer, an illegal address. Read the old
// way, m now fails here, naming the op; optimizer_operands, the executors' way, takes it as bf16.
TEST(Operands, TypedAccessorsRefuseAnotherDtype) {
  RunConfig c;
  c.model = find_preset("tiny").model;
  c.framework = Framework::hf;
  c.dtype = Precision::bf16;
  c.seq = 16;
  c.batch = 2;
  const Program p = build_program(c, 64);
  const std::vector<void*> data(p.tensors.size(), reinterpret_cast<void*>(std::uintptr_t{64}));
  int adamw = 0;
  for (std::size_t i = 0; i < p.ops.size(); ++i) {
    if (p.ops[i].kind != OpKind::adamw_step) continue;
    ++adamw;
    const Operands a = decode_operands(p, i, data);
    const Operand& m = *a.input("m");
    ASSERT_EQ(m.tensor->dtype, DType::bf16) << p.ops[i].name.str();
    try {
      (void)a.f32(m);
      FAIL() << "a bf16 m read as fp32";
    } catch (const InternalError& e) {
      EXPECT_NE(std::string(e.what()).find("is bf16, read as f32"), std::string::npos) << e.what();
    }
    EXPECT_THROW((void)a.i32(m), InternalError);
    EXPECT_THROW((void)a.u8(m), InternalError);
    const OptimizerOperands o = optimizer_operands(a);
    EXPECT_EQ(o.state_dtype, DType::bf16);
    EXPECT_EQ(o.dtype, DType::bf16);
    EXPECT_EQ(o.master, nullptr);
  }
  EXPECT_GT(adamw, 0);
  // A state of a third dtype, m and v apart, a master that is not fp32: refused.
  Program q;
  auto t = [&](const char* name, DType dt) {
    return q.add_tensor(name, {4}, dt, Role::optimizer_state);
  };
  const int w = t("w", DType::bf16), g = t("g", DType::bf16), m16 = t("m16", DType::f16),
            m32 = t("m32", DType::f32), vb = t("vb", DType::bf16), master16 = t("ms", DType::bf16);
  auto step = [&](const char* name, TensorIds in) -> Op& {
    Op& op = q.add_op(OpKind::adamw_step, name, in, {});
    return op;
  };
  step("f16 state", {w, g, m16, m16});
  step("m and v apart", {w, g, m32, vb});
  step("bf16 master", {w, g, m32, m32, master16});
  step("fine", {w, g, m32, m32});
  const std::vector<void*> qdata(q.tensors.size(), reinterpret_cast<void*>(std::uintptr_t{64}));
  for (std::size_t i = 0; i < 3; ++i)
    EXPECT_THROW(optimizer_operands(decode_operands(q, i, qdata)), InternalError) << i;
  EXPECT_NO_THROW(optimizer_operands(decode_operands(q, 3, qdata)));
  // The table says so too: v of another dtype than m, a master that is not fp32.
  EXPECT_EQ(operand_of_another_dtype(decode_operands(q, 1, qdata))->tensor->name, "vb");
  EXPECT_EQ(operand_of_another_dtype(decode_operands(q, 2, qdata))->tensor->name, "ms");
  EXPECT_EQ(operand_of_another_dtype(decode_operands(q, 3, qdata)), nullptr);
}

}  // namespace
}  // namespace vrambench

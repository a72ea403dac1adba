// The operand decoder both executors read an op through: every kind's operands bound in its
// signature's order and found by the signature's names (optional ones absent when left out), the
// workspace apart, ops that do not match their signature or are not bound refused, and the figures
// read off the operands taken from the operand the signature names.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/presets.h"
#include "device/operands.h"
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

// The ops whose kernel, reading every operand in the op's dtype, would misread one stored in
// another: none in the lean programs, whose operands share their op's dtype but those the table
// types (statistics, masks, token ids, optimizer state); in the hf step, where PyTorch mixes them:
// PEFT's fp32 adapters over a bf16 base, llama's RMSNorm over its fp32 copy of x.
TEST(Operands, MixedDtypesAreFoundWhereTheStepMixesThem) {
  auto mixed = [](const RunConfig& cfg) {
    const Program p = build_program(cfg, 64);
    // Never read: the decoder binds pointers, operand_of_another_dtype reads dtypes.
    const std::vector<void*> data(p.tensors.size(), reinterpret_cast<void*>(std::uintptr_t{64}));
    std::vector<std::string> found;
    for (std::size_t i = 0; i < p.ops.size(); ++i) {
      const Operands a = decode_operands(p, i, data);
      if (const Operand* o = operand_of_another_dtype(a))
        found.push_back(p.ops[i].name.str() + ": " + o->tensor->name.str());
    }
    return found;
  };
  auto config = [](const char* preset, Framework framework, Precision dtype, Finetune finetune) {
    RunConfig cfg;
    cfg.model = find_preset(preset).model;
    cfg.seq = 16;
    cfg.framework = framework;
    cfg.dtype = dtype;
    cfg.finetune = finetune;
    cfg.dropout = 0.1;
    return cfg;
  };
  for (const char* preset : {"tiny", "tiny-llama"})
    for (Precision dtype : {Precision::fp32, Precision::bf16, Precision::fp16})
      for (Finetune finetune : {Finetune::full, Finetune::lora, Finetune::qlora})
        for (Attention attention : {Attention::eager, Attention::flash})
          for (Recompute recompute : {Recompute::none, Recompute::selective, Recompute::full}) {
            RunConfig cfg = config(preset, Framework::lean, dtype, finetune);
            cfg.attention = attention;
            cfg.recompute = recompute;
            validate(cfg);
            const std::vector<std::string> found = mixed(cfg);
            EXPECT_TRUE(found.empty()) << preset << " " << to_string(dtype) << " "
                                       << to_string(finetune) << ": " << found.front();
          }
  // fp32 has one dtype throughout, in hf too.
  for (const char* preset : {"tiny", "tiny-llama"})
    for (Finetune finetune : {Finetune::full, Finetune::lora, Finetune::qlora}) {
      const RunConfig cfg = config(preset, Framework::hf, Precision::fp32, finetune);
      validate(cfg);
      EXPECT_TRUE(mixed(cfg).empty()) << preset << " " << to_string(finetune);
    }
  const RunConfig lora = config("tiny", Framework::hf, Precision::bf16, Finetune::lora);
  const std::vector<std::string> found = mixed(lora);
  ASSERT_FALSE(found.empty());
  EXPECT_EQ(found.front(), "layer0.attn.qkv.lora: layer0.attn.qkv") << found.front();
  // LlamaRMSNorm upcasts x: an fp32 x and dx beside a 16-bit y and dy are the kernels' own
  // (cuda/rmsnorm.h), so the full-training step has none; its LoRA step's fp32 adapters do.
  const RunConfig llama = config("tiny-llama", Framework::hf, Precision::bf16, Finetune::full);
  EXPECT_TRUE(mixed(llama).empty()) << mixed(llama).front();
  const RunConfig llama_lora = config("tiny-llama", Framework::hf, Precision::bf16, Finetune::lora);
  ASSERT_FALSE(mixed(llama_lora).empty());
  EXPECT_EQ(mixed(llama_lora).front(), "layer0.attn.q.lora: layer0.attn.qkv");
}

// Only fp32 for RMSNorm's x, and dx in x's dtype.
TEST(Operands, RmsNormTakesAnFp32InputAndNothingElse) {
  Program p;
  const int x32 = p.add_tensor("x32", {4, 8}, DType::f32, Role::transient);
  const int x16 = p.add_tensor("x16", {4, 8}, DType::f16, Role::transient);
  const int w = p.add_tensor("w", {8}, DType::bf16, Role::weight);
  const int y = p.add_tensor("y", {4, 8}, DType::bf16, Role::transient);
  const int rstd = p.add_tensor("rstd", {4}, DType::f32, Role::transient);
  const int dx32 = p.add_tensor("dx32", {4, 8}, DType::f32, Role::transient);
  const int dx16 = p.add_tensor("dx16", {4, 8}, DType::bf16, Role::transient);
  p.add_op(OpKind::rmsnorm_fwd, "fp32 x", {x32, w}, {y, rstd});
  p.add_op(OpKind::rmsnorm_fwd, "fp16 x", {x16, w}, {y, rstd});
  p.add_op(OpKind::rmsnorm_bwd, "fp32 dx", {y, x32, w, rstd}, {dx32});
  p.add_op(OpKind::rmsnorm_bwd, "bf16 dx", {y, x32, w, rstd}, {dx16});
  const std::vector<void*> data(p.tensors.size(), reinterpret_cast<void*>(std::uintptr_t{64}));
  auto flagged = [&](std::size_t op) -> std::string {
    const Operands a = decode_operands(p, op, data);
    const Operand* o = operand_of_another_dtype(a);
    return o ? o->tensor->name.str() : "";
  };
  EXPECT_EQ(flagged(0), "");
  EXPECT_EQ(flagged(1), "x16");
  EXPECT_EQ(flagged(2), "");
  EXPECT_EQ(flagged(3), "dx16");
}

}  // namespace
}  // namespace vrambench

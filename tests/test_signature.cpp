// The op signature table: every kind has its row, the builder's programs match it, and ops that do
// not (operand counts, workspace placement, attributes) are refused by name.
#include <gtest/gtest.h>

#include <set>
#include <string>

#include "core/error.h"
#include "model/families.h"
#include "program/signature.h"

namespace vrambench {
namespace {

TEST(Signature, EveryKindHasItsOwnRow) {
  std::set<std::string_view> names;
  for (std::size_t k = 0; k < kOpKindCount; ++k) {
    const OpSignature& s = signature(static_cast<OpKind>(k));
    EXPECT_EQ(static_cast<std::size_t>(s.kind), k);
    EXPECT_FALSE(s.name.empty());
    names.insert(s.name);
    EXPECT_LE(s.min_inputs(), s.max_inputs());
    EXPECT_LE(s.min_outputs(), s.max_outputs());
  }
  EXPECT_EQ(names.size(), kOpKindCount);
  EXPECT_EQ(to_string(OpKind::flash_bwd), "flash_bwd");
}

TEST(Signature, OptionalOperandsWidenTheCounts) {
  const OpSignature& linear = signature(OpKind::linear_bwd);  // dy, x, w -> dx, dw, [db]
  EXPECT_EQ(linear.min_inputs(), 3u);
  EXPECT_EQ(linear.max_inputs(), 3u);
  EXPECT_EQ(linear.min_outputs(), 2u);
  EXPECT_EQ(linear.max_outputs(), 3u);
  const OpSignature& adam = signature(OpKind::adamw_step);  // w, grad, m, v, [master] -> nothing
  EXPECT_EQ(adam.min_inputs(), 4u);
  EXPECT_EQ(adam.max_inputs(), 5u);
  EXPECT_EQ(adam.max_outputs(), 0u);
}

// Executors find operands by these names (device/operands.h): each list names its operands apart.
TEST(Signature, OperandNamesAreUniqueInEachList) {
  EXPECT_EQ(operand_name("[wpe[P,H]]"), "wpe");
  EXPECT_EQ(operand_name("tokens[B,S] i32"), "tokens");
  EXPECT_EQ(operand_name("[absmax2 f32]"), "absmax2");
  EXPECT_EQ(operand_name("[master]"), "master");
  EXPECT_EQ(operand_name("dqkv"), "dqkv");
  for (std::size_t k = 0; k < kOpKindCount; ++k) {
    const OpSignature& s = signature(static_cast<OpKind>(k));
    auto unique = [&](const auto& listed) {
      std::set<std::string_view> names;
      std::size_t n = 0;
      for (std::string_view o : listed) {
        if (o.empty()) continue;
        EXPECT_FALSE(operand_name(o).empty()) << s.name << ": " << o;
        names.insert(operand_name(o));
        ++n;
      }
      EXPECT_EQ(names.size(), n) << s.name;
    };
    unique(s.inputs);
    unique(s.outputs);
  }
}

// What a listing says of an operand's dtype: a dtype of its own, "any" (the kernels convert), or
// "=x", the dtype of an input x of the same kind; nothing else.
TEST(Signature, DtypeWordsAreDtypesAnyOrAnInputsDtype) {
  EXPECT_EQ(operand_dtype("mean[M] f32"), "f32");
  EXPECT_EQ(operand_dtype("[absmax2 f32]"), "f32");
  EXPECT_EQ(operand_dtype("[dw =w]"), "=w");
  EXPECT_EQ(operand_dtype("x[M,H] any"), "any");
  EXPECT_EQ(operand_dtype("[wpe[P,H]]"), "");
  EXPECT_TRUE(of_free_dtype("dx =x"));
  EXPECT_TRUE(of_free_dtype("b any"));
  EXPECT_FALSE(of_free_dtype("mask u8"));
  EXPECT_FALSE(of_free_dtype("dy"));
  int free = 0;
  for (std::size_t k = 0; k < kOpKindCount; ++k) {
    const OpSignature& s = signature(static_cast<OpKind>(k));
    std::set<std::string_view> inputs;
    for (std::string_view o : s.inputs)
      if (!o.empty()) inputs.insert(operand_name(o));
    auto check = [&](const auto& list) {
      for (std::string_view o : list) {
        const std::string_view d = operand_dtype(o);
        if (o.empty() || d.empty()) continue;
        free += of_free_dtype(o);
        if (d.front() == '=') {
          EXPECT_TRUE(inputs.count(d.substr(1))) << s.name << ": " << o << " names no input";
        } else {
          EXPECT_TRUE(d == "any" || d == "f32" || d == "u8" || d == "i32" || d == "i64")
              << s.name << ": " << o;
        }
      }
    };
    check(s.inputs);
    check(s.outputs);
  }
  EXPECT_GE(free, 10);  // the hf step's mixed operands are marked
}

// Every op of every kind of program the builder makes matches its signature.
TEST(Signature, BuiltProgramsMatchTheTable) {
  std::set<OpKind> seen;
  for (const char* preset : {"tiny", "tiny-llama"})
    for (Attention attention : {Attention::eager, Attention::flash})
      for (Optimizer optimizer : {Optimizer::adamw, Optimizer::sgd})
        for (double dropout : {0.0, 0.1}) {
          RunConfig cfg;
          cfg.model = find_preset(preset).model;
          cfg.seq = 16;
          cfg.attention = attention;
          cfg.optimizer = optimizer;
          cfg.dropout = dropout;
          const Program p = build_program(cfg, 4096);
          for (const Op& op : p.ops) {
            EXPECT_NO_THROW(check_op(p, op)) << op.name;
            seen.insert(op.kind);
          }
        }
  // The fine-tuning recipes: frozen, quantised (4-bit with and without double quantisation, int8)
  // bases under adapters with and without LoRA dropout, 8-bit and paged optimizers.
  for (const char* preset : {"tiny", "tiny-llama"})
    for (QuantKind quant : {QuantKind::none, QuantKind::nf4, QuantKind::fp4, QuantKind::int8})
      for (Toggle nested : {Toggle::on, Toggle::off}) {
        RunConfig cfg;
        cfg.model = find_preset(preset).model;
        cfg.seq = 16;
        cfg.finetune = Finetune::lora;
        cfg.quant = quant;
        cfg.double_quant = nested;
        cfg.lora_dropout = nested == Toggle::on ? 0.1 : 0.0;
        cfg.optimizer =
            quant == QuantKind::int8 ? Optimizer::paged_adamw_8bit : Optimizer::adamw_8bit;
        cfg.lora_rank = 64;  // B [H, 64] of tiny's H = 64: 4096 elements, 8-bit state
        validate(cfg);
        const Program p = build_program(cfg, 4096);
        for (const Op& op : p.ops) {
          EXPECT_NO_THROW(check_op(p, op)) << op.name;
          seen.insert(op.kind);
        }
      }
  // The hf framework: casts of autocast and RMSNorm's upcast; the other families' q/k norms and
  // soft-capping.
  for (const char* preset : {"tiny", "tiny-llama", "tiny-qwen3", "tiny-gemma2"})
    for (Precision dtype : {Precision::bf16, Precision::amp_bf16}) {
      RunConfig cfg;
      cfg.model = find_preset(preset).model;
      cfg.seq = 16;
      cfg.framework = Framework::hf;
      cfg.dtype = dtype;
      cfg.attention = Attention::eager;
      validate(cfg);
      const Program p = build_program(cfg, 4096);
      for (const Op& op : p.ops) {
        EXPECT_NO_THROW(check_op(p, op)) << op.name;
        seen.insert(op.kind);
      }
    }
  // One rank's program of a sharded strategy: the collectives.
  for (Strategy strategy : {Strategy::zero2, Strategy::fsdp}) {
    RunConfig cfg;
    cfg.model = find_preset("tiny-llama").model;
    cfg.seq = 16;
    cfg.strategy = strategy;
    cfg.gpus = 4;
    validate(cfg);
    const Program p = build_program(cfg, 4096);
    for (const Op& op : p.ops) {
      EXPECT_NO_THROW(check_op(p, op)) << op.name;
      seen.insert(op.kind);
    }
  }
  // A mixture of experts, its experts adapted by LoRA: the router, the dispatch, the grouped
  // GEMMs, the combine and the folding of the adapters into the experts' weights.
  for (Framework framework : {Framework::lean, Framework::hf}) {
    RunConfig cfg;
    cfg.model = find_preset("tiny-mixtral").model;
    cfg.seq = 16;
    cfg.framework = framework;
    cfg.finetune = Finetune::lora;
    cfg.lora_targets = parse_lora_targets("q_proj,experts.gate_up_proj,experts.down_proj");
    cfg.model.router_aux_loss = framework == Framework::hf;  // the load-balancing loss's kinds
    cfg.model.router_aux_coef = 0.01;
    validate(cfg);
    const Program p = build_program(cfg, 4096);
    for (const Op& op : p.ops) {
      EXPECT_NO_THROW(check_op(p, op)) << op.name;
      seen.insert(op.kind);
    }
  }
  // The preference trainers: the fused LM head's log-probabilities and the DPO and KTO losses.
  for (Trainer trainer : {Trainer::dpo, Trainer::kto}) {
    RunConfig cfg;
    cfg.model = find_preset("tiny-llama").model;
    cfg.seq = 16;
    cfg.framework = Framework::hf;
    cfg.trainer = trainer;
    validate(cfg);
    const Program p = build_program(cfg, 4096);
    for (const Op& op : p.ops) {
      EXPECT_NO_THROW(check_op(p, op)) << op.name;
      seen.insert(op.kind);
    }
  }
  EXPECT_EQ(seen.size(), kOpKindCount) << "some kind is never built";
}

struct Small {
  Program p;
  int a, b, c, ws;
  Small() {
    a = p.add_tensor("a", {4}, DType::f32, Role::transient);
    b = p.add_tensor("b", {4}, DType::f32, Role::transient);
    c = p.add_tensor("c", {4}, DType::f32, Role::transient);
    ws = p.add_tensor("ws", {64}, DType::u8, Role::workspace);
  }
};

TEST(Signature, AddOpRefusesWrongCountsAndWorkspaceBeforeOperands) {
  Small s;
  EXPECT_THROW(s.p.add_op(OpKind::add, "one input", {s.a}, {s.c}), InternalError);
  EXPECT_THROW(s.p.add_op(OpKind::add, "no output", {s.a, s.b}, {}), InternalError);
  EXPECT_THROW(s.p.add_op(OpKind::add, "unknown", {s.a, 99}, {s.c}), InternalError);
  EXPECT_THROW(s.p.add_op(OpKind::add, "ws first", {s.ws, s.a, s.b}, {s.c}), InternalError);
  EXPECT_NO_THROW(s.p.add_op(OpKind::add, "ws last", {s.a, s.b, s.ws}, {s.c}));
  try {
    s.p.add_op(OpKind::gelu_bwd, "named", {s.a}, {s.c});
    FAIL() << "gelu_bwd takes two inputs";
  } catch (const InternalError& e) {
    EXPECT_NE(std::string(e.what()).find("'named' (gelu_bwd)"), std::string::npos) << e.what();
  }
  EXPECT_EQ(s.p.ops.size(), 1u);
}

TEST(Signature, AttributesAreCheckedForTheKindsThatUseThem) {
  Small s;
  Op& scores = s.p.add_op(OpKind::attn_scores, "scores", {s.a}, {s.b});
  EXPECT_THROW(check_op(s.p, scores), InternalError);  // no heads
  scores.heads = 4;
  scores.kv_heads = 3;
  EXPECT_THROW(check_op(s.p, scores), InternalError);  // 3 does not divide 4
  scores.kv_heads = 2;
  EXPECT_NO_THROW(check_op(s.p, scores));
  scores.dropout_p = 0.1;
  EXPECT_THROW(check_op(s.p, scores), InternalError);  // eager scores have no dropout

  Op& drop = s.p.add_op(OpKind::dropout_fwd, "drop", {s.a}, {s.b, s.c});
  drop.dropout_p = 1.0;
  EXPECT_THROW(check_op(s.p, drop), InternalError);
  drop.dropout_p = 0.5;
  EXPECT_NO_THROW(check_op(s.p, drop));
  drop.heads = 2;
  drop.kv_heads = 2;
  EXPECT_THROW(check_op(s.p, drop), InternalError);  // heads on a kind without them

  Op& sum = s.p.add_op(OpKind::add, "sum", {s.a, s.b}, {s.c});
  sum.accumulate = true;
  EXPECT_THROW(check_op(s.p, sum), InternalError);  // add writes no parameter gradient
}

TEST(Signature, QkvShapeReadsTheHeadSize) {
  Program p;
  const int qkv = p.add_tensor("qkv", {2, 5, (4 + 2 * 2) * 8}, DType::f32, Role::transient);
  Op op;
  op.name = "attn";
  op.heads = 4;
  op.kv_heads = 2;
  const QkvShape s = qkv_shape(op, p.tensor(qkv));
  EXPECT_EQ(s.batch, 2);
  EXPECT_EQ(s.seq, 5);
  EXPECT_EQ(s.head_dim, 8);
  op.kv_heads = 4;  // (4 + 8) does not divide 64
  EXPECT_THROW(qkv_shape(op, p.tensor(qkv)), InternalError);
}

// swiglu reads gate and up apart, or packed in one [M, 2F] gate|up (Phi-3's gate_up_proj) with one
// gradient; anything else is refused.
TEST(Signature, GateShapeTellsPackedFromApart) {
  Program p;
  const int gate = p.add_tensor("gate", {3, 4, 10}, DType::f32, Role::transient);
  const int up = p.add_tensor("up", {3, 4, 10}, DType::f32, Role::transient);
  const int packed = p.add_tensor("gate_up", {3, 4, 20}, DType::f32, Role::transient);
  const int y = p.add_tensor("y", {3, 4, 10}, DType::f32, Role::transient);
  const int dpacked = p.add_tensor("dgate_up", {3, 4, 20}, DType::f32, Role::transient);
  const Op apart = p.add_op(OpKind::swiglu_fwd, "apart", {gate, up}, {y});
  const GateShape a = gate_shape(apart, p.tensor(y), p.tensor(gate));
  EXPECT_EQ(a.rows, 12);
  EXPECT_EQ(a.width, 10);
  EXPECT_FALSE(a.packed);
  const Op fwd = p.add_op(OpKind::swiglu_fwd, "packed", {packed}, {y});
  const GateShape f = gate_shape(fwd, p.tensor(y), p.tensor(packed));
  EXPECT_EQ(f.rows, 12);
  EXPECT_EQ(f.width, 10);
  EXPECT_TRUE(f.packed);
  EXPECT_THROW(gate_shape(fwd, p.tensor(y), p.tensor(gate)), InternalError);  // not 2F wide
  const Op bwd = p.add_op(OpKind::swiglu_bwd, "bwd", {y, packed}, {dpacked});
  EXPECT_TRUE(gate_shape(bwd, p.tensor(y), p.tensor(packed)).packed);
  const Op two = p.add_op(OpKind::swiglu_bwd, "two", {y, packed}, {gate, up});
  EXPECT_THROW(gate_shape(two, p.tensor(y), p.tensor(packed)), InternalError);
}

}  // namespace
}  // namespace vrambench

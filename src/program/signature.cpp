// The op signature table and the checks that read it.
#include "program/signature.h"

#include <fmt/format.h>

#include <string>

#include "core/error.h"

namespace vrambench {
namespace {

// One entry per row of the op table, in the enum's order.
// clang-format off
#define VB_LIST(...) {__VA_ARGS__}
#define VB_OP(kind, family, inputs, outputs, attrs, note) \
  {OpKind::kind, #kind, VB_LIST inputs, VB_LIST outputs, OpAttrs VB_LIST attrs, note},
constexpr std::array<OpSignature, kOpKindCount> kSignatures{{
#include "program/ops.def"
}};
#undef VB_LIST
// clang-format on

constexpr bool in_enum_order() {
  for (std::size_t i = 0; i < kSignatures.size(); ++i)
    if (static_cast<std::size_t>(kSignatures[i].kind) != i) return false;
  return true;
}
static_assert(in_enum_order(), "one row per OpKind, in the enum's order");

// The operand counts of every kind, worked out once from the table: a build checks thousands of
// ops, and counting the operand names of the table for each one showed in its profile.
struct Arity {
  std::size_t min_inputs, max_inputs, min_outputs, max_outputs;
};
constexpr std::array<Arity, kOpKindCount> arities(const std::array<OpSignature, kOpKindCount>& t) {
  std::array<Arity, kOpKindCount> out{};
  for (std::size_t i = 0; i < kOpKindCount; ++i)
    out[i] = {t[i].min_inputs(), t[i].max_inputs(), t[i].min_outputs(), t[i].max_outputs()};
  return out;
}
constexpr std::array<Arity, kOpKindCount> kArity = arities(kSignatures);

// Operand list as "a, b, [c]" for messages.
template <std::size_t N>
std::string listed(const std::array<std::string_view, N>& operands) {
  std::string out;
  for (std::string_view o : operands)
    if (!o.empty()) out += fmt::format("{}{}", out.empty() ? "" : ", ", o);
  return out.empty() ? std::string("nothing") : out;
}

[[noreturn]] void fail(const Op& op, const std::string& what) {
  throw InternalError(fmt::format("op '{}' ({}): {}", op.name, to_string(op.kind), what));
}

// Tensors of `ids` before the first workspace tensor; after it only workspace may follow.
std::size_t counted(const Program& program, const Op& op, const TensorIds& ids,
                    std::string_view list) {
  std::size_t n = 0;
  bool workspace = false;
  for (int id : ids) {
    if (id < 0 || id >= static_cast<int>(program.tensors.size()))
      fail(op, fmt::format("its {} name tensor {}, which the program does not have", list, id));
    if (program.tensors[static_cast<std::size_t>(id)].role == Role::workspace) {
      workspace = true;
    } else if (workspace) {
      fail(op,
           fmt::format("its {} list '{}' after a workspace tensor", list, program.tensor(id).name));
    } else {
      ++n;
    }
  }
  return n;
}

}  // namespace

const OpSignature& signature(OpKind kind) {
  return kSignatures.at(static_cast<std::size_t>(kind));
}

std::string_view to_string(OpKind k) {
  return static_cast<std::size_t>(k) < kSignatures.size() ? signature(k).name : "?";
}

void check_operands(const Program& program, const Op& op) {
  const OpSignature& s = signature(op.kind);
  const Arity& a = kArity[static_cast<std::size_t>(op.kind)];
  const std::size_t in = counted(program, op, op.inputs, "inputs");
  const std::size_t out = counted(program, op, op.outputs, "outputs");
  for (int id : op.held)
    if (id < 0 || id >= static_cast<int>(program.tensors.size()))
      fail(op, fmt::format("it holds tensor {}, which the program does not have", id));
  if (in < a.min_inputs || in > a.max_inputs || out < a.min_outputs || out > a.max_outputs)
    fail(op, fmt::format("has {} inputs and {} outputs; it reads {} and writes {}", in, out,
                         listed(s.inputs), listed(s.outputs)));
}

void check_op(const Program& program, const Op& op) {
  check_operands(program, op);
  const OpAttrs& uses = signature(op.kind).attrs;
  if (uses.heads) {
    if (op.heads <= 0 || op.kv_heads <= 0 || op.heads % op.kv_heads != 0)
      fail(op, fmt::format("{} heads and {} kv heads: kv heads must divide heads", op.heads,
                           op.kv_heads));
  } else if (op.heads != 0 || op.kv_heads != 0) {
    fail(op, "heads are set on a kind that has none");
  }
  if (uses.dropout ? !(op.dropout_p >= 0.0 && op.dropout_p < 1.0) : op.dropout_p != 0.0)
    fail(op, fmt::format("dropout probability {} {}", op.dropout_p,
                         uses.dropout ? "is not in [0, 1)" : "on a kind without dropout"));
  if (uses.eps && !(op.eps > 0.0f)) fail(op, fmt::format("eps {} is not positive", op.eps));
  if (uses.grad_scale && !(op.grad_scale > 0.0f))
    fail(op, fmt::format("grad_scale {} is not positive", op.grad_scale));
  if (op.accumulate && !uses.accumulate) fail(op, "accumulates, but its kind writes no gradient");
  if (uses.quant) {
    if (op.quant == QuantKind::none || op.rows <= 0 || op.row_offset < 0)
      fail(op, fmt::format("quant {} over rows {}+{}: a quantised kind and rows are needed",
                           to_string(op.quant), op.row_offset, op.rows));
  } else if (op.quant != QuantKind::none || op.rows != 0 || op.row_offset != 0) {
    fail(op, "quantisation attributes on a kind without them");
  }
  if (uses.lora) {
    if (!(op.lora_scale > 0.0f) || op.col_offset < 0)
      fail(op, fmt::format("lora scale {} at column {}", op.lora_scale, op.col_offset));
  } else if (op.lora_scale != 0.0f || op.col_offset != 0) {
    fail(op, "LoRA attributes on a kind without them");
  }
  if (uses.norm_offset ? !(op.norm_offset == 0.0f || op.norm_offset == 1.0f)
                       : op.norm_offset != 0.0f)
    fail(op, fmt::format("norm offset {} {}", op.norm_offset,
                         uses.norm_offset ? "is not 0 or 1" : "on a kind without a norm"));
  if (op.gelu_gate && !uses.gelu_gate) fail(op, "gelu_gate on a kind without a gate");
  if (uses.embed_scale ? !(op.embed_scale > 0.0f) : op.embed_scale != 1.0f)
    fail(op, fmt::format("embedding scale {} {}", op.embed_scale,
                         uses.embed_scale ? "is not positive" : "on a kind without one"));
  if (!uses.routing && (op.routing != Routing::balanced || op.norm_topk))
    fail(op, "routing attributes on a kind without a router");
  if (uses.aux ? !(op.aux_coef > 0.0f) : op.aux_coef != 0.0f)
    fail(op, fmt::format("load-balancing coefficient {} {}", op.aux_coef,
                         uses.aux ? "is not positive" : "on a kind without the loss"));
  if (uses.preference ? op.trainer == Trainer::sft || !(op.beta > 0.0f)
                      : op.trainer != Trainer::sft || op.beta != 0.0f)
    fail(op, fmt::format("trainer {} with beta {} {}", to_string(op.trainer), op.beta,
                         uses.preference ? "is not a preference loss's" : "on a kind without one"));
  const bool capped = op.kind == OpKind::softcap_fwd || op.kind == OpKind::softcap_bwd;
  if (uses.softcap ? !(capped ? op.softcap > 0.0f : op.softcap >= 0.0f) : op.softcap != 0.0f)
    fail(op, fmt::format("softcap {} {}", op.softcap,
                         uses.softcap ? "out of range" : "on a kind without one"));
}

GateShape gate_shape(const Op& op, const Tensor& y, const Tensor& gate) {
  // Packed, the forward reads gate|up alone and the backward dy and gate|up.
  const bool packed = op.inputs.size() == (op.kind == OpKind::swiglu_fwd ? 1u : 2u);
  const std::int64_t width = y.shape.empty() ? 0 : y.shape.back();
  if (width <= 0 || gate.shape.empty() || gate.shape.back() != (packed ? 2 * width : width) ||
      gate.elements() != (packed ? 2 : 1) * y.elements())
    fail(op, fmt::format("'{}' must be [M,{}] beside '{}' [M,{}]", gate.name, packed ? "2F" : "F",
                         y.name, "F"));
  if (op.kind == OpKind::swiglu_bwd && op.outputs.size() != (packed ? 1u : 2u))
    fail(op, packed ? "packed gate|up has one gradient, d(gate|up)" : "dgate and dup are apart");
  return {y.elements() / width, width, packed};
}

QkvShape qkv_shape(const Op& op, const Tensor& qkv) {
  if (qkv.shape.size() != 3) fail(op, fmt::format("'{}' must be [B,S,Q]", qkv.name));
  if (op.heads <= 0 || op.kv_heads <= 0 || op.heads % op.kv_heads != 0)
    fail(op, "heads must be a multiple of kv_heads");
  const std::int64_t columns_per_head = qkv_width(op.heads, op.kv_heads, 1);
  if (qkv.shape[2] % columns_per_head != 0)
    fail(op, fmt::format("'{}' has {} columns, not (A + 2K) * D", qkv.name, qkv.shape[2]));
  return {qkv.shape[0], qkv.shape[1], op.heads, op.kv_heads, qkv.shape[2] / columns_per_head};
}

}  // namespace vrambench

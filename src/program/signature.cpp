// The op signature table and the checks that read it.
#include "program/signature.h"

#include <fmt/format.h>

#include <string>

#include "core/error.h"

namespace vrambench {
namespace {

// The table reads as a table: one kind, its operands and its attributes per entry.
// clang-format off
constexpr std::array<OpSignature, kOpKindCount> kSignatures{{
    {OpKind::embedding_fwd, "embedding_fwd", {"tokens[B,S] i32", "wte[V,H]", "[wpe[P,H]]"},
     {"x[B,S,H]"}, {.embed_scale = true}, "x = embed_scale (wte[tokens] + wpe)"},
    {OpKind::embedding_bwd, "embedding_bwd", {"dx[B,S,H]", "tokens"}, {"dwte[V,H]", "[dwpe[P,H]]"},
     {.accumulate = true, .embed_scale = true},
     "of embed_scale dx; accumulate adds into dwte only, which the tied lm head wrote first; dwpe "
     "has no other writer and is always overwritten"},
    {OpKind::layernorm_fwd, "layernorm_fwd", {"x[M,H]", "w[H]", "[b[H]]"},
     {"y[M,H]", "mean[M] f32", "rstd[M] f32"}, {.eps = true}, ""},
    {OpKind::layernorm_bwd, "layernorm_bwd", {"dy", "x", "w", "mean", "rstd"},
     {"dx", "[dw]", "[db]"}, {.accumulate = true}, "a frozen norm (fine-tuning) writes dx alone"},
    {OpKind::rmsnorm_fwd, "rmsnorm_fwd", {"x[M,H] any", "w[H] any"}, {"y[M,H]", "rstd[M] f32"},
     {.eps = true, .norm_offset = true}, "y = x rstd (norm_offset + w)"},
    {OpKind::rmsnorm_bwd, "rmsnorm_bwd", {"dy", "x any", "w any", "rstd"}, {"dx =x", "[dw =w]"},
     {.accumulate = true, .norm_offset = true}, "a frozen norm (fine-tuning) writes dx alone"},
    {OpKind::linear_fwd, "linear_fwd", {"x[M,In]", "w[Out,In]", "[b[Out]]"}, {"y[M,Out]"}, {},
     "y = x w^T + b"},
    {OpKind::linear_bwd, "linear_bwd", {"dy[M,Out]", "x[M,In]", "w[Out,In]"},
     {"dx[M,In]", "dw[Out,In]", "[db[Out]]"}, {.accumulate = true}, ""},
    {OpKind::gelu_fwd, "gelu_fwd", {"x"}, {"y"}, {}, "tanh approximation"},
    {OpKind::gelu_bwd, "gelu_bwd", {"dy", "x"}, {"dx"}, {}, ""},
    {OpKind::swiglu_fwd, "swiglu_fwd", {"gate[M,F]", "[up[M,F]]"}, {"y[M,F]"}, {.gelu_gate = true},
     "silu(gate) * up, or gelu(gate) * up (tanh approximation) with gelu_gate; without up, gate "
     "is gate|up [M,2F] (Phi-3's gate_up_proj)"},
    {OpKind::swiglu_bwd, "swiglu_bwd", {"dy", "gate", "[up]"}, {"dgate", "[dup]"},
     {.gelu_gate = true}, "packed (no up): one d(gate|up) [M,2F]"},
    {OpKind::rope_fwd, "rope_fwd", {"qkv[B,S,Q] any"}, {"qkv_rot[B,S,Q]"}, {.heads = true},
     "rotates the q and k parts, copies v"},
    {OpKind::rope_bwd, "rope_bwd", {"dqkv_rot any"}, {"dqkv"}, {.heads = true}, ""},
    {OpKind::attn_scores, "attn_scores", {"qkv[B,S,Q]"}, {"scores[B,A,S,S] any"}, {.heads = true},
     "q k^T / sqrt(D), causal (-inf above the diagonal); with scores of another dtype (autocast's "
     "fp32 mask promotes them) the product goes through the op's first held tensor of their "
     "shape in its dtype"},
    {OpKind::softmax_fwd, "softmax_fwd", {"scores any"}, {"probs[B,A,S,S]"}, {}, "row softmax"},
    {OpKind::softmax_bwd, "softmax_bwd", {"dprobs", "probs"}, {"dscores any"}, {}, ""},
    {OpKind::attn_values, "attn_values", {"probs[B,A,S,S]", "qkv"}, {"y[B,S,A*D]"},
     {.heads = true}, "probs v; query head a uses kv head a / (A/K)"},
    {OpKind::attn_values_bwd, "attn_values_bwd", {"dy[B,S,A*D]", "probs", "qkv"},
     {"dprobs[B,A,S,S]", "dqkv"}, {.heads = true}, "writes the v part of dqkv, zeroes q and k"},
    {OpKind::attn_scores_bwd, "attn_scores_bwd", {"dscores", "qkv", "dqkv"}, {"dqkv"},
     {.heads = true}, "writes the q and k parts of dqkv in place"},
    {OpKind::flash_fwd, "flash_fwd", {"qkv[B,S,Q]"}, {"y[B,S,A*D]", "lse[B,A,S] f32"},
     {.heads = true, .dropout = true, .softcap = true},
     "causal, the scores capped where softcap > 0; scratch: flash_fwd_scratch_bytes"},
    {OpKind::flash_bwd, "flash_bwd", {"dy", "qkv", "y", "lse"}, {"dqkv[B,S,Q]"},
     {.heads = true, .dropout = true, .softcap = true},
     "scratch: flash_bwd_scratch_bytes, an fp32 dq accumulator and row sums first"},
    {OpKind::dropout_fwd, "dropout_fwd", {"x"}, {"y", "mask u8"}, {.dropout = true},
     "y = x * mask / (1 - p), mask 1 = kept, seeded by Op::seed"},
    {OpKind::dropout_bwd, "dropout_bwd", {"dy", "mask"}, {"dx"}, {.dropout = true}, ""},
    {OpKind::add, "add", {"a", "b any"}, {"c"}, {}, "c = a + b (residual stream, gradient sums)"},
    {OpKind::cross_entropy_fwd, "cross_entropy_fwd", {"logits[M,V]", "targets[B,S] i32"},
     {"loss[1] f32", "lse[M] f32"}, {}, "the mean over M"},
    {OpKind::cross_entropy_bwd, "cross_entropy_bwd", {"logits", "targets", "lse"},
     {"dlogits[M,V]"}, {.grad_scale = true}, "of grad_scale x the mean loss"},
    {OpKind::adamw_step, "adamw_step", {"w", "grad", "m any", "v =m", "[master f32]"}, {},
     {.grad_scale = true, .optimizer = true},
     "updates w, m, v and master in place; grad is divided by grad_scale first; m and v fp32 "
     "or w's dtype (torch.optim keeps the state in the parameter's dtype)"},
    {OpKind::sgd_step, "sgd_step", {"w", "grad", "momentum any", "[master f32]"}, {},
     {.grad_scale = true, .optimizer = true},
     "updates w, momentum and master in place; grad is divided by grad_scale first; momentum "
     "fp32 or w's dtype"},
    {OpKind::dequantize, "dequantize", {"codes u8", "absmax", "[absmax2 f32]", "[offset f32]"},
     {"w[Out,In]"}, {.quant = true},
     "rows [row_offset, +rows) of w from 4-bit codes and a per-64 absmax (fp32, or 8-bit with "
     "absmax2 per 256 blocks and the offset under double quantisation) or int8 rows and their "
     "fp32 absmax; scratch: the rebuilt fp32 absmax under double quantisation"},
    {OpKind::linear_dgrad, "linear_dgrad", {"dy[M,Out]", "w[Out,In]"}, {"dx[M,In]"}, {},
     "dx = dy w (the weight is frozen: no dw, no saved input)"},
    {OpKind::lora_fwd, "lora_fwd", {"x[M,In]", "a[R,In]", "b[N,R]", "y[M,Out] any"},
     {"xa[M,R]", "y any"}, {.lora = true},
     "xa = x a^T; y[:, col_offset:+N] += lora_scale xa b^T, in place; with y of another dtype "
     "the product goes through the op's first held tensor of [M,N] in its dtype (lora_B's "
     "output), the sum in fp32"},
    {OpKind::lora_bwd, "lora_bwd", {"dy[M,Out] any", "x[M,In]", "xa[M,R]", "a", "b"},
     {"da[R,In]", "db[N,R]", "dxa[M,R]", "[dx[M,In]]"}, {.accumulate = true, .lora = true},
     "g = lora_scale dy[:, col_offset:+N]; db = g^T xa; dxa = g b; da = dxa^T x; dx = dxa a, "
     "added into dx with accumulate (the frozen base wrote it first); with dy of another dtype "
     "its columns are cast into the op's first held tensor of [M,N] in its dtype first"},
    {OpKind::adamw8bit_step, "adamw8bit_step",
     {"w", "grad", "m u8", "v u8", "m_absmax f32", "v_absmax f32", "[master f32]"}, {},
     {.grad_scale = true, .optimizer = true},
     "bitsandbytes' 8-bit AdamW: the moments dequantised per block of 256, updated in fp32, "
     "requantised with the new absmax; m and v may be paged"},
    {OpKind::cast, "cast", {"x"}, {"y"}, {},
     "y = x stored in y's dtype, element for element (autocast's casts, .float(), .to())"},
    {OpKind::qk_norm_fwd, "qk_norm_fwd", {"qkv[B,S,Q]", "q_w[D] any", "k_w[D] =q_w"},
     {"y[B,S,Q]", "rstd[B,S,A+K] f32"}, {.heads = true, .eps = true, .norm_offset = true},
     "RMSNorm of each query head (q_w) and key head (k_w) over its D columns; v copied"},
    {OpKind::qk_norm_bwd, "qk_norm_bwd", {"dy", "qkv", "q_w any", "k_w =q_w", "rstd"},
     {"dqkv", "[dq_w =q_w]", "[dk_w =q_w]"}, {.heads = true, .accumulate = true, .norm_offset = true},
     "dv is dy's v part; frozen norms (fine-tuning) write dqkv alone"},
    {OpKind::softcap_fwd, "softcap_fwd", {"x"}, {"y"}, {.softcap = true},
     "y = softcap tanh(x / softcap)"},
    {OpKind::softcap_bwd, "softcap_bwd", {"dy", "y"}, {"dx"}, {.softcap = true},
     "dx = dy (1 - (y / softcap)^2)"},
}};
// clang-format on

constexpr bool in_enum_order() {
  for (std::size_t i = 0; i < kSignatures.size(); ++i)
    if (static_cast<std::size_t>(kSignatures[i].kind) != i) return false;
  return true;
}
static_assert(in_enum_order(), "one row per OpKind, in the enum's order");
static_assert(static_cast<std::size_t>(OpKind::softcap_bwd) + 1 == kOpKindCount,
              "kOpKindCount counts every OpKind");

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

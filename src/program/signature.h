// The op signature table: for every OpKind its name, the tensors it reads and writes in order, and
// the Op attributes it uses, made of the rows of the op table (program/ops.def). The builder checks
// every op against it (Program::add_op the operand counts, build_program each op whole), the
// program listing (report/program_table.h) names kinds by it, and both executors read each op
// through it (op/operands.h checks the op and finds its operands by their names here); no
// executor keeps arity rules of its own.
//
// Operands are listed as "name[shape] dtype"; "[...]" around one marks it optional (present only
// when the model has it: biases, positions, master weights), and optional operands come last.
// Without a dtype an operand is stored in the op's dtype: its first output's (first input's when
// it writes none) that is not marked "any" or "=". "any": stored in any floating dtype, which the
// kernels convert (the hf step mixes them where PyTorch does: LlamaRMSNorm's fp32 input,
// autocast's and QLoRA's fp32 stream beside 16-bit branches, PEFT's fp32 adapters over a 16-bit
// base); "=x": stored in input x's dtype.
// Shapes: M = B*S rows, H hidden, A heads, K = kv heads, D = head size, Q = (A + 2K)*D packed q|k|v
// columns, F ffn, V vocab, P position rows; a mixture of experts' E experts, K experts a token
// goes to (M*K token-expert pairs), R the LoRA rank. Unless noted, an op overwrites its outputs;
// with `accumulate` it adds into its `grad` outputs. Tensors of role workspace may follow the
// listed inputs or outputs of any op and are not counted: the GEMM workspace as the last input of
// linear and attention GEMM ops and of the ops whose kernels sum over the rows (layernorm_bwd,
// rmsnorm_bwd, qk_norm_bwd: dw and db; embedding_bwd: the token sort and dwpe), which keep their
// fp32 partials there; an op's own scratch as its last output. Kernels find them by role.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "program/program.h"

namespace vrambench {

// The Op fields a kind reads.
struct OpAttrs {
  bool heads = false;        // heads, kv_heads: heads > 0, kv_heads > 0 dividing heads
  bool dropout = false;      // dropout_p in [0, 1) and seed; 0 for every other kind
  bool eps = false;          // eps > 0 (norms)
  bool grad_scale = false;   // grad_scale > 0 (loss backward, optimizer steps)
  bool optimizer = false;    // lr, beta1, beta2, adam_eps, weight_decay, momentum
  bool accumulate = false;   // may add into its grad outputs (tied weights); false for others
  bool quant = false;        // dequantize: quant (not none), double_quant, row_offset, rows
  bool lora = false;         // lora_fwd / lora_bwd: col_offset, lora_scale > 0
  bool norm_offset = false;  // norm_offset 0 or 1 (RMSNorm kinds)
  bool gelu_gate = false;    // gelu_gate (swiglu)
  bool embed_scale = false;  // embed_scale > 0 (embedding)
  bool softcap = false;      // softcap: > 0 for the softcap kinds, >= 0 for fused attention
  bool routing = false;      // router_topk(_bwd): routing and norm_topk
  bool aux = false;          // the load-balancing loss: aux_coef > 0
  bool preference = false;   // preference_loss(_bwd): trainer dpo or kto, beta > 0
};

struct OpSignature {
  OpKind kind{};
  std::string_view name;                    // "linear_fwd"
  std::array<std::string_view, 7> inputs;   // in order; "" after the last
  std::array<std::string_view, 4> outputs;  // likewise
  OpAttrs attrs;
  std::string_view note;  // what it computes, where the operands do not say

  constexpr std::size_t min_inputs() const { return count(inputs, false); }
  constexpr std::size_t max_inputs() const { return count(inputs, true); }
  constexpr std::size_t min_outputs() const { return count(outputs, false); }
  constexpr std::size_t max_outputs() const { return count(outputs, true); }

 private:
  template <std::size_t N>
  static constexpr std::size_t count(const std::array<std::string_view, N>& operands,
                                     bool optional_too) {
    std::size_t n = 0;
    for (const std::string_view& o : operands)
      if (!o.empty() && (optional_too || o.front() != '[')) ++n;
    return n;
  }
};

const OpSignature& signature(OpKind kind);

// An operand's name without the brackets of an optional one, its shape and its dtype, as executors
// ask for it: "[wpe[P,H]]" -> "wpe", "mask u8" -> "mask".
constexpr std::string_view operand_name(std::string_view listed) {
  if (!listed.empty() && listed.front() == '[') listed.remove_prefix(1);
  return listed.substr(0, listed.find_first_of("[] "));
}

// What an operand's listing says of its dtype: "" (the op's), a dtype ("f32", "u8"), "any" or
// "=name" (see above): "mean[M] f32" -> "f32", "dx =x" -> "=x".
constexpr std::string_view operand_dtype(std::string_view listed) {
  const std::size_t space = listed.find(' ');
  if (space == std::string_view::npos) return {};
  listed.remove_prefix(space + 1);
  return listed.substr(0, listed.find(']'));
}
// Whether the listing frees the operand from the op's dtype ("any" or "=name").
constexpr bool of_free_dtype(std::string_view listed) {
  const std::string_view d = operand_dtype(listed);
  return d == "any" || (!d.empty() && d.front() == '=');
}

// Throws InternalError naming the op when its operand counts (workspace tensors, which come last,
// not counted) differ from its signature. Program::add_op runs it as the op is added.
void check_operands(const Program& program, const Op& op);

// check_operands, and the attributes the kind uses (and the ones it must leave alone). Throws
// InternalError naming the op and what is wrong.
void check_op(const Program& program, const Op& op);

// The attention dimensions of an op that uses the heads attribute, read from its packed q|k|v
// tensor [B,S,Q]. Throws InternalError naming the op when the tensor does not fit them.
// A swiglu op's rows M and width F, and whether gate and up come packed in one [M,2F] operand
// (no up operand: Phi-3's gate_up_proj) or as two [M,F]. `y` is the output (forward) or dy.
struct GateShape {
  std::int64_t rows = 0, width = 0;
  bool packed = false;
};
GateShape gate_shape(const Op& op, const Tensor& y, const Tensor& gate);

struct QkvShape {
  std::int64_t batch = 0, seq = 0, heads = 0, kv_heads = 0, head_dim = 0;
};
QkvShape qkv_shape(const Op& op, const Tensor& qkv);

}  // namespace vrambench

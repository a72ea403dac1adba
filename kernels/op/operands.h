// An op as the kernels' adapters read it: checked against its signature, its tensors bound to their
// memory in the signature's order (workspace apart), and the figures both sides read off its
// operands (GEMM and LoRA dimensions, the attention shape, the quantised weight's and the 8-bit
// AdamW state's buffers, the optimizer's parameters). Plain C++: the CPU adapters
// (kernels/cpu/op_table.h) and the CUDA launchers (kernels/cuda/op_table.h) of the op table decode
// an op here, so an operand sits at the same place and is checked the same way on both.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "common/math.h"
#include "common/quant_math.h"
#include "core/name.h"
#include "core/units.h"
#include "program/program.h"
#include "program/signature.h"

namespace vrambench {

// One tensor of an op and its memory (nullptr for a tensor of no bytes).
struct Operand {
  const Tensor* tensor = nullptr;
  void* data = nullptr;
};

struct Operands {
  const Program& program;
  const Op& op;
  std::vector<Operand> in, out;  // the op's inputs and outputs, in its signature's order
  // Its held tensors (Op::held), in order; data nullptr where one is not bound.
  std::vector<Operand> held;
  // Its workspace tensor (the last one when inputs and outputs both list one), else nullptr / 0.
  void* workspace = nullptr;
  Bytes workspace_bytes = 0;

  // The input (output) the signature lists as `name` (see operand_name), or nullptr where it is
  // an optional one the op leaves out. A name the signature does not list throws InternalError.
  const Operand* input(std::string_view name) const;
  const Operand* output(std::string_view name) const;

  // Whether a write to `o` adds into it: the op accumulates and `o` is a gradient.
  bool accumulates(const Operand& o) const { return op.accumulate && o.tensor->role == Role::grad; }
  // The op's compute dtype: its first output's that the signature does not free from it ("any",
  // "=x"), or else its first such input's.
  DType dtype() const;

  // Its first held tensor of `shape` in `dtype` that is bound, or nullptr: where a kernel keeps
  // what PyTorch allocates there (a product in the op's dtype before its cast into an output of
  // another).
  const Operand* held_like(DType dtype, const Shape& shape) const;

  // `o`'s memory as the type a kernel reads it through, checked: an operand stored in another
  // dtype fails naming the op (a cast pointer would read it as garbage, or past its end).
  float* f32(const Operand& o) const { return static_cast<float*>(typed(o, DType::f32)); }
  const std::int32_t* i32(const Operand& o) const {
    return static_cast<const std::int32_t*>(typed(o, DType::i32));
  }
  std::uint8_t* u8(const Operand& o) const {
    return static_cast<std::uint8_t*>(typed(o, DType::u8));
  }
  std::int64_t* i64(const Operand& o) const {
    return static_cast<std::int64_t*>(typed(o, DType::i64));
  }
  std::int32_t* i32_out(const Operand& o) const {
    return static_cast<std::int32_t*>(typed(o, DType::i32));
  }
  void* typed(const Operand& o, DType dtype) const;

  // InternalError naming the op and its kind.
  [[noreturn]] void fail(std::string_view what) const;
  void require(bool ok, std::string_view what) const {
    if (!ok) fail(what);
  }
};

// program.ops[op_index] checked with check_op and bound to `data` (data[id] is tensor id's memory).
// Throws InternalError naming the op when it does not match its signature or a tensor of some bytes
// is not bound.
Operands decode_operands(const Program& program, std::size_t op_index,
                         const std::vector<void*>& data);

// The first operand of `a` stored in a dtype its signature does not allow, or nullptr: the cuda
// kernels read each operand in the op's dtype (dtype()) unless the signature says otherwise.
// An operand the table types ("rstd f32", "mask u8", "tokens i32", "[master f32]", here or
// wherever the table lists its name with a dtype) counts when it is stored in another; an "any"
// operand when it is not of a floating dtype, an "=x" one when it is not x's. The kinds that
// read several dtypes by design (cast, the loss's logits, quantised codes and scales) never count.
// The hf step mixes dtypes where PyTorch does (LlamaRMSNorm's fp32 input, autocast's and QLoRA's
// fp32 stream, PEFT's fp32 adapters over a 16-bit base): the signature marks those operands, the
// kernels take them, and the cpu executor computes in fp32 whatever the storage.
const Operand* operand_of_another_dtype(const Operands& a);

// Whether `a` runs in a mixed form: an operand its signature frees from the op's dtype ("any",
// "=x") is stored in another.
bool mixes_dtypes(const Operands& a);

inline std::int64_t last_dim(const Operand& o) {
  return o.tensor->shape.empty() ? 1 : o.tensor->shape.back();
}
inline std::int64_t rows(const Operand& o) {
  return o.tensor->elements() / last_dim(o);
}

// linear_fwd, linear_bwd, linear_dgrad: x[M,In], w[Out,In], y[M,Out], from w and the activation
// each kind reads (x, or dy for linear_dgrad), checked against the other.
struct LinearDims {
  std::int64_t M = 0, In = 0, Out = 0;
};
LinearDims linear_dims(const Operands& a);

// embedding_fwd / embedding_bwd: tokens [B,S], the token table (wte or dwte) [V,H] and the
// position table's P rows (wpe or dwpe; 0 without one).
struct EmbeddingDims {
  std::int64_t B = 0, S = 0, V = 0, H = 0, P = 0;
};
EmbeddingDims embedding_dims(const Operands& a);

// An attention op's dimensions (the kinds that use heads), read from the packed q|k|v input: the
// one its signature names qkv, or the first (rope_bwd's gradient of one).
QkvShape attention_shape(const Operands& a);
// The same as a kernel family's own shape of those five fields (batch, seq, heads, kv_heads,
// head_dim, in that order).
template <typename Shape>
Shape attention_shape_as(const Operands& a) {
  const QkvShape s = attention_shape(a);
  return Shape{s.batch, s.seq, s.heads, s.kv_heads, s.head_dim};
}

// lora_fwd / lora_bwd: x[M,In], a[R,In], b[N,R], y (dy) [M,Out], the adapter writing columns
// [col_offset, +N) of y. Checks them, lora_fwd's y in place and lora_bwd's xa [M,R].
struct LoraDims {
  std::int64_t M = 0, In = 0, R = 0, N = 0, Out = 0;
};
LoraDims lora_dims(const Operands& a);

// The mixture-of-experts kinds (router_topk ... expert_lora_bwd): M tokens, K experts a token goes
// to (P = M K token-expert pairs), E experts (0 where the kind has no operand that says),
// H the width of what the dispatch and the combine move, a grouped linear's (or an expert LoRA's)
// In and Out, and the rank R of an expert LoRA. Checked against every operand the kind has.
struct MoeDims {
  std::int64_t M = 0, K = 0, E = 0, H = 0, In = 0, Out = 0, R = 0;
  std::int64_t pairs() const { return M * K; }
};
MoeDims moe_dims(const Operands& a);

// logprob_fwd / logprob_bwd: R sequences of S positions, hidden size H, vocabulary V; the rows
// the op reads x from: the forward's x [R,S,H], the backward's xs, P = S - 1 positions a row (the
// forward's copy) or S (x itself); and the tile the logits go through: the op's first held tensor
// [T,C] (T tokens of one row, C <= V vocabulary columns). Where the tile is of another dtype than
// x (autocast), the second and third held tensors, [T,H] and [C,H] in the tile's dtype, take a
// tile's x rows and w rows; else they are nullptr. Checked against every operand the kind has.
struct LogprobOperands {
  std::int64_t R = 0, S = 0, P = 0, H = 0, V = 0, T = 0, C = 0;
  const Operand* x = nullptr;
  const Operand* tile = nullptr;
  const Operand* x_rows = nullptr;
  const Operand* w_rows = nullptr;
  const Operand* xs = nullptr;  // the forward's copy of x without the last positions, or nullptr
  std::int64_t tokens() const { return R * S; }
};
LogprobOperands logprob_operands(const Operands& a);

// Where a LoRA op whose y (dy) is of another dtype than its adapters keeps the adapter's columns
// in the op's dtype: its first held tensor of y's shape but N columns in that dtype (lora_B's
// output in the forward, the gradient of the adapter's columns in the backward: what PyTorch
// allocates there). nullptr when y is of the op's dtype; throws InternalError when no such tensor
// is held.
const Operand* lora_columns(const Operands& a, const LoraDims& d);

// dequantize: the quantised module's buffers (codes and absmax, with absmax2 and the offset under
// double quantisation) and where its rows [row_offset, +rows) of w start.
struct DequantizeOperands {
  kquant::QuantizedWeightBuffers in;
  void* rows = nullptr;   // w's row row_offset
  std::int64_t cols = 0;  // In
};
DequantizeOperands dequantize_operands(const Operands& a);

// adamw8bit_step: the 8-bit moments and their absmax per block, checked against the weight's
// elements (and the gradient's).
kquant::AdamW8bitState adamw_8bit_state(const Operands& a);

// adamw_step / sgd_step: the weight and its gradient (one dtype, one size), the state (m and v, or
// the momentum) in one dtype, fp32 or the weight's (torch.optim keeps it in the parameter's dtype,
// so a 16-bit model without master weights has 16-bit state), and the fp32 master copy or nullptr.
struct OptimizerOperands {
  void* w = nullptr;
  const void* grad = nullptr;
  DType dtype = DType::f32;  // the weight's and the gradient's
  void* m = nullptr;         // or the momentum
  void* v = nullptr;         // nullptr for sgd_step
  DType state_dtype = DType::f32;
  float* master = nullptr;
  std::int64_t elements = 0;
};
OptimizerOperands optimizer_operands(const Operands& a);

// The optimizer steps each weight has taken, which an executor keeps from one op to the next: the
// n-th step of a weight uses bias correction for step n.
class OptimizerSteps {
 public:
  // `weight`'s step count after one more step.
  int next(const Operand& weight) { return ++steps_[weight.tensor->name]; }

 private:
  std::unordered_map<Name, int> steps_;
};

// The optimizer's parameters from the op's attributes; `step` is the weight's step count
// (OptimizerSteps).
kmath::AdamParams adam_params(const Op& op, int step);
kmath::SgdParams sgd_params(const Op& op);

}  // namespace vrambench

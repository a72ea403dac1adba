// The program of one training step: every tensor it allocates (exact bytes, role, name) and every
// op in execution order. Allocation, simulation, CPU and CUDA execution all read this one
// structure.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/config.h"
#include "core/dtype.h"
#include "core/units.h"

namespace vrambench {

enum class Role : std::uint8_t {
  weight,           // parameters in the compute dtype; live for the whole step
  master_weight,    // fp32 copy of 16-bit weights (mixed precision); whole step
  grad,             // parameter gradients; from their first write in backward to the optimizer
  optimizer_state,  // Adam m and v, SGD momentum (fp32); whole step
  activation,       // forward outputs saved for backward
  transient,        // short-lived: forward temporaries, activation gradients, recomputed values
  workspace,        // scratch: the GEMM workspace (an input of every GEMM op and of the norm and
                    // embedding backward ops, live from the first of them to the last), or an
                    // op's own scratch listed as its output (cuDNN workspace, fp32
                    // accumulators), live for that op alone
  input,            // tokens and targets; whole step
};
std::string_view to_string(Role r);
inline constexpr int kRoleCount = 8;

struct Tensor {
  int id = -1;
  std::string name;  // "layer3.attn.probs", "wte", "layer0.mlp.fc.w.grad"
  std::vector<std::int64_t> shape;
  DType dtype = DType::f32;
  Role role = Role::transient;
  Bytes bytes = 0;  // product(shape) * dtype_size, or a library's stated size
  std::int64_t elements() const;
};

// The op catalogue. Inputs and outputs are listed in the order given here; `[..]` marks optional
// tensors, present only when the model has them (biases, positions). Shapes: M = B*S rows, H
// hidden, A heads, K = kv heads, D = head size, Q = (A + 2K)*D packed q|k|v columns, F ffn, V
// vocab. Unless noted, an op overwrites its outputs; `Op::accumulate` makes it add into its `grad`
// outputs. Tensors of role workspace may follow the listed inputs or outputs of any op: the GEMM
// workspace as the last input of linear and attention GEMM ops and of the ops whose kernels sum
// over the rows (layernorm_bwd, rmsnorm_bwd: dw and db; embedding_bwd: the token sort and dwpe),
// which keep their fp32 partials there; an op's own scratch as its last output. Kernels find them
// by role; the positions above count only the other tensors.
// clang-format off: the catalogue reads as a table.
enum class OpKind : std::uint8_t {
  embedding_fwd,    // in: tokens[B,S] i32, wte[V,H], [wpe[P,H]] -> out: x[B,S,H]
  embedding_bwd,    // in: dx[B,S,H], tokens -> out: dwte[V,H], [dwpe[P,H]]
                    // (accumulate: adds into dwte only, which the tied lm head wrote first;
                    // dwpe has no other writer and is always overwritten)
  layernorm_fwd,    // in: x[M,H], w[H], b[H] -> out: y[M,H], mean[M] f32, rstd[M] f32
  layernorm_bwd,    // in: dy, x, w, mean, rstd -> out: dx, dw, db
  rmsnorm_fwd,      // in: x[M,H], w[H] -> out: y[M,H], rstd[M] f32
  rmsnorm_bwd,      // in: dy, x, w, rstd -> out: dx, dw
  linear_fwd,       // in: x[M,In], w[Out,In], [b[Out]] -> out: y[M,Out]   (y = x w^T + b)
  linear_bwd,       // in: dy[M,Out], x[M,In], w[Out,In] -> out: dx[M,In], dw[Out,In], [db[Out]]
  gelu_fwd,         // in: x -> out: y            (tanh approximation)
  gelu_bwd,         // in: dy, x -> out: dx
  swiglu_fwd,       // in: gate[M,F], up[M,F] -> out: y[M,F]        (silu(gate) * up)
  swiglu_bwd,       // in: dy, gate, up -> out: dgate, dup
  rope_fwd,         // in: qkv[B,S,Q] -> out: qkv_rot[B,S,Q]  (rotates the q and k parts, copies v)
  rope_bwd,         // in: dqkv_rot -> out: dqkv
  attn_scores,      // in: qkv[B,S,Q] -> out: scores[B,A,S,S] = q k^T / sqrt(D), causal (-inf above)
  softmax_fwd,      // in: scores -> out: probs[B,A,S,S]  (row softmax)
  softmax_bwd,      // in: dprobs, probs -> out: dscores
  attn_values,      // in: probs[B,A,S,S], qkv -> out: y[B,S,A*D] = probs v (grouped: head a uses kv
                    // a/(A/K))
  attn_values_bwd,  // in: dy[B,S,A*D], probs, qkv -> out: dprobs[B,A,S,S], dqkv (writes v part,
                    // zeroes q,k)
  attn_scores_bwd,  // in: dscores, qkv, dqkv -> out: dqkv (writes the q and k parts of dqkv in
                    // place)
  flash_fwd,        // in: qkv[B,S,Q] -> out: y[B,S,A*D], lse[B,A,S] f32   (causal, dropout p;
                    // scratch: flash_fwd_scratch_bytes)
  flash_bwd,        // in: dy, qkv, y, lse -> out: dqkv[B,S,Q]   (scratch: flash_bwd_scratch_bytes,
                    // an fp32 dq accumulator and row sums first)
  dropout_fwd,      // in: x -> out: y, mask(u8, 1 = kept)   (y = x * mask / (1 - p); seeded by
                    // Op::seed)
  dropout_bwd,      // in: dy, mask -> out: dx
  add,              // in: a, b -> out: c = a + b                  (residual stream, gradient sums)
  cross_entropy_fwd,  // in: logits[M,V], targets[B,S] i32 -> out: loss[1] f32, lse[M] f32 (mean
                      // over M)
  cross_entropy_bwd,  // in: logits, targets, lse -> out: dlogits[M,V]  (of grad_scale x the
                      // mean loss)
  adamw_step,  // in: w, grad, m, v, [master] -> updates w, m, v, [master] in place; no outputs
               // (grad is divided by grad_scale first)
  sgd_step,    // in: w, grad, momentum, [master] -> updates in place; no outputs (likewise)
};
// clang-format on
std::string_view to_string(OpKind k);

struct Op {
  OpKind kind{};
  std::string name;          // "layer3.attn.qkv", "layer3.attn.qkv.bwd"
  std::vector<int> inputs;   // tensor ids, in the catalogue's order
  std::vector<int> outputs;  // tensor ids, in the catalogue's order
  int layer = -1;            // block index, -1 outside blocks
  bool recompute = false;    // a forward op replayed in backward
  bool accumulate = false;   // add into `grad` outputs instead of overwriting (tied weights)
  // Attributes some kinds need.
  std::int64_t heads = 0, kv_heads = 0;  // attention ops, rope
  double dropout_p = 0.0;                // dropout_fwd/bwd, flash_fwd/bwd
  std::uint64_t seed = 0;                // dropout: same seed in a recompute gives the same mask
  float eps = 1e-5f;                     // layernorm / rmsnorm
  // Static loss scale (static_loss_scale): cross_entropy_bwd writes the gradient of grad_scale
  // times the loss, so every gradient of the backward carries the factor, and the optimizer ops
  // divide it out. 1 unless the recipe scales.
  float grad_scale = 1.0f;
  // Optimizer hyper-parameters.
  float lr = 1e-3f, beta1 = 0.9f, beta2 = 0.999f, adam_eps = 1e-8f, weight_decay = 0.0f;
  float momentum = 0.9f;
};

struct Program {
  RunConfig config;             // what it was built from (batch included)
  std::vector<Tensor> tensors;  // index == id
  std::vector<Op> ops;          // execution order
  int loss_tensor = -1;         // the scalar loss (model scope), -1 otherwise
  int output_grad_tensor = -1;  // layer/attention/mlp scopes: the incoming gradient (an input)

  int add_tensor(std::string name, std::vector<std::int64_t> shape, DType dtype, Role role);
  Op& add_op(OpKind kind, std::string name, std::vector<int> inputs, std::vector<int> outputs);
  const Tensor& tensor(int id) const { return tensors.at(static_cast<std::size_t>(id)); }
};

// When each tensor is allocated and freed, derived from the op order alone.
// Tensors of role weight, master_weight, optimizer_state and input are live for the whole step
// (alloc_at = -1, free_after = ops.size()). Others are allocated before the first op that lists
// them (as output, or as input for the GEMM workspace) and freed after the last op that lists them.
// A grad stays until the end of the step, as parameter gradients do until the next zero_grad.
struct Liveness {
  std::vector<int> alloc_at;    // per tensor: op index, or -1 for "before the first op"
  std::vector<int> free_after;  // per tensor: op index, or ops.size() for "after the step"
  // Per op: tensor ids to allocate before it runs, and to free after it has run.
  std::vector<std::vector<int>> allocs_before;
  std::vector<std::vector<int>> frees_after;
  std::vector<int> persistent;  // allocated before the first op, freed after the step
};
Liveness compute_liveness(const Program& program);

// The static loss scale of a recipe whose loss is the mean over `rows` rows of a `vocab`-way
// cross-entropy (docs/memory-model.md, "Loss scaling"). fp16 only: the gradient of the mean loss,
// (softmax - onehot) / rows, has elements of about 1 / (vocab rows), below fp16's normal range
// (2^-14) at realistic sizes. The scale is the smallest power of two that lifts 1 / (vocab rows)
// to 2^-14, at most 2^16 (PyTorch GradScaler's initial scale); 1 for fp32, tf32 and bf16, whose
// exponent range holds the unscaled gradient.
float static_loss_scale(Precision precision, std::int64_t rows, std::int64_t vocab);

// The scratch (role workspace) of the fused attention ops, in bytes: what cuDNN's fused attention
// graphs ask for as their workspace (graph.get_workspace_size(), measured on an H100 with cuDNN
// 9.14, see docs/memory-model.md), which the fused kernels' needs stay within.
//   forward:  256 (the engine's own)
//   backward: 4 B A S (D + 1)          fp32 dq accumulator [B,A,S,D] and softmax sums [B,A,S]
//           + 2 B A S D storage_bytes  with grouped-query heads (K < A): dK and dV per query head,
//                                      which the engine sums over each group
//           + 8 B                      two int32 sequence lengths per sample (cuDNN <= 9.15 when S
//                                      is not a multiple of 128; kept always, an upper bound)
//           + 256
// Throws InternalError when a product overflows 64 bits.
inline constexpr Bytes kFlashEngineScratch = 256;
Bytes flash_fwd_scratch_bytes();
Bytes flash_bwd_scratch_bytes(std::int64_t batch, std::int64_t seq, std::int64_t heads,
                              std::int64_t kv_heads, std::int64_t head_dim, DType storage);

// Builds the program of one training step for cfg at cfg.batch (see build.cpp for the layout).
// The workspace sizes come from `gemm_workspace` (cuBLASLt scratch, one tensor for the whole step).
Program build_program(const RunConfig& cfg, Bytes gemm_workspace);

// Sum of bytes by role of the tensors live after each op, and the peak.
struct LiveProfile {
  std::vector<Bytes> live_after;  // per op
  Bytes peak = 0;
  int peak_op = -1;
};
LiveProfile live_profile(const Program& program, const Liveness& liveness);

}  // namespace vrambench

// The program of one training step: every tensor it allocates (exact bytes, role, name) and every
// op in execution order. Allocation, simulation, CPU and CUDA execution all read this one
// structure.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "config/run_config.h"
#include "core/dtype.h"
#include "core/name.h"
#include "core/small_vector.h"
#include "core/units.h"
#include "program/memory_component.h"

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
  // Optimizer state a paged optimizer keeps in managed (unified) memory: whole step, outside the
  // device's capacity (a trial allocates it from a separate, unbounded pool; on cuda with
  // cudaMallocManaged).
  paged_optimizer_state,
};
std::string_view to_string(Role r);
inline constexpr int kRoleCount = 9;

// The component a tensor of role `r` is reported under unless its builder says otherwise: weights,
// saved_activations, backward_transient, tokens_and_targets, ...
MemoryComponent default_component(Role r);

// A tensor's dimensions (rank 4 at most in every step program so far) and an op's list of tensor
// ids: in place up to those sizes, so that building a program costs no allocation for them.
using Shape = SmallVector<std::int64_t, 4>;
using TensorIds = SmallVector<int, 6>;

// One dimension as a builder gives it: its size at the program's batch and what it grows by per
// sample (0 for most: hidden, heads, vocabulary; 1 for the batch B, S for the B*S tokens, the
// flash scratch's bytes per sample), so that the program's sizes at another batch are read off
// its lines instead of built again (program/scaled_program.h). A plain number is a dimension no
// batch changes; nothing turns a Dim back into a plain number but `.size`, so that a shape formed
// from the batch keeps saying so.
struct Dim {
  std::int64_t size = 0;
  std::int64_t per_sample = 0;
  constexpr Dim() = default;
  constexpr Dim(std::int64_t s) : size(s) {}  // NOLINT(google-explicit-constructor): a fixed size
  constexpr Dim(std::int64_t s, std::int64_t p) : size(s), per_sample(p) {}
};
using Dims = SmallVector<Dim, 4>;

// A dimension of a program's tensor that holds the batch: shape[dim] of tensor `tensor` grows by
// `per_sample` with each sample.
struct BatchDim {
  int tensor = 0;
  int dim = 0;
  std::int64_t per_sample = 0;
  bool operator==(const BatchDim&) const = default;
};

struct Tensor {
  int id = -1;
  Name name;  // "layer3.attn.probs", "wte", "layer0.mlp.fc.w.grad"
  Shape shape;
  DType dtype = DType::f32;
  Role role = Role::transient;
  Bytes bytes = 0;  // product(shape) * dtype_size, or a library's stated size
  // What the estimate files its bytes under: set by its builder, its role's by default.
  MemoryComponent component = MemoryComponent::backward_transient;
  // A persistent tensor a run creates at its first use in its first step rather than before it,
  // and keeps (Liveness::first_step_allocs): what PyTorch makes on the way, torch.optim's and
  // bitsandbytes' state at the first step(), the cuBLAS workspace of each thread at its first
  // GEMM. Where the run places it depends on what the first step has cached by then.
  bool lazy = false;
  std::int64_t elements() const;
  // False for paged optimizer state, which lives in managed memory outside the device's capacity.
  bool on_device() const { return role != Role::paged_optimizer_state; }
  bool operator==(const Tensor&) const = default;
};

// What a step does: one kind per row of the op table (program/ops.def), in its order. The tensors
// each kind reads and writes, in order, and the attributes it uses are in the op signature table
// (program/signature.h), which is made of the same rows.
// clang-format off
enum class OpKind : std::uint8_t {
#define VB_OP(kind, ...) kind,
#include "program/ops.def"
};
// The number of op kinds: the rows of the op table.
inline constexpr std::size_t kOpKindCount = 0
#define VB_OP(...) + 1
#include "program/ops.def"
;
// clang-format on

// The kind's name in the signature table: "linear_fwd".
std::string_view to_string(OpKind k);

struct Op {
  Op() = default;
  // What add_op makes: the rest from the defaults below, member by member (an aggregate made from
  // its first fields is zeroed whole first, 300 bytes, then filled).
  Op(OpKind k, Name n, TensorIds in, TensorIds out)
      : kind(k), name(std::move(n)), inputs(std::move(in)), outputs(std::move(out)) {}

  OpKind kind{};
  Name name;          // "layer3.attn.qkv", "layer3.attn.qkv.bwd"
  TensorIds inputs;   // tensor ids, in the signature's order, workspace last
  TensorIds outputs;  // tensor ids, in the signature's order, workspace last
  // Tensors a framework allocates along with the op that its kernel neither reads nor writes:
  // autograd's saved intermediates of a composite function (the pieces of a python GELU), dropout
  // noise kept in the activation dtype, the copies a reshape makes, an optimizer's temporaries.
  // They take memory from the first op that lists them (in any of the three lists) to the last,
  // like every operand. Executors leave them alone but where the signature says a kernel uses one
  // (a LoRA op over a layer output of another dtype keeps the adapter's columns there).
  TensorIds held;
  int layer = -1;           // block index, -1 outside blocks
  bool recompute = false;   // a forward op run again in backward
  bool accumulate = false;  // add into `grad` outputs instead of overwriting (tied weights)
  // Attributes some kinds need.
  std::int64_t heads = 0, kv_heads = 0;  // attention ops, rope
  double dropout_p = 0.0;                // dropout_fwd/bwd, flash_fwd/bwd
  std::uint64_t seed = 0;                // dropout: same seed in a recompute gives the same mask
  float eps = 1e-5f;                     // layernorm / rmsnorm
  // rmsnorm, qk_norm: the weight's offset, scaling by (norm_offset + w): 1 for Gemma, else 0.
  float norm_offset = 0.0f;
  // swiglu: gelu (tanh) of the gate instead of SiLU (GeGLU, Gemma).
  bool gelu_gate = false;
  // embedding: the output is the rows times embed_scale (Gemma: sqrt(hidden)); its backward
  // scales the gradient alike.
  float embed_scale = 1.0f;
  // softcap_fwd/bwd: the cap (> 0). flash_fwd/bwd: the scores' cap inside the fused kernel, 0 for
  // none.
  float softcap = 0.0f;
  // Static loss scale (static_loss_scale): cross_entropy_bwd writes the gradient of grad_scale
  // times the loss, so every gradient of the backward carries the factor, and the optimizer ops
  // divide it out. 1 unless the recipe scales.
  float grad_scale = 1.0f;
  // Optimizer hyper-parameters.
  float lr = 1e-3f, beta1 = 0.9f, beta2 = 0.999f, adam_eps = 1e-8f, weight_decay = 0.0f;
  float momentum = 0.9f;
  // dequantize: the storage, and the rows [row_offset, row_offset + rows) of the output it writes
  // (a packed q|k|v weight is three modules). lora_fwd / lora_bwd: the columns
  // [col_offset, col_offset + the adapter's out) of y / dy, and scale = alpha / rank.
  QuantKind quant = QuantKind::none;
  bool double_quant = false;
  std::int64_t row_offset = 0, rows = 0, col_offset = 0;
  float lora_scale = 0.0f;
  // router_topk(_bwd): which experts each token goes to, and whether the top-k weights are
  // divided by their sum.
  Routing routing = Routing::balanced;
  bool norm_topk = false;
  // The load-balancing loss's coefficient (router_aux_coef) on its kinds.
  float aux_coef = 0.0f;
  // preference_loss(_bwd): the trainer's loss (dpo or kto) and its beta (TRL's default 0.1).
  Trainer trainer = Trainer::sft;
  float beta = 0.0f;
  bool operator==(const Op&) const = default;
};

struct Program {
  RunConfig config;             // what it was built from (batch included)
  std::vector<Tensor> tensors;  // index == id
  std::vector<Op> ops;          // execution order
  int loss_tensor = -1;         // the scalar loss (model scope), -1 otherwise
  int output_grad_tensor = -1;  // layer/attention/mlp scopes: the incoming gradient (an input)
  // The dimensions that hold the batch, in tensor order, as build_program's builders give them
  // (empty in a program made otherwise): a tensor's bytes and these dimensions are each a line in
  // the batch, which BatchScaledProgram reads other batches off.
  std::vector<BatchDim> batch_dims;

  // `component`: the role's (default_component) unless given.
  int add_tensor(Name name, Shape shape, DType dtype, Role role);
  int add_tensor(Name name, Shape shape, DType dtype, Role role, MemoryComponent component);
  // Throws InternalError when the operands do not match the kind's signature (program/signature.h).
  Op& add_op(OpKind kind, Name name, TensorIds inputs, TensorIds outputs);
  const Tensor& tensor(int id) const { return tensors.at(static_cast<std::size_t>(id)); }
};

// A list of tensor ids per op, in one array: op i's are ids_[start_[i], start_[i + 1]), so that a
// walk over the ops reads one run of memory (and making it allocates twice, not once per op).
class IdsPerOp {
 public:
  IdsPerOp() = default;
  // From each id's op (`op_of`, one entry per tensor id; -1 and ops or more: in no list), in
  // increasing id order within an op.
  IdsPerOp(const std::vector<int>& op_of, std::size_t ops);
  std::span<const int> operator[](std::size_t op) const {
    return {ids_.data() + start_[op], ids_.data() + start_[op + 1]};
  }
  std::size_t size() const { return start_.empty() ? 0 : start_.size() - 1; }
  bool operator==(const IdsPerOp&) const = default;

 private:
  std::vector<std::size_t> start_;
  std::vector<int> ids_;
};

// When each tensor is allocated and freed, derived from the op order alone, in the steady state of
// a run of many steps. Tensors of role weight, master_weight, optimizer_state and input, and lazy
// ones, are live for the whole step (alloc_at = -1, free_after = ops.size()). Others are allocated
// before the first op that lists them (as output, or as input for the GEMM workspace) and freed
// after the last op that lists them. A grad stays until the end of the step, as parameter
// gradients do until the next zero_grad.
struct Liveness {
  std::vector<int> alloc_at;    // per tensor: op index, or -1 for "before the first op"
  std::vector<int> free_after;  // per tensor: op index, or ops.size() for "after the step"
  // Per op: tensor ids to allocate before it runs, and to free after it has run.
  IdsPerOp allocs_before;
  IdsPerOp frees_after;
  std::vector<int> persistent;  // live for the whole step, kept from one step to the next
  // Per op: the lazy persistent tensors a run's first step allocates before it (before the op's
  // allocs_before), in id order; the run's other persistent tensors are allocated before its
  // first op.
  IdsPerOp first_step_allocs;
};
Liveness compute_liveness(const Program& program);

// The static loss scale of a recipe whose loss is the mean over `rows` rows of a `vocab`-way
// cross-entropy (docs/memory-model.md, "Loss scaling"). fp16 only: the gradient of the mean loss,
// (softmax - onehot) / rows, has elements of about 1 / (vocab rows), below fp16's normal range
// (2^-14) at realistic sizes. The scale is the smallest power of two that lifts 1 / (vocab rows)
// to 2^-14, at most 2^16 (PyTorch GradScaler's initial scale); 1 for fp32, tf32 and bf16, whose
// exponent range holds the unscaled gradient.
float static_loss_scale(Precision precision, std::int64_t rows, std::int64_t vocab);
// The scale cfg's step program carries in the grad_scale of its loss backward and optimizer steps:
// static_loss_scale over the B*S rows of the batch in model scope (autocast in fp16 as fp16); 1 in
// the other scopes, which have no loss. Throws UsageError when B*S passes 64 bits.
float step_loss_scale(const RunConfig& cfg);

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

// Builds the program of one training step for cfg at cfg.batch (see build_lean.cpp for the layout);
// every op is checked against its signature (check_op). `cfg` has passed validate(); tensor bytes
// are checked as they are formed (a batch past what 64 bits hold throws UsageError).
// The workspace sizes come from `gemm_workspace` (cuBLASLt scratch, one tensor for the whole step).
Program build_program(const RunConfig& cfg, Bytes gemm_workspace);

// Where the hf step program (hf_builder.h) runs the reference it is checked against. A GPU trainer
// is `cuda`; `cpu` reproduces what PyTorch does on fake CPU tensors (tests/data/README.md): CPU
// autocast op lists, dropout noise kept in the activation dtype instead of a byte mask, norm
// statistics in the input dtype, single-tensor AdamW instead of foreach, and grouped-query
// attention's key/value heads repeated before the fused kernel. Only the reference test sets it.
struct HfOptions {
  enum class Device { cuda, cpu };
  Device device = Device::cuda;
};

// The hf step program: what PyTorch eager autograd running transformers' GPT-2 or Llama model code
// allocates in one training step (docs/memory-model.md, "Frameworks"). cfg.framework is hf and
// cfg has passed validate(). build_program calls it with default options.
Program build_hf_program(const RunConfig& cfg, Bytes gemm_workspace, const HfOptions& options);

// Programs of one configuration built at batches with the same key have the same structure
// (tensors and ops, their names, roles, dtypes and ranks): only sizes differ between them. The
// lean programs have one structure at every batch; an hf program's gpt2 eager attention keeps
// other tensors at batch 1.
int structure_key(const RunConfig& cfg, std::int64_t batch);

}  // namespace vrambench

// Program construction helpers, names, and liveness.
#include "program/program.h"

#include <fmt/format.h>

#include <algorithm>

#include "core/error.h"
#include "program/signature.h"

namespace vrambench {

namespace {

// Each role's name and the component its tensors are filed under unless a builder says otherwise,
// in the order of the enum.
struct RoleInfo {
  std::string_view name;
  MemoryComponent component;
};
constexpr RoleInfo kRoles[kRoleCount] = {
    {"weight", MemoryComponent::weights},
    {"master_weight", MemoryComponent::master_weights},
    {"grad", MemoryComponent::gradients},
    {"optimizer_state", MemoryComponent::optimizer_state},
    {"activation", MemoryComponent::saved_activations},
    {"transient", MemoryComponent::backward_transient},
    {"workspace", MemoryComponent::gemm_workspace},
    {"input", MemoryComponent::tokens_and_targets},
    {"paged_optimizer_state", MemoryComponent::paged_optimizer_state},
};
static_assert(static_cast<int>(Role::paged_optimizer_state) == kRoleCount - 1);

}  // namespace

std::string_view to_string(Role r) {
  return kRoles[static_cast<std::size_t>(r)].name;
}

MemoryComponent default_component(Role r) {
  return kRoles[static_cast<std::size_t>(r)].component;
}

float static_loss_scale(Precision precision, std::int64_t rows, std::int64_t vocab) {
  if (precision != Precision::fp16 || rows < 1 || vocab < 1) return 1.0f;
  constexpr double kMinNormal = 0x1p-14;  // fp16's smallest normal
  constexpr double kMaxScale = 0x1p16;    // GradScaler's init_scale
  // Doubles: rows * vocab can pass 2^53 only far beyond any sequence this models; the scale then
  // just reaches the cap.
  const double wanted = static_cast<double>(rows) * static_cast<double>(vocab) * kMinNormal;
  double scale = 1.0;
  while (scale < wanted && scale < kMaxScale) scale *= 2.0;
  return static_cast<float>(scale);
}

float step_loss_scale(const RunConfig& cfg) {
  if (cfg.scope != Scope::model) return 1.0f;
  // Autocast in fp16 scales as fp16 does (GradScaler).
  const Precision precision = cfg.dtype == Precision::amp_fp16 ? Precision::fp16 : cfg.dtype;
  return static_loss_scale(precision, checked_mul(cfg.batch, cfg.seq, "batch x seq"),
                           cfg.model.vocab);
}

std::int64_t Tensor::elements() const {
  std::int64_t n = 1;
  for (std::int64_t d : shape) n *= d;
  return n;
}

int Program::add_tensor(Name name, Shape shape, DType dtype, Role role) {
  return add_tensor(std::move(name), std::move(shape), dtype, role, default_component(role));
}

int Program::add_tensor(Name name, Shape shape, DType dtype, Role role, MemoryComponent component) {
  Bytes bytes = dtype_size(dtype);
  for (std::int64_t d : shape) {
    Bytes next = 0;  // the message is only spelled out when it is thrown
    if (__builtin_mul_overflow(bytes, d, &next)) [[unlikely]]
      throw_mul_overflow(bytes, d, "tensor '" + name + "' bytes");
    bytes = next;
  }
  // Made in place, field by field (a tensor is large enough, its name and shape inside, for a
  // move or a zeroing of the whole to count).
  const int id = static_cast<int>(tensors.size());
  tensors.emplace_back(id, std::move(name), std::move(shape), dtype, role, bytes, component);
  return id;
}

Bytes flash_fwd_scratch_bytes() {
  return kFlashEngineScratch;
}

Bytes flash_bwd_scratch_bytes(std::int64_t batch, std::int64_t seq, std::int64_t heads,
                              std::int64_t kv_heads, std::int64_t head_dim, DType storage) {
  constexpr std::string_view what = "flash attention backward scratch";
  const Bytes rows = checked_mul(checked_mul(batch, heads, what), seq, what);
  Bytes total = checked_mul(checked_mul(rows, head_dim + 1, what), 4, what);
  if (kv_heads < heads) {
    const Bytes per_query_head =
        checked_mul(checked_mul(rows, head_dim, what), dtype_size(storage), what);
    total = checked_add(total, checked_mul(2, per_query_head, what), what);
  }
  total = checked_add(total, checked_mul(8, batch, what), what);
  return checked_add(total, kFlashEngineScratch, what);
}

Op& Program::add_op(OpKind kind, Name name, TensorIds inputs, TensorIds outputs) {
  // Made in place, as a tensor is, and taken back when its operands do not match its kind.
  Op& op = ops.emplace_back(kind, std::move(name), std::move(inputs), std::move(outputs));
  try {
    check_operands(*this, op);
  } catch (...) {
    ops.pop_back();
    throw;
  }
  return op;
}

namespace {
bool whole_step(Role r) {
  return r == Role::weight || r == Role::master_weight || r == Role::optimizer_state ||
         r == Role::input || r == Role::paged_optimizer_state;
}
}  // namespace

IdsPerOp::IdsPerOp(const std::vector<int>& op_of, std::size_t ops) : start_(ops + 1, 0) {
  // Counted, then placed: the ids of each op in increasing order.
  auto listed = [&](int op) { return op >= 0 && static_cast<std::size_t>(op) < ops; };
  for (int op : op_of)
    if (listed(op)) ++start_[static_cast<std::size_t>(op) + 1];
  for (std::size_t i = 0; i < ops; ++i) start_[i + 1] += start_[i];
  ids_.resize(start_[ops]);
  std::vector<std::size_t> next(start_.begin(), start_.end() - 1);
  for (std::size_t id = 0; id < op_of.size(); ++id)
    if (listed(op_of[id])) ids_[next[static_cast<std::size_t>(op_of[id])]++] = static_cast<int>(id);
}

Liveness compute_liveness(const Program& program) {
  const int n_ops = static_cast<int>(program.ops.size());
  const std::size_t n_tensors = program.tensors.size();
  Liveness live;
  live.alloc_at.assign(n_tensors, n_ops);  // n_ops: never used
  live.free_after.assign(n_tensors, -1);
  for (int i = 0; i < n_ops; ++i) {
    const Op& op = program.ops[static_cast<std::size_t>(i)];
    for (const auto* list : {&op.inputs, &op.outputs, &op.held})
      for (int id : *list) {
        auto t = static_cast<std::size_t>(id);
        live.alloc_at[t] = std::min(live.alloc_at[t], i);
        live.free_after[t] = std::max(live.free_after[t], i);
      }
  }
  std::vector<int> first_use(n_tensors, -1);  // a lazy tensor's first op
  for (std::size_t t = 0; t < n_tensors; ++t) {
    const Role role = program.tensors[t].role;
    if (program.tensors[t].lazy) {
      if (live.alloc_at[t] == n_ops)
        throw InternalError(fmt::format("compute_liveness: lazy tensor '{}' is used by no op",
                                        program.tensors[t].name));
      first_use[t] = live.alloc_at[t];
    }
    if (whole_step(role) || program.tensors[t].lazy || live.alloc_at[t] == n_ops) {
      // Parameters, their state and the inputs exist before the step; an unused tensor of another
      // role would be a builder bug, but keeping it whole-step makes it visible in the peaks.
      live.alloc_at[t] = -1;
      live.free_after[t] = n_ops;
      live.persistent.push_back(static_cast<int>(t));
      continue;
    }
    if (role == Role::grad) {
      live.free_after[t] = n_ops;
      // Accumulating over micro-steps: the gradients are there before this step starts.
      if (program.config.grad_accum > 1) {
        live.alloc_at[t] = -1;
        live.persistent.push_back(static_cast<int>(t));
        continue;
      }
    }
  }
  // The lists leave out what is allocated before the first op (-1) and freed after the step
  // (n_ops).
  live.allocs_before = IdsPerOp(live.alloc_at, static_cast<std::size_t>(n_ops));
  live.frees_after = IdsPerOp(live.free_after, static_cast<std::size_t>(n_ops));
  live.first_step_allocs = IdsPerOp(first_use, static_cast<std::size_t>(n_ops));
  return live;
}

}  // namespace vrambench

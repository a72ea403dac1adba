// One rank's step program (shard.h): the single-device program's parameters, gradients and
// optimizer state cut to this rank's rows, the collectives inserted where the engine runs them,
// and the engine's buffers held by the ops that keep them alive. docs/multi-gpu.md gives the
// sources (PyTorch's torch/distributed/fsdp/_fully_shard, DeepSpeed's runtime/zero) and the
// timeline each strategy follows; tests/test_shard.cpp checks it against FSDPMemTracker's counts
// (tests/data/torch_fsdp_reference.json) and DeepSpeed's estimators
// (tests/data/deepspeed_reference.json).
#include "program/shard.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "core/error.h"

namespace vrambench {
namespace {

constexpr bool is_step(OpKind k) {
  return k == OpKind::adamw_step || k == OpKind::adamw8bit_step || k == OpKind::sgd_step;
}

// A parameter of the model and what the step keeps of it.
struct Param {
  int w = -1;
  int grad = -1;         // -1: frozen
  int step = -1;         // its optimizer op, -1 without one
  int unit = -1;         // the module group it is gathered with: its layer, -1 the root
  int fwd_full = -1;     // its gathered copy in the forward (sharded parameters)
  int bwd_full = -1;     // and in the backward (the forward's for the root under fsdp)
  int grad_full = -1;    // the backward's unsharded gradient (sharded gradients)
  Bytes full_bytes = 0;  // its whole size, before sharding
};

// The ops to put before op i of the old list (before[i]) and after it (after[i]).
struct Inserts {
  std::vector<std::vector<Op>> before, after;
  explicit Inserts(std::size_t ops) : before(ops + 1), after(ops + 1) {}
};

class RankProgram {
 public:
  explicit RankProgram(Program& p)
      : p_(p), cfg_(p.config), ranks_(shard_ranks(p.config)), inserts_(p.ops.size()) {}

  void run() {
    find_boundaries();
    find_params();
    const Strategy s = cfg_.strategy;
    if (s == Strategy::ddp) {
      add_ddp_buckets();
    } else {
      const bool shard_params = s == Strategy::zero3 || is_fsdp(s);
      const bool shard_grads = s != Strategy::zero1;
      if (shard_params) gather_params();
      if (shard_grads) reduce_grads();
      if (is_zero(s)) add_reduce_bucket();
      shard_optimizer();
      if (cfg_.offload != Offload::none) offload();
    }
    splice();
  }

 private:
  Program& p_;
  const RunConfig& cfg_;
  const std::int64_t ranks_;
  Inserts inserts_;
  std::vector<Param> params_;
  int bwd_start_ = -1;           // the loss backward: the first backward op
  int opt_start_ = -1;           // the first optimizer op, or the op count
  std::vector<int> fp32_grads_;  // ZeRO's fp32 gradient partitions

  Tensor& t(int id) { return p_.tensors.at(static_cast<std::size_t>(id)); }
  bool fsdp() const { return is_fsdp(cfg_.strategy); }

  // ---- reading the single-device program ------------------------------------------------------

  void find_boundaries() {
    const int n = static_cast<int>(p_.ops.size());
    opt_start_ = n;
    for (int i = 0; i < n; ++i) {
      const OpKind k = p_.ops[static_cast<std::size_t>(i)].kind;
      if (k == OpKind::cross_entropy_bwd && bwd_start_ < 0) bwd_start_ = i;
      if (is_step(k) && opt_start_ == n) opt_start_ = i;
    }
    if (bwd_start_ < 0)
      throw InternalError("shard_for_rank: a whole-model step with its loss backward");
  }

  // Every weight an op reads, its gradient and optimizer op, and its unit: the layer of the ops
  // that read it (the root where none or several).
  void find_params() {
    const std::size_t n = p_.tensors.size();
    std::vector<int> unit(n, -2);  // -2: not read yet
    std::vector<int> order;
    for (int i = 0; i < opt_start_; ++i) {
      const Op& op = p_.ops[static_cast<std::size_t>(i)];
      for (int id : op.inputs) {
        if (t(id).role != Role::weight) continue;
        int& u = unit[static_cast<std::size_t>(id)];
        if (u == -2) {
          u = op.layer;
          order.push_back(id);
        } else if (u != op.layer) {
          u = -1;
        }
      }
    }
    std::map<std::string, int> grad_named;
    for (const Tensor& x : p_.tensors)
      if (x.role == Role::grad) grad_named.emplace(x.name.str(), x.id);
    std::vector<int> index(n, -1);
    for (int id : order) {
      Param param;
      param.w = id;
      param.unit = unit[static_cast<std::size_t>(id)];
      param.full_bytes = t(id).bytes;
      if (auto g = grad_named.find(t(id).name.str() + ".grad"); g != grad_named.end())
        param.grad = g->second;
      index[static_cast<std::size_t>(id)] = static_cast<int>(params_.size());
      params_.push_back(param);
    }
    for (int i = opt_start_; i < static_cast<int>(p_.ops.size()); ++i) {
      const Op& op = p_.ops[static_cast<std::size_t>(i)];
      if (!is_step(op.kind)) continue;
      const int at = index.at(static_cast<std::size_t>(op.inputs.at(0)));
      if (at < 0) throw InternalError(fmt::format("shard_for_rank: {} steps no weight", op.name));
      params_[static_cast<std::size_t>(at)].step = i;
      params_[static_cast<std::size_t>(at)].grad = op.inputs.at(1);
    }
  }

  // ---- shapes -----------------------------------------------------------------------------------

  // This rank's rows of tensor `id`, in place: its first dimension ceil(rows / ranks); a size a
  // library states (quantised storage) divided alike.
  void to_shard(int id) {
    Tensor& x = t(id);
    if (x.shape.empty()) return;
    const Bytes plain = x.elements() * dtype_size(x.dtype);
    const std::int64_t rows = x.shape[0];
    const std::int64_t kept = shard_rows(rows, ranks_);
    x.shape[0] = kept;
    x.bytes = x.bytes == plain ? x.elements() * dtype_size(x.dtype)
                               : (x.bytes / rows) * kept + (x.bytes % rows > 0 ? kept : 0);
  }
  int copy_of(int id, std::string_view suffix, Role role, MemoryComponent component) {
    const Tensor x = t(id);
    const int copy = p_.add_tensor(x.name + suffix, x.shape, x.dtype, role, component);
    t(copy).bytes = x.bytes;
    return copy;
  }
  int buffer(const std::string& name, Bytes bytes, MemoryComponent component) {
    return p_.add_tensor(name, Shape{std::max<Bytes>(bytes, 1)}, DType::u8, Role::transient,
                         component);
  }
  static std::string unit_name(int unit) {
    return unit < 0 ? std::string("root") : fmt::format("layer{}", unit);
  }

  // Replaces `from` by `to` in ops [begin, end).
  void rewrite(int from, int to, int begin, int end, bool outputs) {
    for (int i = begin; i < end; ++i) {
      Op& op = p_.ops[static_cast<std::size_t>(i)];
      for (TensorIds* list : {&op.inputs, &op.held})
        std::replace(list->begin(), list->end(), from, to);
      if (outputs) std::replace(op.outputs.begin(), op.outputs.end(), from, to);
    }
  }

  static Op collective(OpKind kind, const Name& name, int in, int out, int layer) {
    Op op(kind, name, {in}, {out});
    op.layer = layer;
    return op;
  }

  // ---- parameters -------------------------------------------------------------------------------

  // Whether a parameter stays whole on every rank: ZeRO-3's persistent small parameters.
  bool stays_whole(const Param& param) {
    return cfg_.strategy == Strategy::zero3 && t(param.w).elements() <= kZero3PersistenceThreshold;
  }

  // Where a group's forward (or backward) starts and ends: for a layer under fsdp its first and
  // last op (FSDP2's hooks wrap the module), else the first and last op listing a gathered copy.
  std::pair<int, int> span_of(const std::vector<const Param*>& group, bool backward) {
    int first = -1, last = -1;
    if (fsdp() && !group.empty() && group.front()->unit >= 0) {
      for (int i = backward ? bwd_start_ : 0; i < (backward ? opt_start_ : bwd_start_); ++i)
        if (p_.ops[static_cast<std::size_t>(i)].layer == group.front()->unit) {
          if (first < 0) first = i;
          last = i;
        }
      return {first, last};
    }
    for (const Param* param : group) {
      const int full = backward ? param->bwd_full : param->fwd_full;
      for (int i = backward ? bwd_start_ : 0; i < (backward ? opt_start_ : bwd_start_); ++i) {
        const Op& op = p_.ops[static_cast<std::size_t>(i)];
        const bool uses = std::find(op.inputs.begin(), op.inputs.end(), full) != op.inputs.end() ||
                          std::find(op.held.begin(), op.held.end(), full) != op.held.end();
        if (!uses) continue;
        if (first < 0 || i < first) first = i;
        last = std::max(last, i);
      }
    }
    return {first, last};
  }

  void gather_params() {
    // Each parameter's gathered copies replace it in the forward and the backward.
    for (Param& param : params_) {
      if (stays_whole(param)) continue;
      const bool root_kept = fsdp() && param.unit < 0;
      param.fwd_full =
          copy_of(param.w, ".unsharded", Role::transient, MemoryComponent::gathered_parameters);
      param.bwd_full = root_kept ? param.fwd_full
                                 : copy_of(param.w, ".unsharded.bwd", Role::transient,
                                           MemoryComponent::gathered_parameters);
      rewrite(param.w, param.fwd_full, 0, bwd_start_, false);
      rewrite(param.w, param.bwd_full, bwd_start_, opt_start_, false);
      to_shard(param.w);
    }
    if (fsdp())
      gather_fsdp();
    else
      gather_zero3();
  }

  // The units in forward order (the root first), each with its gathered parameters.
  std::vector<std::pair<int, std::vector<const Param*>>> units() {
    std::map<int, std::vector<const Param*>> by_unit;
    for (const Param& param : params_)
      if (param.fwd_full >= 0) by_unit[param.unit].push_back(&param);
    return {by_unit.begin(), by_unit.end()};
  }

  Bytes gathered_bytes(const std::vector<const Param*>& group) {
    Bytes total = 0;
    for (const Param* param : group) total += t(param->w).bytes * ranks_;
    return total;
  }

  // Gathers `group` into its copies (`backward` picks which) before op `at`, the flat all-gather
  // buffer `flat` (when there is one) held through the copy-out.
  void copy_out(const std::vector<const Param*>& group, bool backward, int at, int flat,
                const Name& name) {
    std::vector<Op>& ops = inserts_.before[static_cast<std::size_t>(at)];
    for (const Param* param : group) {
      Op op = collective(OpKind::all_gather, t(param->w).name + name, param->w,
                         backward ? param->bwd_full : param->fwd_full, param->unit);
      if (flat >= 0) op.held.push_back(flat);
      ops.push_back(std::move(op));
    }
  }
  // The all-gather into the flat buffer of `group` before op `at` (its first shard stands for the
  // rank's input; the buffer is the output), keeping `release` alive to there.
  void all_gather_into(const std::vector<const Param*>& group, int at, int flat, int release,
                       const Name& name) {
    Op op = collective(OpKind::all_gather, name, group.front()->w, flat, group.front()->unit);
    if (release >= 0) op.held.push_back(release);
    inserts_.before[static_cast<std::size_t>(at)].push_back(std::move(op));
  }

  // FSDP2 (shard.h): forward, unit after unit, the flat buffer of each kept until the next unit's
  // is made (the last until the loss is computed); backward, the last layer's buffer made as the
  // backward starts, each layer's copied out as its backward starts, the next one's gathered then.
  void gather_fsdp() {
    auto list = units();
    int previous = -1;
    std::vector<int> bwd_flat(list.size(), -1);
    for (std::size_t u = 0; u < list.size(); ++u) {
      const auto& [unit, group] = list[u];
      const auto [first, last] = span_of(group, false);
      if (first < 0) continue;
      const Bytes bytes = gathered_bytes(group);
      const int flat =
          buffer(unit_name(unit) + ".all_gather", bytes, MemoryComponent::gathered_parameters);
      all_gather_into(group, first, flat, previous, unit_name(unit) + ".all_gather");
      copy_out(group, false, first, flat, ".copy_out");
      // A layer's copies live to its post-forward (its last op), the root's to its post-backward
      // at the end of the backward (reshard_after_forward=False), whichever op reads them last.
      hold(group, false, unit >= 0 ? last : opt_start_ - 1);
      previous = flat;
      if (unit >= 0)
        bwd_flat[u] = buffer(unit_name(unit) + ".all_gather.bwd", bytes,
                             MemoryComponent::gathered_parameters);
    }
    // The last unit's buffer lives until the root's post-forward, after the loss.
    if (previous >= 0) p_.ops[static_cast<std::size_t>(bwd_start_ - 1)].held.push_back(previous);
    // Backward: layers in reverse; the root's copies stay from the forward.
    std::vector<std::size_t> layers;
    for (std::size_t u = 0; u < list.size(); ++u)
      if (list[u].first >= 0 && bwd_flat[u] >= 0) layers.push_back(u);
    std::reverse(layers.begin(), layers.end());
    if (layers.empty()) return;
    // The root's pre-backward prefetches the last layer.
    all_gather_into(list[layers.front()].second, bwd_start_, bwd_flat[layers.front()], -1,
                    unit_name(list[layers.front()].first) + ".all_gather.bwd");
    for (std::size_t k = 0; k < layers.size(); ++k) {
      const std::size_t u = layers[k];
      const auto& [unit, group] = list[u];
      const auto [first, last] = span_of(group, true);
      if (first < 0) continue;
      copy_out(group, true, first, bwd_flat[u], ".copy_out.bwd");
      hold(group, true, last);
      if (k + 1 < layers.size()) {
        const std::size_t next = layers[k + 1];
        all_gather_into(list[next].second, first, bwd_flat[next], -1,
                        unit_name(list[next].first) + ".all_gather.bwd");
      }
    }
  }

  // Keeps the group's gathered copies alive through op `at`.
  void hold(const std::vector<const Param*>& group, bool backward, int at) {
    TensorIds& held = p_.ops[static_cast<std::size_t>(at)].held;
    for (const Param* param : group) held.push_back(backward ? param->bwd_full : param->fwd_full);
  }

  // ZeRO-3: each parameter gathered into its copy alone (DeepSpeed's fetch writes the gathered
  // parameter in place), in the forward and again in the backward, before the first op that reads
  // it; one of at most stage3_prefetch_bucket_size elements is prefetched, gathered with the one
  // used before it.
  void gather_zero3() {
    for (const bool backward : {false, true}) {
      std::vector<std::pair<int, const Param*>> uses;  // first use, parameter
      for (const Param& param : params_) {
        if (param.fwd_full < 0) continue;
        const int first = span_of({&param}, backward).first;
        if (first >= 0) uses.emplace_back(first, &param);
      }
      std::stable_sort(uses.begin(), uses.end(),
                       [](const auto& a, const auto& b) { return a.first < b.first; });
      for (std::size_t k = 0; k < uses.size(); ++k) {
        const Param& param = *uses[k].second;
        const std::int64_t elements = param.full_bytes / dtype_size(t(param.w).dtype);
        const int at =
            k > 0 && elements <= kZero3PrefetchBucket ? uses[k - 1].first : uses[k].first;
        copy_out({&param}, backward, at, -1, backward ? ".fetch.bwd" : ".fetch");
      }
    }
  }

  // ---- gradients --------------------------------------------------------------------------------

  // The backward writes each trainable parameter's whole gradient (a transient now); a
  // reduce-scatter makes this rank's rows of it, the gradient the optimizer reads: FSDP2 after the
  // unit's backward, through one flat input buffer per unit (the previous unit's freed then);
  // ZeRO-2/3 after the op that finished the gradient.
  void reduce_grads() {
    for (Param& param : params_) {
      if (param.grad < 0) continue;
      param.grad_full =
          copy_of(param.grad, ".unsharded", Role::transient, MemoryComponent::backward_transient);
      rewrite(param.grad, param.grad_full, bwd_start_, opt_start_, true);
      to_shard(param.grad);
    }
    if (fsdp()) {
      reduce_fsdp();
      return;
    }
    for (const Param& param : params_) {
      if (param.grad_full < 0) continue;
      const int last = last_listing(param.grad_full, bwd_start_, opt_start_);
      if (last < 0) continue;
      inserts_.after[static_cast<std::size_t>(last)].push_back(
          collective(OpKind::reduce_scatter, t(param.grad).name + ".reduce_scatter",
                     param.grad_full, param.grad, param.unit));
    }
  }

  int last_listing(int id, int begin, int end) {
    int last = -1;
    for (int i = begin; i < end; ++i) {
      const Op& op = p_.ops[static_cast<std::size_t>(i)];
      for (const TensorIds* list : {&op.inputs, &op.outputs, &op.held})
        if (std::find(list->begin(), list->end(), id) != list->end()) last = i;
    }
    return last;
  }

  void reduce_fsdp() {
    std::map<int, std::vector<const Param*>> by_unit;
    for (const Param& param : params_)
      if (param.grad_full >= 0) by_unit[param.unit].push_back(&param);
    // Post-backward order: layers from the last, then the root at the end of the backward.
    std::vector<int> order;
    for (const auto& [unit, group] : by_unit)
      if (unit >= 0) order.push_back(unit);
    std::reverse(order.begin(), order.end());
    if (by_unit.count(-1) > 0) order.push_back(-1);
    int previous = -1;
    for (int unit : order) {
      const std::vector<const Param*>& group = by_unit[unit];
      int last = unit >= 0 ? span_of(group, true).second : -1;
      for (const Param* param : group)
        last = std::max(last, last_listing(param->grad_full, bwd_start_, opt_start_));
      if (last < 0) continue;
      Bytes bytes = 0;
      for (const Param* param : group) bytes += t(param->grad).bytes * ranks_;
      const int flat = buffer(unit_name(unit) + ".reduce_scatter", bytes,
                              MemoryComponent::communication_buffers);
      std::vector<Op>& ops = inserts_.after[static_cast<std::size_t>(last)];
      for (const Param* param : group) {
        Op op = collective(OpKind::reduce_scatter, t(param->grad).name + ".reduce_scatter",
                           param->grad_full, param->grad, unit);
        op.held.push_back(flat);
        if (previous >= 0 && param == group.front()) op.held.push_back(previous);
        ops.push_back(std::move(op));
      }
      previous = flat;
    }
  }

  // ---- optimizer --------------------------------------------------------------------------------

  // The optimizer state and its temporaries cut to this rank's rows; under ZeRO the step reads
  // this rank's fp32 partition of the gradients (all of it live through the step: DeepSpeed
  // flattens the partition's gradients to fp32 before it steps) and, where the weights are
  // whole, this rank's rows of them, all-gathered back after the step; 16-bit weights get their
  // fp32 master partition and fp32 moments (DeepSpeed's mixed precision).
  void shard_optimizer() {
    std::map<std::string, int> by_name;
    for (const Tensor& x : p_.tensors) by_name.emplace(x.name.str(), x.id);
    const bool zero = is_zero(cfg_.strategy);
    TensorIds fp32_grads;
    std::vector<int> steps;
    for (const Param& param : params_) {
      if (param.step < 0) continue;
      steps.push_back(param.step);
      Op& step = p_.ops[static_cast<std::size_t>(param.step)];
      const bool mixed = zero && dtype_size(t(param.w).dtype) == 2;
      for (std::size_t k = 2; k < step.inputs.size(); ++k) {
        const int state = step.inputs[k];
        if (mixed && t(state).dtype != DType::u8) set_dtype(state, DType::f32);
        to_shard(state);
      }
      for (const char* suffix : {".exp_avg_sq.sqrt", ".step.denom"})
        if (auto temp = by_name.find(t(param.w).name.str() + suffix); temp != by_name.end())
          scale_last_dim(temp->second, param);
      const bool whole_w = t(param.w).bytes == param.full_bytes && ranks_ > 1;
      std::vector<Op>& before = inserts_.before[static_cast<std::size_t>(param.step)];
      if (zero) {
        const int part = copy_of(param.grad, ".fp32_partition", Role::transient,
                                 MemoryComponent::communication_buffers);
        set_dtype(part, DType::f32);
        if (cfg_.strategy == Strategy::zero1) to_shard(part);  // zero2/3: the grad is its rows
        before.push_back(collective(OpKind::reduce_scatter, t(param.grad).name + ".partition",
                                    param.grad, part, param.unit));
        step.inputs[1] = part;
        fp32_grads.push_back(part);
        fp32_grads_.push_back(part);
      }
      std::vector<Op>& after = inserts_.after[static_cast<std::size_t>(param.step)];
      // This rank's rows of a whole weight, which the step writes and an all-gather brings back.
      int rows = param.w;
      if (whole_w) {
        rows =
            copy_of(param.w, ".partition", Role::transient, MemoryComponent::communication_buffers);
        to_shard(rows);
      }
      if (mixed) {
        // DeepSpeed's mixed precision: AdamW steps the fp32 master rows with the fp32 gradient
        // rows, and the 16-bit rows are cast from them after. The lean step's master operand
        // (cut to its rows with the state above) is that master; the hf model in 16 bits gets one.
        int master = -1;
        if (step.inputs.size() == 5) {
          master = step.inputs.back();
          step.inputs.pop_back();
        } else {
          master = copy_of(rows, ".master", Role::master_weight, MemoryComponent::master_weights);
          set_dtype(master, DType::f32);
        }
        step.inputs[0] = master;
        after.push_back(Op(OpKind::cast, t(param.w).name + ".from_master", {master}, {rows}));
        after.back().layer = param.unit;
      } else if (whole_w) {
        before.push_back(collective(OpKind::reduce_scatter, t(param.w).name + ".partition", param.w,
                                    rows, param.unit));
        step.inputs[0] = rows;
      }
      if (whole_w)
        after.push_back(collective(OpKind::all_gather, t(param.w).name + ".all_gather", rows,
                                   param.w, param.unit));
    }
    if (fp32_grads.empty() || steps.empty()) return;
    // DeepSpeed makes the fp32 gradients of the partition (of one sub-group under ZeRO-3) before
    // the step and frees them after it.
    std::sort(steps.begin(), steps.end());
    TensorIds held;
    Bytes group = 0;
    for (int id : fp32_grads) {
      if (cfg_.strategy == Strategy::zero3 && group + t(id).elements() > kZero3SubGroup &&
          !held.empty())
        break;
      group += t(id).elements();
      held.push_back(id);
    }
    for (int at : {steps.front(), steps.back()}) {
      Op& op = p_.ops[static_cast<std::size_t>(at)];
      op.held.insert(op.held.end(), held.begin(), held.end());
    }
  }

  void set_dtype(int id, DType dtype) {
    Tensor& x = t(id);
    x.bytes = x.bytes / dtype_size(x.dtype) * dtype_size(dtype);
    x.dtype = dtype;
  }
  // An optimizer temporary of the parameter's size ([n] or [2, n]) cut to its rows.
  void scale_last_dim(int id, const Param& param) {
    Tensor& x = t(id);
    const std::int64_t whole = param.full_bytes / dtype_size(t(param.w).dtype);
    const std::int64_t kept = t(param.w).elements();
    if (x.shape.empty() || x.shape.back() != whole || whole == kept) return;
    x.shape.back() = kept;
    x.bytes = x.elements() * dtype_size(x.dtype);
  }

  // ---- host offload -----------------------------------------------------------------------------

  // What --offload keeps in host memory: the optimizer's state and master weights, ZeRO's fp32
  // gradient partition and (zero2, zero3) the reduced gradient rows, which DeepSpeed copies to
  // the host as they are reduced (optimizer); the parameters' shards with them, and under FSDP2's
  // CPUOffloadPolicy the gradients' too (params).
  void offload() {
    const bool params = cfg_.offload == Offload::params;
    std::vector<bool> host(p_.tensors.size(), false);
    for (int id : fp32_grads_) host[static_cast<std::size_t>(id)] = true;
    for (const Param& param : params_) {
      if (param.grad >= 0 && (fsdp() || cfg_.strategy != Strategy::zero1))
        host[static_cast<std::size_t>(param.grad)] = true;
      if (params && param.fwd_full >= 0) host[static_cast<std::size_t>(param.w)] = true;
    }
    for (Tensor& x : p_.tensors) {
      const bool state = x.role == Role::optimizer_state || x.role == Role::master_weight;
      if (!state && !host[static_cast<std::size_t>(x.id)]) continue;
      x.role = Role::paged_optimizer_state;
      x.component = MemoryComponent::host_offload;
      x.lazy = false;
    }
  }

  // DeepSpeed's reduce bucket (reduce_bucket_size, 5e8 elements, in the gradients' dtype; the
  // gradients' size where that is less): stages 1 and 2 allocate it with each backward, stage 3 at
  // initialisation and keep it. Each reduction flattens the bucket into a copy of its size, counted
  // here through the whole backward (it is made at every reduction).
  void add_reduce_bucket() {
    std::int64_t elements = 0;
    DType dtype = DType::f32;
    for (const Param& param : params_)
      if (param.grad >= 0) {
        elements += param.full_bytes / dtype_size(t(param.w).dtype);
        dtype = t(param.grad).dtype;
      }
    if (elements == 0) return;
    const Bytes bytes = std::min(elements, kZeroReduceBucket) * dtype_size(dtype);
    const int bucket =
        p_.add_tensor("zero.reduce_bucket", Shape{bytes}, DType::u8,
                      cfg_.strategy == Strategy::zero3 ? Role::weight : Role::transient,
                      MemoryComponent::communication_buffers);
    const int copy = p_.add_tensor("zero.reduce_bucket.flat", Shape{bytes}, DType::u8,
                                   Role::transient, MemoryComponent::communication_buffers);
    for (int at : {bwd_start_, opt_start_ - 1}) {
      TensorIds& held = p_.ops[static_cast<std::size_t>(at)].held;
      held.push_back(copy);
      // Stage 3's is whole-step, listed by no op.
      if (cfg_.strategy != Strategy::zero3) held.push_back(bucket);
    }
  }

  // ---- ddp --------------------------------------------------------------------------------------

  // DDP's reducer keeps a flat bucket per about 25 MB of gradients, all of them together the size
  // of the trainable gradients, from its construction (gradient_as_bucket_view=False).
  void add_ddp_buckets() {
    Bytes bytes = 0;
    for (const Param& param : params_)
      if (param.grad >= 0) bytes += t(param.grad).bytes;
    if (bytes == 0) return;
    p_.add_tensor("ddp.buckets", Shape{bytes}, DType::u8, Role::weight,
                  MemoryComponent::communication_buffers);
  }

  // ---- the new op list --------------------------------------------------------------------------

  void splice() {
    std::vector<Op> ops;
    ops.reserve(p_.ops.size() * 2);
    for (std::size_t i = 0; i < p_.ops.size(); ++i) {
      for (Op& op : inserts_.before[i]) ops.push_back(std::move(op));
      ops.push_back(std::move(p_.ops[i]));
      for (Op& op : inserts_.after[i]) ops.push_back(std::move(op));
    }
    p_.ops = std::move(ops);
  }
};

}  // namespace

void shard_for_rank(Program& program) {
  if (!is_distributed(program.config)) return;
  RankProgram(program).run();
}

}  // namespace vrambench

// The trial runner: binds every live tensor of a step program to a block from the allocator, runs
// the ops in order, and measures the peaks. Sim, cpu and cuda differ only in the allocator's
// SegmentSource and the executor passed in.
#include "search/trial.h"

#include <fmt/format.h>

#include <algorithm>
#include <string>
#include <vector>

#include "core/error.h"

namespace vrambench {

std::string to_string(const OomInfo& oom) {
  const std::string where =
      oom.op.empty() ? "before the first op" : fmt::format("in op '{}'", oom.op);
  return fmt::format("OOM {} allocating '{}': {} requested, {} free", where, oom.tensor,
                     format_bytes(oom.requested), format_bytes(oom.free));
}

namespace {

// The live tensors of one trial: their blocks, the pointers the executor sees, and the running
// byte counts behind the peaks.
class Replay {
 public:
  Replay(const Program& program, Allocator& allocator, Allocator* paged)
      : program_(program),
        allocator_(allocator),
        paged_(paged),
        blocks_(program.tensors.size()),
        data_(program.tensors.size(), nullptr) {}

  // False (and the OOM recorded) when the allocator cannot serve the tensor. `op_index` is -1
  // for the persistent tensors allocated before the first op.
  Bytes free_bytes() const { return allocator_.free_bytes(); }

  bool allocate(int id, int op_index, TrialResult& result) {
    const Tensor& tensor = program_.tensor(id);
    auto& slot = blocks_.at(static_cast<std::size_t>(id));
    if (slot)
      throw InternalError(fmt::format("trial: tensor '{}' allocated while live", tensor.name));
    if (!tensor.on_device()) return allocate_paged(id, op_index, result);
    const std::optional<Block> block = allocator_.allocate(tensor.bytes);
    if (!block) {
      result.oom =
          OomInfo{op_name(op_index), tensor.name.str(), tensor.bytes, allocator_.free_bytes()};
      return false;
    }
    assign_fields(slot.emplace(), *block);
    // The block address is the device pointer for real devices; for sim it is never dereferenced.
    data_[static_cast<std::size_t>(id)] = reinterpret_cast<void*>(block->address);
    live_ += tensor.bytes;
    live_by_role_[tensor.role] += tensor.bytes;
    // Strictly greater: the first op to reach the peak names it, and later steps repeating the
    // same peak do not move it.
    if (live_ > result.tensor_peak) {
      result.tensor_peak = live_;
      result.peak_op = op_index;
      result.peak_by_role = live_by_role_;
    }
    return true;
  }

  void release(int id) {
    auto& slot = blocks_.at(static_cast<std::size_t>(id));
    if (!slot)
      throw InternalError(
          fmt::format("trial: tensor '{}' freed while not live", program_.tensor(id).name));
    const Tensor& tensor = program_.tensor(id);
    if (!tensor.on_device()) {
      paged_->free(*slot);
      slot.reset();
      data_[static_cast<std::size_t>(id)] = nullptr;
      return;
    }
    allocator_.free(*slot);
    slot.reset();
    data_[static_cast<std::size_t>(id)] = nullptr;
    live_ -= tensor.bytes;
    live_by_role_[tensor.role] -= tensor.bytes;
  }

  // Frees the live tensors that are not persistent: what liveness keeps "until the end of the
  // step" (the gradients) is gone before the next step allocates it again.
  void release_step_tensors(const Liveness& liveness) {
    std::vector<bool> persistent(blocks_.size(), false);
    for (int id : liveness.persistent) persistent[static_cast<std::size_t>(id)] = true;
    for (std::size_t id = 0; id < blocks_.size(); ++id)
      if (blocks_[id] && !persistent[id]) release(static_cast<int>(id));
  }

  void release_all() {
    for (std::size_t id = 0; id < blocks_.size(); ++id)
      if (blocks_[id]) release(static_cast<int>(id));
  }

  // The op an allocation is made for: "" for the persistent tensors before the first op.
  std::string op_name(int op_index) const {
    return op_index < 0 ? std::string{}
                        : program_.ops[static_cast<std::size_t>(op_index)].name.str();
  }

  // Managed memory: outside the device's capacity and its peaks, counted on its own.
  bool allocate_paged(int id, int op_index, TrialResult& result) {
    const Tensor& tensor = program_.tensor(id);
    if (paged_ == nullptr)
      throw InternalError(fmt::format(
          "trial: tensor '{}' is paged and the trial has no paged memory", tensor.name));
    const std::optional<Block> block = paged_->allocate(tensor.bytes);
    if (!block) {
      result.oom =
          OomInfo{op_name(op_index), tensor.name.str(), tensor.bytes, paged_->free_bytes()};
      return false;
    }
    blocks_[static_cast<std::size_t>(id)] = *block;
    data_[static_cast<std::size_t>(id)] = reinterpret_cast<void*>(block->address);
    result.paged_bytes += tensor.bytes;
    return true;
  }

  const std::vector<void*>& data() const { return data_; }
  void* data(int id) const { return data_[static_cast<std::size_t>(id)]; }

 private:
  const Program& program_;
  Allocator& allocator_;
  Allocator* paged_;
  std::vector<std::optional<Block>> blocks_;  // per tensor id: its block while live
  std::vector<void*> data_;                   // per tensor id: what the executor sees
  Bytes live_ = 0;
  RoleBytes live_by_role_;
};

void check_shapes(const Program& program, const Liveness& liveness, int steps) {
  if (steps < 1)
    throw InternalError(fmt::format("run_step: steps must be at least 1, got {}", steps));
  if (liveness.alloc_at.size() != program.tensors.size() ||
      liveness.allocs_before.size() != program.ops.size() ||
      liveness.frees_after.size() != program.ops.size())
    throw InternalError("run_step: liveness was computed for a different program");
}

// The walk itself; returns with result.oom set at the first allocation that fails.
void walk(const Program& program, const Liveness& liveness, Executor* executor, int steps,
          const SegmentSource* sampled, Replay& replay, TrialResult& result) {
  // What the driver says is in use, once this op's memory is allocated: it sees what the
  // allocator's bookkeeping cannot (library scratch, driver-side rounding).
  auto sample = [&] {
    if (!sampled) return;
    if (const std::optional<Bytes> used = sampled->device_used())
      result.driver_peak = std::max(result.driver_peak, *used);
  };
  // Allocate every persistent tensor but the lazy ones before initialising any, then initialise
  // in id order: a master weight is initialised from its weight, which the builder creates first.
  std::vector<int> persistent;
  for (int id : liveness.persistent)
    if (!program.tensor(id).lazy) persistent.push_back(id);
  std::sort(persistent.begin(), persistent.end());
  for (int id : persistent)
    if (!replay.allocate(id, -1, result)) return;
  // Filling needed memory the device did not have: an OOM before the op (or the first op).
  auto initialize = [&](int id, int op_index) {
    try {
      executor->initialize(program, id, replay.data(id));
      return true;
    } catch (const DeviceOutOfMemory&) {
      result.oom = OomInfo{replay.op_name(op_index), "(initial values)", 0, replay.free_bytes()};
      return false;
    }
  };
  if (executor)
    for (int id : persistent)
      if (!initialize(id, -1)) return;
  sample();

  for (int step = 0; step < steps; ++step) {
    for (std::size_t i = 0; i < program.ops.size(); ++i) {
      // The lazy persistent tensors, made as the first step reaches them (and kept).
      if (step == 0)
        for (int id : liveness.first_step_allocs[i])
          if (!replay.allocate(id, static_cast<int>(i), result) ||
              (executor && !initialize(id, static_cast<int>(i))))
            return;
      for (int id : liveness.allocs_before[i])
        if (!replay.allocate(id, static_cast<int>(i), result)) return;
      if (executor) {
        sample();
        try {
          executor->execute(program, i, replay.data());
        } catch (const DeviceOutOfMemory&) {
          // A library's own scratch (cuBLASLt, cuDNN) did not fit: an OOM like any other.
          result.oom =
              OomInfo{program.ops[i].name.str(), "(library scratch)", 0, replay.free_bytes()};
          return;
        }
      }
      for (int id : liveness.frees_after[i]) replay.release(id);
    }
    // Queued kernels may still use the blocks about to be freed and handed out again.
    if (executor) executor->synchronize();
    replay.release_step_tensors(liveness);
  }
  result.fit = true;
}

}  // namespace

TrialResult run_step(const Program& program, const Liveness& liveness, Allocator& allocator,
                     Executor* executor, Bytes fixed_overhead, int steps,
                     const SegmentSource* sampled, Allocator* paged) {
  check_shapes(program, liveness, steps);
  allocator.reset_peaks();
  TrialResult result;
  Replay replay(program, allocator, paged);
  try {
    walk(program, liveness, executor, steps, sampled, replay, result);
    // After an OOM, kernels queued before it may still be running over live blocks.
    if (!result.fit && executor) executor->synchronize();
  } catch (...) {
    // The exception is the result that matters; return the memory and let it propagate. No
    // synchronize here: after a device error it would only throw again, and so may the frees
    // (a sticky CUDA error fails every later call): a failure there must not replace the error
    // that caused the cleanup.
    try {
      replay.release_all();
      allocator.release_cached();
      if (paged) paged->release_cached();
    } catch (...) {  // NOLINT(bugprone-empty-catch): the first error is rethrown below
    }
    throw;
  }
  replay.release_all();
  result.reserved_peak = allocator.stats().reserved_peak;
  result.device_peak = std::max(result.reserved_peak + fixed_overhead, result.driver_peak);
  allocator.release_cached();
  if (paged) paged->release_cached();
  return result;
}

}  // namespace vrambench

// The trial runner: binds every live tensor of a step program to a block from the allocator, runs
// the ops in order, and measures the peaks. Sim, cpu and cuda differ only in the allocator's
// SegmentSource and the executor passed in.
#include "measure/trial.h"

#include <fmt/format.h>

#include <algorithm>
#include <string>
#include <vector>

#include "core/error.h"

namespace vrambench {

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

// The walk itself, event by event; returns with result.oom set at the first allocation that
// fails.
void walk(const Program& program, const Schedule& schedule, Executor* executor,
          const SegmentSource* sampled, Replay& replay, TrialResult& result) {
  // What the driver says is in use, once this op's memory is allocated: it sees what the
  // allocator's bookkeeping cannot (library scratch, driver-side rounding).
  auto sample = [&] {
    if (!sampled) return;
    if (const std::optional<Bytes> used = sampled->device_used())
      result.driver_peak = std::max(result.driver_peak, *used);
  };
  for (const RunEvent& e : schedule.events()) {
    switch (e.kind) {
      case RunEvent::Kind::alloc:
        if (!replay.allocate(e.id, e.op, result)) return;
        break;
      case RunEvent::Kind::init:
        if (!executor) break;
        try {
          executor->initialize(program, e.id, replay.data(e.id));
        } catch (const DeviceOutOfMemory&) {
          // Filling the tensor needed memory the device did not have: an OOM before the op.
          result.oom = OomInfo{replay.op_name(e.op), "(initial values)", 0, replay.free_bytes()};
          return;
        }
        break;
      case RunEvent::Kind::ready:
        sample();
        break;
      case RunEvent::Kind::run:
        if (!executor) break;
        sample();
        try {
          executor->execute(program, static_cast<std::size_t>(e.op), replay.data());
        } catch (const DeviceOutOfMemory&) {
          // A library's own scratch (cuBLASLt, cuDNN) did not fit: an OOM like any other.
          result.oom = OomInfo{replay.op_name(e.op), "(library scratch)", 0, replay.free_bytes()};
          return;
        }
        break;
      case RunEvent::Kind::free:
        replay.release(e.id);
        break;
      case RunEvent::Kind::step_end:
        // Queued kernels may still use the blocks about to be freed and handed out again.
        if (executor) executor->synchronize();
        break;
    }
  }
  result.fit = true;
}

}  // namespace

TrialResult run_step(const Program& program, const Liveness& liveness, Allocator& allocator,
                     Executor* executor, Bytes fixed_overhead, int steps,
                     const SegmentSource* sampled, Allocator* paged) {
  return run_step(program, Schedule(program, liveness, steps), allocator, executor, fixed_overhead,
                  sampled, paged);
}

TrialResult run_step(const Program& program, const Schedule& schedule, Allocator& allocator,
                     Executor* executor, Bytes fixed_overhead, const SegmentSource* sampled,
                     Allocator* paged) {
  if (schedule.ops() != program.ops.size() || schedule.tensors() != program.tensors.size())
    throw InternalError("run_step: the schedule was made for a different program");
  allocator.reset_peaks();
  TrialResult result;
  Replay replay(program, allocator, paged);
  try {
    walk(program, schedule, executor, sampled, replay, result);
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

// A device to measure on: what it is and holds before any tensor (DeviceInfo), where a trial's
// memory comes from (a fresh SegmentSource per trial) and what runs the ops (an Executor, or
// nothing). `sim:PROFILE`: virtual segments, nothing runs; `cpu`: capped host memory, the
// reference kernels; `cuda`: cudaMalloc segments, the CUDA kernels. make_device() is the one
// factory for every kind.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "alloc/allocator.h"
#include "config/run_config.h"
#include "core/dtype.h"
#include "core/units.h"
#include "device/executor.h"
#include "program/schedule.h"

namespace vrambench {

enum class DeviceKind { sim, cpu, cuda };

struct DeviceInfo {
  DeviceKind kind = DeviceKind::sim;
  std::string label;         // "sim:h100-80gb (H100 SXM 80GB)"
  Bytes total = 0;           // the card's memory (or --vram): what device_peak is compared with
  Bytes fixed_overhead = 0;  // context and library handles, held before the step
  Bytes gemm_workspace = 0;  // cuBLASLt workspace, a tensor of the program
  // Steps per trial, one after the other as a training run takes them (program/schedule.h).
  int trial_steps = kTrialSteps;
  // A real device whose libraries load code and build plans on first use (cuda): the measuring
  // process runs a warm-up trial at batch 1 first and then measures the fixed overhead itself, as
  // the driver reports it, so what the step cannot use is counted once everything is loaded.
  bool warm_up = false;

  // What the segment source may hand out to the step's tensors.
  Bytes tensor_capacity() const { return total > fixed_overhead ? total - fixed_overhead : 0; }
};

// How flash_fwd and flash_bwd run on cuda: the plain fused kernels of
// kernels/cuda/attention_flash.cu (every dtype, dropout masks identical to the CPU reference), or
// cuDNN's fused attention through its frontend (kernels/cuda/attention_cudnn.h: 16-bit storage,
// dropout from cuDNN's own generator, the op's scratch as its workspace). cudnn never falls back to
// the kernels: where cuDNN cannot run an op (fp32, a shape it rejects, too little listed workspace)
// the op fails with cuDNN's message. automatic: cudnn for 16-bit storage, kernels for fp32/tf32
// (cuDNN has no fp32 attention backward), chosen from the recipe before anything runs, never after
// a failure.
enum class FlashImpl { kernels, cudnn, automatic };
// What `impl` runs flash attention with for activations stored as `storage`: kernels or cudnn.
FlashImpl resolve_flash_impl(FlashImpl impl, DType storage);

// Where cuda segments come from: cudaMalloc, or cudaMallocAsync on a pool of their own.
enum class CudaMemory { malloc, async };

// The names --flash-impl and --cuda-memory take (core/enum_names.h).
template <>
EnumNames<FlashImpl> enum_names<FlashImpl>();
template <>
EnumNames<CudaMemory> enum_names<CudaMemory>();

// How a device that runs ops runs them; sim runs nothing and ignores these.
struct DeviceOptions {
  bool execute = true;  // false: every tensor of the step is allocated, no op runs (--no-execute)
  FlashImpl flash = FlashImpl::automatic;  // cuda
  CudaMemory memory = CudaMemory::malloc;  // cuda
};

// The seed every executor fills the step's persistent tensors from (device/init_rule.h), so that
// cpu and cuda start a step from the same values.
inline constexpr std::uint64_t kInitSeed = 1234;

using SourceFactory = std::function<std::unique_ptr<SegmentSource>(Bytes capacity)>;
using ExecutorFactory = std::function<std::unique_ptr<Executor>()>;

// Making a Device touches no GPU: its sources and executors are made where the trials run (on
// cuda, a child process, since a CUDA error there can poison the process).
struct Device {
  DeviceInfo info;
  SourceFactory sources;      // a fresh source of `capacity` bytes per trial
  ExecutorFactory executors;  // empty where nothing runs (sim, --no-execute)
  // Where a paged optimizer's state lives, outside the device's capacity: managed memory on cuda
  // (cudaMallocManaged), host memory on cpu, virtual segments on sim. Unbounded (kPagedCapacity).
  SourceFactory paged_sources;

  std::unique_ptr<SegmentSource> make_source(Bytes capacity) const { return sources(capacity); }
  std::unique_ptr<SegmentSource> make_paged_source() const {
    return (paged_sources ? paged_sources : sources)(kPagedCapacity);
  }
  // What a paged source may hand out: no device limit (the driver pages to host memory).
  static constexpr Bytes kPagedCapacity = Bytes{1} << 50;
  // nullptr where nothing runs.
  std::unique_ptr<Executor> make_executor() const { return executors ? executors() : nullptr; }
};

// Resolves cfg.device: "sim:PROFILE", "cpu", "cuda", or "auto" (the GPU when there is one, else
// the default simulated card; then `note` says which and why). --vram (cfg.vram) replaces the
// total. On cuda the GPU is asked in a child process, so this process keeps no CUDA context.
// Throws UsageError for cuda without a GPU.
Device make_device(const RunConfig& cfg, const DeviceOptions& options = {},
                   std::string* note = nullptr);

// A simulated card of `profile` (sim:PROFILE), of `vram` bytes where vram > 0.
struct GpuProfile;
Device sim_device(const GpuProfile& profile, Bytes vram);

// `info`'s device replayed on virtual segments with nothing running (its kind becomes sim; the
// capacity, overheads and steps per trial stay): the sim column of a real device's rows, and what
// a failing batch would need.
Device simulated(DeviceInfo info);

// The default capacity of the cpu device when --vram is not given.
inline constexpr Bytes kDefaultCpuCapacity = 1 * GiB;

}  // namespace vrambench

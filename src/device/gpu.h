// What the tool asks about GPUs, answered in every build (one without CUDA says so): whether there
// is one, what each is, and the kernel selftest. No CUDA header here: the CLI and the tests use it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/units.h"

namespace vrambench {

// A GPU is required for what was asked and there is none; what() starts with "needs a GPU: ".
class NeedsGpu : public std::runtime_error {
 public:
  explicit NeedsGpu(const std::string& reason) : std::runtime_error("needs a GPU: " + reason) {}
};

// Versions that are known without a GPU: the CUDA runtime linked, cuBLASLt and cuDNN.
struct CudaLibraryVersions {
  int runtime = 0;                   // CUDART_VERSION style: 13000 = 13.0
  std::size_t cublaslt = 0;          // cublasLtGetVersion(): 130000 style
  std::size_t cudnn = 0;             // cudnnGetVersion(): 91900 = 9.19.0
  std::string runtime_text() const;  // "13.0"
  std::string cublaslt_text() const;
  std::string cudnn_text() const;
};

struct CudaDeviceInfo {
  int ordinal = 0;
  std::string name;
  Bytes total_memory = 0;
  Bytes free_memory = 0;
  int cc_major = 0, cc_minor = 0;
  int driver_version = 0;  // cudaDriverGetVersion
  CudaLibraryVersions libraries;
  int compute_capability() const { return cc_major * 10 + cc_minor; }  // 90 for 9.0
};

// One op kind at one storage type, run on the GPU and on the CPU reference with the same inputs.
struct SelftestRow {
  std::string config;  // which small program it ran in ("gpt fp32 eager", ...)
  std::string op;      // op kind
  DType dtype = DType::f32;
  std::int64_t ops = 0;      // how many ops of this kind ran
  double max_abs_error = 0;  // largest |gpu - cpu| over every output element
  double worst_ratio = 0;    // largest |gpu - cpu| / (atol + rtol |cpu|); <= 1 passes
  bool passed = false;
  std::string note;  // e.g. why an op was not compared
};

struct GpuPresence {
  bool available = false;
  std::string why;  // why not, in a few words ("built without CUDA", "no CUDA driver found")
};
// Asked once per process, in a child process: the caller keeps no CUDA context, so it can still
// fork children that use the GPU.
GpuPresence probe_gpu();

// Every GPU the driver shows (empty without one). Creates a CUDA context in this process.
std::vector<CudaDeviceInfo> list_gpus();

// Runs every CUDA op against the CPU reference (see run_cuda_selftest in device/cuda_device.h).
// Throws NeedsGpu without a GPU, or in a build without CUDA.
std::vector<SelftestRow> run_gpu_selftest();

}  // namespace vrambench

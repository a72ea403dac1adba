// The parts of device.h and gpu.h that need no GPU and no factory: the sim device, the
// flash-attention choice, the names of the cuda options, library versions as text.
#include "device/device.h"

#include <fmt/format.h>

#include <array>

#include "device/gpu.h"
#include "device/sources.h"

namespace vrambench {
namespace {

constexpr std::array<std::pair<FlashImpl, std::string_view>, 3> kFlashImplNames{
    {{FlashImpl::automatic, "auto"}, {FlashImpl::cudnn, "cudnn"}, {FlashImpl::kernels, "kernels"}}};
constexpr std::array<std::pair<CudaMemory, std::string_view>, 2> kCudaMemoryNames{
    {{CudaMemory::malloc, "malloc"}, {CudaMemory::async, "async"}}};

}  // namespace

FlashImpl resolve_flash_impl(FlashImpl impl, DType storage) {
  if (impl != FlashImpl::automatic) return impl;
  return storage == DType::f16 || storage == DType::bf16 ? FlashImpl::cudnn : FlashImpl::kernels;
}

template <>
EnumNames<FlashImpl> enum_names<FlashImpl>() {
  return kFlashImplNames;
}

template <>
EnumNames<CudaMemory> enum_names<CudaMemory>() {
  return kCudaMemoryNames;
}

std::string CudaLibraryVersions::runtime_text() const {
  return fmt::format("{}.{}", runtime / 1000, runtime % 1000 / 10);
}
std::string CudaLibraryVersions::cublaslt_text() const {
  // cublasLtGetVersion: major * 10000 + minor * 100 + patch
  return fmt::format("{}.{}.{}", cublaslt / 10000, cublaslt % 10000 / 100, cublaslt % 100);
}
std::string CudaLibraryVersions::cudnn_text() const {
  // cuDNN 9: major * 10000 + minor * 100 + patch
  return fmt::format("{}.{}.{}", cudnn / 10000, cudnn % 10000 / 100, cudnn % 100);
}

Device simulated(DeviceInfo info) {
  info.kind = DeviceKind::sim;
  info.warm_up = false;  // nothing runs, nothing loads; trial_steps stay: the replay runs as many
  return {std::move(info), [](Bytes capacity) { return make_virtual_source(capacity); }, {}, {}};
}

}  // namespace vrambench

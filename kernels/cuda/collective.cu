// The rehearsed collectives' copies and casts (collective.h).
#include <algorithm>
#include <stdexcept>

#include "cuda/cast.h"
#include "cuda/check.h"
#include "cuda/collective.h"
#include "cuda/op_table.h"

namespace vrambench::cuda {
namespace {
template <typename To, typename From>
__global__ void gather_kernel(To* full, std::int64_t full_n, const From* shard,
                              std::int64_t shard_n) {
  VB_GRID_STRIDE(i, full_n) gather_body(i, full, shard, shard_n);
}
}  // namespace

bool copies_bytes(DType a, DType b) {
  return a == b || !is_floating(a) || !is_floating(b);
}

void launch_repeat_bytes(void* to, std::int64_t to_bytes, const void* from, std::int64_t from_bytes,
                         cudaStream_t stream) {
  if (from_bytes <= 0) throw std::invalid_argument("collective: an empty source");
  auto* out = static_cast<unsigned char*>(to);
  for (std::int64_t at = 0; at < to_bytes; at += from_bytes)
    VB_CUDA_CHECK(cudaMemcpyAsync(out + at, from,
                                  static_cast<std::size_t>(std::min(from_bytes, to_bytes - at)),
                                  cudaMemcpyDeviceToDevice, stream));
}

void launch_gather_cast(DType full_dtype, void* full, std::int64_t full_n, DType shard_dtype,
                        const void* shard, std::int64_t shard_n, cudaStream_t stream) {
  if (shard_n <= 0) throw std::invalid_argument("all_gather: an empty shard");
  dispatch_float_pair(full_dtype, shard_dtype, [&](auto to_tag, auto from_tag) {
    using To = decltype(to_tag);
    using From = decltype(from_tag);
    gather_kernel<To, From><<<grid_for(full_n, 256), 256, 0, stream>>>(
        static_cast<To*>(full), full_n, static_cast<const From*>(shard), shard_n);
  });
  VB_CHECK_LAUNCH("gather_kernel");
}

}  // namespace vrambench::cuda

namespace vrambench {

void cuda_run_all_gather(const Operands& a, CudaContext& context) {
  const Tensor& shard = *a.in[0].tensor;
  const Tensor& full = *a.out[0].tensor;
  if (cuda::copies_bytes(full.dtype, shard.dtype)) {
    cuda::launch_repeat_bytes(a.out[0].data, full.bytes, a.in[0].data, shard.bytes,
                              context.stream());
    return;
  }
  cuda::launch_gather_cast(full.dtype, a.out[0].data, full.elements(), shard.dtype, a.in[0].data,
                           shard.elements(), context.stream());
}

void cuda_run_reduce_scatter(const Operands& a, CudaContext& context) {
  const Tensor& full = *a.in[0].tensor;
  const Tensor& shard = *a.out[0].tensor;
  if (cuda::copies_bytes(shard.dtype, full.dtype)) {
    cuda::launch_repeat_bytes(a.out[0].data, shard.bytes, a.in[0].data, full.bytes,
                              context.stream());
    return;
  }
  if (shard.elements() > full.elements())
    a.fail("reduce_scatter: the shard must be smaller than the full tensor");
  cuda::launch_cast(shard.dtype, a.out[0].data, full.dtype, a.in[0].data, shard.elements(),
                    context.stream());
}

}  // namespace vrambench

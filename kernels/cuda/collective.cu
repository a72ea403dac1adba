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

namespace {
// `to_bytes` of `to` filled with `from_bytes` of `from` repeated.
void repeat_bytes(void* to, std::int64_t to_bytes, const void* from, std::int64_t from_bytes,
                  cudaStream_t stream) {
  auto* out = static_cast<unsigned char*>(to);
  for (std::int64_t at = 0; at < to_bytes; at += from_bytes)
    VB_CUDA_CHECK(cudaMemcpyAsync(out + at, from,
                                  static_cast<std::size_t>(std::min(from_bytes, to_bytes - at)),
                                  cudaMemcpyDeviceToDevice, stream));
}
bool bytewise(DType a, DType b) {
  return a == b || !is_floating(a) || !is_floating(b);
}
}  // namespace

void launch_all_gather(DType full_dtype, void* full, std::int64_t full_n, DType shard_dtype,
                       const void* shard, std::int64_t shard_n, cudaStream_t stream) {
  if (shard_n <= 0) throw std::invalid_argument("all_gather: an empty shard");
  if (bytewise(full_dtype, shard_dtype)) {
    repeat_bytes(full, full_n * dtype_size(full_dtype), shard, shard_n * dtype_size(shard_dtype),
                 stream);
    return;
  }
  dispatch_float_pair(full_dtype, shard_dtype, [&](auto to_tag, auto from_tag) {
    using To = decltype(to_tag);
    using From = decltype(from_tag);
    gather_kernel<To, From><<<grid_for(full_n, 256), 256, 0, stream>>>(
        static_cast<To*>(full), full_n, static_cast<const From*>(shard), shard_n);
  });
  VB_CHECK_LAUNCH("gather_kernel");
}

void launch_reduce_scatter(DType shard_dtype, void* shard, std::int64_t shard_n, DType full_dtype,
                           const void* full, std::int64_t full_n, cudaStream_t stream) {
  if (bytewise(shard_dtype, full_dtype)) {
    repeat_bytes(shard, shard_n * dtype_size(shard_dtype), full, full_n * dtype_size(full_dtype),
                 stream);
    return;
  }
  if (shard_n > full_n)
    throw std::invalid_argument("reduce_scatter: the shard must be smaller than the full tensor");
  launch_cast(shard_dtype, shard, full_dtype, full, shard_n, stream);
}

}  // namespace vrambench::cuda

namespace vrambench {

void cuda_run_all_gather(const Operands& a, CudaContext& context) {
  const Tensor& shard = *a.in[0].tensor;
  const Tensor& full = *a.out[0].tensor;
  cuda::launch_all_gather(full.dtype, a.out[0].data, full.elements(), shard.dtype, a.in[0].data,
                          shard.elements(), context.stream());
}

void cuda_run_reduce_scatter(const Operands& a, CudaContext& context) {
  const Tensor& full = *a.in[0].tensor;
  const Tensor& shard = *a.out[0].tensor;
  cuda::launch_reduce_scatter(shard.dtype, a.out[0].data, shard.elements(), full.dtype,
                              a.in[0].data, full.elements(), context.stream());
}

}  // namespace vrambench

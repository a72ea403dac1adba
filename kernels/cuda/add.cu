// Element-wise add kernel.
#include "cuda/add.h"
#include "cuda/check.h"
#include "cuda/op_table.h"

namespace vrambench::cuda {
namespace {
template <typename T, typename B>
__global__ void add_kernel(T* c, const T* a, const B* b, std::int64_t n) {
  VB_GRID_STRIDE(i, n) add_body(i, c, a, b);
}
}  // namespace

void launch_add(DType dtype, void* c, const void* a, DType b_dtype, const void* b, std::int64_t n,
                cudaStream_t stream) {
  dispatch_float_pair(dtype, b_dtype, [&](auto tag, auto b_tag) {
    using T = decltype(tag);
    using B = decltype(b_tag);
    add_kernel<T, B><<<grid_for(n, 256), 256, 0, stream>>>(
        static_cast<T*>(c), static_cast<const T*>(a), static_cast<const B*>(b), n);
  });
  VB_CHECK_LAUNCH("add_kernel");
}

}  // namespace vrambench::cuda

namespace vrambench {

// b may be a 16-bit branch beside an fp32 stream (autocast, QLoRA).
void cuda_run_add(const Operands& a, CudaContext& context) {
  if (a.in[0].tensor->elements() != a.in[1].tensor->elements())
    a.fail("add operands differ in size");
  cuda::launch_add(a.dtype(), a.out[0].data, a.in[0].data, a.in[1].tensor->dtype, a.in[1].data,
                   a.out[0].tensor->elements(), context.stream());
}

}  // namespace vrambench

// Element-wise dtype conversion kernel.
#include "cuda/cast.h"
#include "cuda/check.h"
#include "cuda/op_table.h"

namespace vrambench::cuda {
namespace {
template <typename To, typename From>
__global__ void cast_kernel(To* y, const From* x, std::int64_t n) {
  VB_GRID_STRIDE(i, n) cast_body(i, y, x);
}
template <typename To, typename From>
__global__ void cast_rows_kernel(To* y, std::int64_t ldy, const From* x, std::int64_t ldx,
                                 std::int64_t rows, std::int64_t cols, bool accumulate) {
  VB_GRID_STRIDE(i, rows * cols) cast_rows_body(i, y, ldy, x, ldx, cols, accumulate);
}
}  // namespace

void launch_cast(DType to, void* y, DType from, const void* x, std::int64_t n,
                 cudaStream_t stream) {
  dispatch_float_pair(to, from, [&](auto to_tag, auto from_tag) {
    using To = decltype(to_tag);
    using From = decltype(from_tag);
    cast_kernel<To, From>
        <<<grid_for(n, 256), 256, 0, stream>>>(static_cast<To*>(y), static_cast<const From*>(x), n);
  });
  VB_CHECK_LAUNCH("cast_kernel");
}

void launch_cast_rows(DType to, void* y, std::int64_t ldy, DType from, const void* x,
                      std::int64_t ldx, std::int64_t rows, std::int64_t cols, bool accumulate,
                      cudaStream_t stream) {
  if (rows < 0 || cols < 0 || ldy < cols || ldx < cols)
    throw std::invalid_argument("cast_rows: leading dimensions must be at least the columns");
  if (rows == 0 || cols == 0) return;
  dispatch_float_pair(to, from, [&](auto to_tag, auto from_tag) {
    using To = decltype(to_tag);
    using From = decltype(from_tag);
    cast_rows_kernel<To, From><<<grid_for(rows * cols, 256), 256, 0, stream>>>(
        static_cast<To*>(y), ldy, static_cast<const From*>(x), ldx, rows, cols, accumulate);
  });
  VB_CHECK_LAUNCH("cast_rows_kernel");
}

}  // namespace vrambench::cuda

namespace vrambench {

void cuda_run_cast(const Operands& a, CudaContext& context) {
  if (a.in[0].tensor->elements() != a.out[0].tensor->elements())
    a.fail("cast operands differ in size");
  cuda::launch_cast(a.out[0].tensor->dtype, a.out[0].data, a.in[0].tensor->dtype, a.in[0].data,
                    a.in[0].tensor->elements(), context.stream());
}

}  // namespace vrambench

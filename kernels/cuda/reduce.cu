// Column sums over the whole GPU (two stages through fp32 partials), the shared stage 2, and the
// grids of the column and row kernels.
#include <stdexcept>
#include <string>

#include "cuda/check.h"
#include "cuda/reduce.h"

namespace vrambench::cuda {
namespace {

constexpr int kFinishThreads = static_cast<int>(kFinishColumns * kFinishLanes);

template <typename T>
__global__ void column_sum_partial_kernel(float* partial, const T* in, std::int64_t rows,
                                          std::int64_t cols, std::int64_t chunk_rows) {
  const std::int64_t col = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (col < cols) column_sum_partial_body(col, blockIdx.y, partial, in, rows, cols, chunk_rows);
}

// A block takes kFinishColumns columns at a time; its kFinishLanes lanes split their chunks.
template <typename T>
__global__ void __launch_bounds__(kFinishThreads)
    column_finish_kernel(T* out, const float* partial, std::int64_t chunks, std::int64_t cols,
                         bool accumulate) {
  __shared__ float sums[kFinishLanes][kFinishColumns];
  const std::int64_t c = threadIdx.x % kFinishColumns, lane = threadIdx.x / kFinishColumns;
  // `base` is the same for every thread of the block: the barriers are in uniform control flow.
  for (std::int64_t base = static_cast<std::int64_t>(blockIdx.x) * kFinishColumns; base < cols;
       base += static_cast<std::int64_t>(gridDim.x) * kFinishColumns) {
    const std::int64_t col = base + c;
    sums[lane][c] =
        col < cols ? column_finish_part(col, lane, kFinishLanes, partial, chunks, cols) : 0.0f;
    __syncthreads();
    if (lane == 0 && col < cols) {
      float sum = 0.0f;
      for (std::int64_t l = 0; l < kFinishLanes; ++l) sum += sums[l][c];
      column_store(col, out, sum, accumulate);
    }
    __syncthreads();  // the next columns overwrite sums
  }
}

template <typename T>
__global__ void column_sum_kernel(T* out, const T* in, std::int64_t rows, std::int64_t cols,
                                  bool accumulate) {
  VB_GRID_STRIDE(col, cols) column_sum_body(col, out, in, rows, cols, accumulate);
}

}  // namespace

dim3 column_grid(std::int64_t cols, std::int64_t chunks) {
  const std::int64_t blocks = ceil_div(cols, kColumnThreads);
  if (blocks > 0x7fffffff || chunks > kMaxColumnChunks)
    throw std::invalid_argument("column reduction: " + std::to_string(cols) + " columns in " +
                                std::to_string(chunks) + " chunks exceed the grid");
  return dim3(static_cast<unsigned>(blocks < 1 ? 1 : blocks),
              static_cast<unsigned>(chunks < 1 ? 1 : chunks));
}

unsigned finish_grid(std::int64_t cols) {
  return grid_for(cols, static_cast<unsigned>(kFinishColumns));
}

unsigned row_grid(std::int64_t rows) {
  // Beyond this many blocks the rows loop; it is far more than the GPU runs at once.
  constexpr std::int64_t cap = 65535LL * 16;
  return static_cast<unsigned>(rows < 1 ? 1 : (rows > cap ? cap : rows));
}

void launch_column_finish(DType dtype, void* out, const float* partial, std::int64_t chunks,
                          std::int64_t cols, bool accumulate, cudaStream_t stream) {
  dispatch_float(dtype, [&](auto tag) {
    using T = decltype(tag);
    column_finish_kernel<T><<<finish_grid(cols), kFinishThreads, 0, stream>>>(
        static_cast<T*>(out), partial, chunks, cols, accumulate);
  });
  VB_CHECK_LAUNCH("column_finish_kernel");
}

void launch_column_sum(DType dtype, void* out, const void* in, std::int64_t rows, std::int64_t cols,
                       bool accumulate, void* workspace, Bytes workspace_bytes,
                       cudaStream_t stream) {
  const ColumnChunks chunks =
      column_chunks(rows, cols, 1, workspace != nullptr ? workspace_bytes : 0);
  if (chunks.count == 1) {
    dispatch_float(dtype, [&](auto tag) {
      using T = decltype(tag);
      column_sum_kernel<T><<<grid_for(cols, kColumnThreads), kColumnThreads, 0, stream>>>(
          static_cast<T*>(out), static_cast<const T*>(in), rows, cols, accumulate);
    });
    VB_CHECK_LAUNCH("column_sum_kernel");
    return;
  }
  auto* partial = static_cast<float*>(workspace);
  dispatch_float(dtype, [&](auto tag) {
    using T = decltype(tag);
    column_sum_partial_kernel<T><<<column_grid(cols, chunks.count), kColumnThreads, 0, stream>>>(
        partial, static_cast<const T*>(in), rows, cols, chunks.rows);
  });
  VB_CHECK_LAUNCH("column_sum_partial_kernel");
  launch_column_finish(dtype, out, partial, chunks.count, cols, accumulate, stream);
}

}  // namespace vrambench::cuda

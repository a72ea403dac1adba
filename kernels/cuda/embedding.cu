// Embedding kernels: gather forward; backward by a counting sort of the rows by token (scratch in
// the GEMM workspace) and a block per (token, columns), positions as a column sum over the batch.
#include <stdexcept>
#include <string>

#include "cuda/check.h"
#include "cuda/embedding.h"
#include "cuda/op_table.h"
#include "cuda/reduce.h"

namespace vrambench::cuda {
namespace {

constexpr int kScanThreads = 1024;

template <typename T>
__global__ void embedding_fwd_kernel(T* x, const std::int32_t* tokens, const T* wte, const T* wpe,
                                     std::int64_t n, std::int64_t seq, std::int64_t hidden,
                                     float scale) {
  VB_GRID_STRIDE(i, n) embedding_fwd_body(i, x, tokens, wte, wpe, seq, hidden, scale);
}

__global__ void embedding_count_kernel(std::int32_t* counts, const std::int32_t* tokens,
                                       std::int64_t first, std::int64_t n, std::int64_t vocab) {
  VB_GRID_STRIDE(i, n) embedding_count_body(i, counts, tokens, first, vocab);
}

// Exclusive prefix sum of counts[V] into offsets[V + 1] (offsets[V] = the pass's rows), clearing
// counts for the scatter's cursors. One block: its work is O(V), not O(rows). Thread t owns the
// contiguous counts [t * per, (t + 1) * per); the per-thread totals are scanned in shared memory.
__global__ void __launch_bounds__(kScanThreads)
    embedding_offsets_kernel(std::int32_t* offsets, std::int32_t* counts, std::int64_t vocab) {
  __shared__ std::int32_t totals[kScanThreads];
  const std::int64_t t = threadIdx.x;
  const std::int64_t per = ceil_div(vocab, kScanThreads);
  const std::int64_t begin = t * per < vocab ? t * per : vocab;
  const std::int64_t end = begin + per < vocab ? begin + per : vocab;
  std::int32_t own = 0;
  for (std::int64_t v = begin; v < end; ++v) own += counts[v];
  totals[t] = own;
  __syncthreads();
  // Inclusive scan of the totals (Hillis-Steele): read, barrier, add, barrier.
  for (int step = 1; step < kScanThreads; step *= 2) {
    const std::int32_t add = t >= step ? totals[t - step] : 0;
    __syncthreads();
    totals[t] += add;
    __syncthreads();
  }
  std::int32_t run = totals[t] - own;
  for (std::int64_t v = begin; v < end; ++v) {
    const std::int32_t c = counts[v];
    offsets[v] = run;
    run += c;
    counts[v] = 0;
  }
  if (t == kScanThreads - 1) offsets[vocab] = totals[t];
}

__global__ void embedding_scatter_kernel(std::int32_t* sorted, std::int32_t* cursor,
                                         const std::int32_t* offsets, const std::int32_t* tokens,
                                         std::int64_t first, std::int64_t n, std::int64_t vocab) {
  VB_GRID_STRIDE(i, n) embedding_scatter_body(i, sorted, cursor, offsets, tokens, first, vocab);
}

// Block (v, column tile): token v's rows for kColumnThreads columns.
template <typename T>
__global__ void embedding_bucket_kernel(T* dwte, const T* dx, const std::int32_t* sorted,
                                        const std::int32_t* offsets, std::int64_t hidden,
                                        bool accumulate, float scale) {
  const std::int64_t h = static_cast<std::int64_t>(blockIdx.y) * blockDim.x + threadIdx.x;
  if (h < hidden)
    embedding_bucket_body(blockIdx.x, h, dwte, dx, sorted, offsets, hidden, accumulate, scale);
}

template <typename T>
__global__ void embedding_dwte_column_kernel(T* dwte, const T* dx, const std::int32_t* tokens,
                                             std::int64_t rows, std::int64_t hidden,
                                             std::int64_t vocab, float scale) {
  VB_GRID_STRIDE(h, hidden)
  embedding_dwte_column_body(h, dwte, dx, tokens, rows, hidden, vocab, scale);
}

// dwte from the rows sorted by token, in passes of what the workspace holds.
void token_table_grad(DType dtype, void* dwte, const void* dx, const std::int32_t* tokens,
                      std::int64_t rows, std::int64_t hidden, std::int64_t vocab, bool accumulate,
                      float scale, void* workspace, Bytes workspace_bytes, cudaStream_t stream) {
  const std::int64_t pass =
      embedding_sort_rows(rows, vocab, workspace != nullptr ? workspace_bytes : 0);
  if (pass == 0) {
    const auto es = static_cast<std::size_t>(dtype_size(dtype));
    if (!accumulate)
      VB_CUDA_CHECK(
          cudaMemsetAsync(dwte, 0, es * static_cast<std::size_t>(vocab * hidden), stream));
    if (rows < 1) return;
    dispatch_float(dtype, [&](auto tag) {
      using T = decltype(tag);
      embedding_dwte_column_kernel<T>
          <<<grid_for(hidden, kColumnThreads), kColumnThreads, 0, stream>>>(
              static_cast<T*>(dwte), static_cast<const T*>(dx), tokens, rows, hidden, vocab, scale);
    });
    VB_CHECK_LAUNCH("embedding_dwte_column_kernel");
    return;
  }
  const std::int64_t tiles = ceil_div(hidden, kColumnThreads);
  // Row indices and offsets are int32; the table's rows are gridDim.x, its column tiles gridDim.y.
  if (rows > 0x7fffffff || vocab > 0x7fffffff || tiles > 65535)
    throw std::invalid_argument("embedding backward: " + std::to_string(rows) + " rows into a " +
                                std::to_string(vocab) + " x " + std::to_string(hidden) +
                                " table exceed the sort's int32 indices or the grid");
  auto* counts = static_cast<std::int32_t*>(workspace);
  std::int32_t* offsets = counts + vocab;
  std::int32_t* sorted = offsets + vocab + 1;
  for (std::int64_t first = 0; first < rows; first += pass) {
    const std::int64_t n = rows - first < pass ? rows - first : pass;
    VB_CUDA_CHECK(
        cudaMemsetAsync(counts, 0, sizeof(std::int32_t) * static_cast<std::size_t>(vocab), stream));
    embedding_count_kernel<<<grid_for(n, 256), 256, 0, stream>>>(counts, tokens, first, n, vocab);
    VB_CHECK_LAUNCH("embedding_count_kernel");
    embedding_offsets_kernel<<<1, kScanThreads, 0, stream>>>(offsets, counts, vocab);
    VB_CHECK_LAUNCH("embedding_offsets_kernel");
    embedding_scatter_kernel<<<grid_for(n, 256), 256, 0, stream>>>(sorted, counts, offsets, tokens,
                                                                   first, n, vocab);
    VB_CHECK_LAUNCH("embedding_scatter_kernel");
    // Every pass after the first adds to what the previous ones stored.
    const bool add = accumulate || first > 0;
    const dim3 grid(static_cast<unsigned>(vocab), static_cast<unsigned>(tiles));
    dispatch_float(dtype, [&](auto tag) {
      using T = decltype(tag);
      embedding_bucket_kernel<T><<<grid, kColumnThreads, 0, stream>>>(
          static_cast<T*>(dwte), static_cast<const T*>(dx), sorted, offsets, hidden, add, scale);
    });
    VB_CHECK_LAUNCH("embedding_bucket_kernel");
  }
}

}  // namespace

void launch_embedding_fwd(DType dtype, void* x, const std::int32_t* tokens, const void* wte,
                          const void* wpe, std::int64_t rows, std::int64_t seq, std::int64_t hidden,
                          float scale, cudaStream_t stream) {
  const std::int64_t n = rows * hidden;
  dispatch_float(dtype, [&](auto tag) {
    using T = decltype(tag);
    embedding_fwd_kernel<T><<<grid_for(n, 256), 256, 0, stream>>>(
        static_cast<T*>(x), tokens, static_cast<const T*>(wte), static_cast<const T*>(wpe), n, seq,
        hidden, scale);
  });
  VB_CHECK_LAUNCH("embedding_fwd_kernel");
}

void launch_embedding_bwd(DType dtype, void* dwte, void* dwpe, const void* dx,
                          const std::int32_t* tokens, std::int64_t rows, std::int64_t seq,
                          std::int64_t hidden, std::int64_t vocab, std::int64_t positions,
                          bool accumulate, float scale, void* workspace, Bytes workspace_bytes,
                          cudaStream_t stream) {
  if (dwpe != nullptr && scale != 1.0f)
    throw std::invalid_argument("embedding backward: a scaled embedding with learned positions");
  if (dwpe != nullptr) {
    // dx as [B, S*H]: the positions' gradient is its column sum over the batch. Never
    // accumulated: nothing else writes the position table's gradient.
    const auto es = static_cast<std::size_t>(dtype_size(dtype));
    const std::int64_t batch = seq > 0 ? rows / seq : 0;
    launch_column_sum(dtype, dwpe, dx, batch, seq * hidden, false, workspace, workspace_bytes,
                      stream);
    if (positions > seq)
      VB_CUDA_CHECK(
          cudaMemsetAsync(static_cast<char*>(dwpe) + es * static_cast<std::size_t>(seq * hidden), 0,
                          es * static_cast<std::size_t>((positions - seq) * hidden), stream));
  }
  token_table_grad(dtype, dwte, dx, tokens, rows, hidden, vocab, accumulate, scale, workspace,
                   workspace_bytes, stream);
}

}  // namespace vrambench::cuda

namespace vrambench {

void cuda_run_embedding_fwd(const Operands& a, CudaContext& context) {
  const EmbeddingDims d = embedding_dims(a);
  const Operand* wpe = a.input("wpe");
  cuda::launch_embedding_fwd(a.dtype(), a.out[0].data, a.i32(a.in[0]), a.in[1].data,
                             wpe ? wpe->data : nullptr, d.B * d.S, d.S, d.H, a.op.embed_scale,
                             context.stream());
}

void cuda_run_embedding_bwd(const Operands& a, CudaContext& context) {
  const EmbeddingDims d = embedding_dims(a);
  const Operand* dwpe = a.output("dwpe");
  cuda::launch_embedding_bwd(a.dtype(), a.out[0].data, dwpe ? dwpe->data : nullptr, a.in[0].data,
                             a.i32(a.in[1]), d.B * d.S, d.S, d.H, d.V, d.P, a.accumulates(a.out[0]),
                             a.op.embed_scale, a.workspace, a.workspace_bytes, context.stream());
}

}  // namespace vrambench

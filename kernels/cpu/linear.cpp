// Dense layer in fp32 with a fixed summation order (results do not depend on the machine).
// The forward's dot products keep eight partial sums per output, which the compiler turns into
// vector adds (a single running sum could not be vectorised without reassociation), four outputs
// per pass over an input row, and add the partials in double. The backward's inner loops are axpys
// over contiguous rows; the weight gradient walks the input in chunks of rows that stay in cache
// while every output row is updated.
#include "cpu/linear.h"

#include <algorithm>
#include <vector>

namespace vrambench::cpu {
namespace {

constexpr std::int64_t kLanes = 8;

struct Partials {
  float lane[kLanes] = {};
  double total() const {
    double s = 0.0;
    for (float v : lane) s += v;
    return s;
  }
};

}  // namespace

void linear_fwd(float* y, const float* x, const float* w, const float* b, std::int64_t M,
                std::int64_t In, std::int64_t Out) {
  const std::int64_t In_vec = In / kLanes * kLanes;
  for (std::int64_t m = 0; m < M; ++m) {
    const float* xr = x + m * In;
    float* yr = y + m * Out;
    for (std::int64_t o0 = 0; o0 < Out; o0 += 4) {
      const std::int64_t n_out = std::min<std::int64_t>(4, Out - o0);
      Partials p[4];
      for (std::int64_t k = 0; k < n_out; ++k) {
        const float* wr = w + (o0 + k) * In;
        Partials& acc = p[k];
        for (std::int64_t i = 0; i < In_vec; i += kLanes)
          for (std::int64_t l = 0; l < kLanes; ++l) acc.lane[l] += xr[i + l] * wr[i + l];
        for (std::int64_t i = In_vec; i < In; ++i) acc.lane[i - In_vec] += xr[i] * wr[i];
      }
      for (std::int64_t k = 0; k < n_out; ++k)
        yr[o0 + k] = static_cast<float>(p[k].total() + (b ? b[o0 + k] : 0.0));
    }
  }
}

void linear_bwd(float* dx, float* dw, float* db, const float* dy, const float* x, const float* w,
                std::int64_t M, std::int64_t In, std::int64_t Out) {
  // dx[m,:] = sum_o dy[m,o] w[o,:]
  for (std::int64_t m = 0; m < M; ++m) {
    const float* g = dy + m * Out;
    float* dxr = dx + m * In;
    std::fill(dxr, dxr + In, 0.0f);
    for (std::int64_t o = 0; o < Out; ++o) {
      const float go = g[o];
      if (go == 0.0f) continue;
      const float* wr = w + o * In;
      for (std::int64_t i = 0; i < In; ++i) dxr[i] += go * wr[i];
    }
  }
  // dw[o,:] = sum_m dy[m,o] x[m,:], db[o] = sum_m dy[m,o]
  constexpr std::int64_t kRowChunk = 32;
  std::fill(dw, dw + Out * In, 0.0f);
  std::vector<double> acc_b(static_cast<std::size_t>(Out), 0.0);
  for (std::int64_t m0 = 0; m0 < M; m0 += kRowChunk) {
    const std::int64_t m1 = std::min(M, m0 + kRowChunk);
    for (std::int64_t o = 0; o < Out; ++o) {
      float* dwr = dw + o * In;
      for (std::int64_t m = m0; m < m1; ++m) {
        const float go = dy[m * Out + o];
        if (go == 0.0f) continue;
        const float* xr = x + m * In;
        for (std::int64_t i = 0; i < In; ++i) dwr[i] += go * xr[i];
        acc_b[static_cast<std::size_t>(o)] += go;
      }
    }
  }
  if (db)
    for (std::int64_t o = 0; o < Out; ++o)
      db[o] = static_cast<float>(acc_b[static_cast<std::size_t>(o)]);
}

}  // namespace vrambench::cpu

// Dense layer. Dot products accumulate in double; loops keep the innermost index contiguous.
#include "cpu/linear.h"

#include <algorithm>
#include <vector>

namespace vrambench::cpu {

void linear_fwd(float* y, const float* x, const float* w, const float* b, std::int64_t M,
                std::int64_t In, std::int64_t Out) {
  for (std::int64_t m = 0; m < M; ++m) {
    const float* xr = x + m * In;
    for (std::int64_t o = 0; o < Out; ++o) {
      const float* wr = w + o * In;
      double acc = b ? b[o] : 0.0;
      for (std::int64_t i = 0; i < In; ++i) acc += static_cast<double>(xr[i]) * wr[i];
      y[m * Out + o] = static_cast<float>(acc);
    }
  }
}

void linear_bwd(float* dx, float* dw, float* db, const float* dy, const float* x, const float* w,
                std::int64_t M, std::int64_t In, std::int64_t Out) {
  std::vector<double> acc_x(static_cast<std::size_t>(In));
  std::vector<double> acc_w(static_cast<std::size_t>(Out * In), 0.0);
  std::vector<double> acc_b(static_cast<std::size_t>(Out), 0.0);
  for (std::int64_t m = 0; m < M; ++m) {
    const float* g = dy + m * Out;
    const float* xr = x + m * In;
    std::fill(acc_x.begin(), acc_x.end(), 0.0);
    for (std::int64_t o = 0; o < Out; ++o) {
      const double go = g[o];
      if (go == 0.0) continue;
      const float* wr = w + o * In;
      double* aw = acc_w.data() + o * In;
      for (std::int64_t i = 0; i < In; ++i) {
        acc_x[static_cast<std::size_t>(i)] += go * wr[i];
        aw[i] += go * xr[i];
      }
      acc_b[static_cast<std::size_t>(o)] += go;
    }
    for (std::int64_t i = 0; i < In; ++i)
      dx[m * In + i] = static_cast<float>(acc_x[static_cast<std::size_t>(i)]);
  }
  for (std::size_t i = 0; i < acc_w.size(); ++i) dw[i] = static_cast<float>(acc_w[i]);
  if (db)
    for (std::int64_t o = 0; o < Out; ++o) db[o] = static_cast<float>(acc_b[static_cast<std::size_t>(o)]);
}

}  // namespace vrambench::cpu

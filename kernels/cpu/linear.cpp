// Dense layer. Dot products accumulate in double; loops keep the innermost index contiguous.
#include "cpu/linear.h"

#include <algorithm>
#include <vector>

namespace vrambench::cpu {

void linear_fwd(float* y, const float* x, const float* w, const float* b, std::int64_t M,
                std::int64_t In, std::int64_t Out) {
  // w transposed to [In, Out] once, so that the inner loop runs over contiguous outputs and
  // vectorises (a dot-product reduction in double would not, without reassociation).
  std::vector<double> w_t(static_cast<std::size_t>(In * Out));
  for (std::int64_t o = 0; o < Out; ++o)
    for (std::int64_t i = 0; i < In; ++i)
      w_t[static_cast<std::size_t>(i * Out + o)] = w[o * In + i];
  std::vector<double> acc(static_cast<std::size_t>(Out));
  for (std::int64_t m = 0; m < M; ++m) {
    for (std::int64_t o = 0; o < Out; ++o) acc[static_cast<std::size_t>(o)] = b ? b[o] : 0.0;
    const float* xr = x + m * In;
    for (std::int64_t i = 0; i < In; ++i) {
      const double xi = xr[i];
      const double* wr = w_t.data() + i * Out;
      for (std::int64_t o = 0; o < Out; ++o) acc[static_cast<std::size_t>(o)] += xi * wr[o];
    }
    for (std::int64_t o = 0; o < Out; ++o)
      y[m * Out + o] = static_cast<float>(acc[static_cast<std::size_t>(o)]);
  }
}

void linear_bwd(float* dx, float* dw, float* db, const float* dy, const float* x, const float* w,
                std::int64_t M, std::int64_t In, std::int64_t Out) {
  std::vector<double> acc_x(static_cast<std::size_t>(In));
  std::vector<double> acc_w(static_cast<std::size_t>(Out * In), 0.0);
  std::vector<double> acc_b(static_cast<std::size_t>(Out), 0.0);
  const std::vector<double> w_d(w, w + Out * In);
  std::vector<double> x_d(static_cast<std::size_t>(In));
  for (std::int64_t m = 0; m < M; ++m) {
    const float* g = dy + m * Out;
    std::copy(x + m * In, x + (m + 1) * In, x_d.begin());
    const double* xr = x_d.data();
    std::fill(acc_x.begin(), acc_x.end(), 0.0);
    for (std::int64_t o = 0; o < Out; ++o) {
      const double go = g[o];
      if (go == 0.0) continue;
      const double* wr = w_d.data() + o * In;
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
    for (std::int64_t o = 0; o < Out; ++o)
      db[o] = static_cast<float>(acc_b[static_cast<std::size_t>(o)]);
}

}  // namespace vrambench::cpu

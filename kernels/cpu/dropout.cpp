// Dropout forward and backward.
#include "cpu/dropout.h"

#include "common/math.h"

namespace vrambench::cpu {

void dropout_fwd(float* y, float* mask, const float* x, std::int64_t n, float p,
                 std::uint64_t seed) {
  const float scale = dropout_scale(p);
  for (std::int64_t i = 0; i < n; ++i) {
    const bool kept = kmath::keep(seed, static_cast<std::uint64_t>(i), p);
    mask[i] = kept ? 1.0f : 0.0f;
    y[i] = kept ? x[i] * scale : 0.0f;
  }
}

void dropout_bwd(float* dx, const float* dy, const float* mask, std::int64_t n, float p) {
  const float scale = dropout_scale(p);
  for (std::int64_t i = 0; i < n; ++i) dx[i] = mask[i] != 0.0f ? dy[i] * scale : 0.0f;
}

}  // namespace vrambench::cpu

// Optimizer steps: the per-element updates of common/math.h over every element.
#include "cpu/optimizer.h"

namespace vrambench::cpu {

void adamw_step(float* param, const float* grad, float* m, float* v, std::int64_t n,
                const kmath::AdamParams& p) {
  for (std::int64_t i = 0; i < n; ++i) kmath::adamw_update(&param[i], grad[i], &m[i], &v[i], p);
}

void sgd_step(float* param, const float* grad, float* momentum, std::int64_t n,
              const kmath::SgdParams& p) {
  for (std::int64_t i = 0; i < n; ++i) kmath::sgd_update(&param[i], grad[i], &momentum[i], p);
}

}  // namespace vrambench::cpu

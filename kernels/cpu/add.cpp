// Element-wise add.
#include "cpu/add.h"

namespace vrambench::cpu {

void add(float* c, const float* a, const float* b, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) c[i] = a[i] + b[i];
}

}  // namespace vrambench::cpu

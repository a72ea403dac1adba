// Element-wise sum c = a + b (residual stream, gradient sums), CPU reference.
#pragma once

#include <cstdint>

namespace vrambench::cpu {

void add(float* c, const float* a, const float* b, std::int64_t n);

}  // namespace vrambench::cpu

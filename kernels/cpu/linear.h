// Dense layer y = x w^T + b and its backward, CPU reference (w is [Out, In] as in nn.Linear).
#pragma once

#include <cstdint>

namespace vrambench::cpu {

void linear_fwd(float* y, const float* x, const float* w, const float* b, std::int64_t M,
                std::int64_t In, std::int64_t Out);
// dx[M,In] = dy w; dw[Out,In] = dy^T x; db[Out] = column sums of dy (db may be null).
void linear_bwd(float* dx, float* dw, float* db, const float* dy, const float* x, const float* w,
                std::int64_t M, std::int64_t In, std::int64_t Out);

}  // namespace vrambench::cpu

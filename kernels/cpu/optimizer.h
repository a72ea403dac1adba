// AdamW and SGD steps over whole tensors, in place, CPU reference.
//
// With a master copy (mixed precision) the update runs on the fp32 master and the caller stores
// round(master) into the 16-bit weight; without one it runs on the weight itself. Either way these
// functions see fp32 values: `param` is the master when there is one, else the weight.
#pragma once

#include <cstdint>

#include "common/math.h"

namespace vrambench::cpu {

void adamw_step(float* param, const float* grad, float* m, float* v, std::int64_t n,
                const kmath::AdamParams& p);
void sgd_step(float* param, const float* grad, float* momentum, std::int64_t n,
              const kmath::SgdParams& p);

}  // namespace vrambench::cpu

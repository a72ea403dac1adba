// Host buffers of one quantised weight, sized by core/quant_layout.h, for the quantisation tests on
// the CPU (test_quant.cpp) and against the GPU (gpu/test_quant_kernels.cpp).
#pragma once

#include <cstdint>
#include <vector>

#include "common/quant_math.h"
#include "core/quant_layout.h"

namespace vrambench::test {

struct QuantizedWeight {
  std::vector<std::uint8_t> data, qabsmax;
  std::vector<float> absmax, absmax2, offset;
  QuantizedWeight(QuantKind kind, std::int64_t rows, std::int64_t cols, bool double_quant) {
    const std::int64_t n = rows * cols;
    const QuantizedWeightBytes bytes = quantized_weight_bytes(n, rows, kind, double_quant);
    data.resize(static_cast<std::size_t>(bytes.data));
    if (kind == QuantKind::int8) {
      absmax.resize(static_cast<std::size_t>(rows));
    } else {
      // Under double quant `absmax` is quantise's fp32 scratch (the transient the sizes report).
      absmax.resize(static_cast<std::size_t>(quant_blocks(n, kQuant4bitBlock)));
      if (double_quant) {
        qabsmax.resize(static_cast<std::size_t>(bytes.absmax));
        absmax2.resize(static_cast<std::size_t>(bytes.absmax2 / 4));
        offset.resize(1);
      }
    }
  }
  kquant::QuantizedWeightBuffers buffers() {
    return {data.data(), absmax.data(), qabsmax.empty() ? nullptr : qabsmax.data(),
            absmax2.empty() ? nullptr : absmax2.data(), offset.empty() ? nullptr : offset.data()};
  }
};

}  // namespace vrambench::test

// Storage types of tensors and the precision recipes a run can ask for.
#pragma once

#include <cstdint>
#include <string_view>

namespace vrambench {

// How a tensor is stored. Activations and weights follow the run's precision; statistics
// (norm mean/rstd, log-sum-exp) and optimizer state are fp32; dropout masks one byte per element;
// token ids i32; a router's expert indices and the dispatch's orders i64, as PyTorch's topk and
// sort return them.
enum class DType : std::uint8_t { f32, f16, bf16, u8, i32, i64 };

constexpr std::int64_t dtype_size(DType t) {
  switch (t) {
    case DType::f32:
      return 4;
    case DType::f16:
      return 2;
    case DType::bf16:
      return 2;
    case DType::u8:
      return 1;
    case DType::i32:
      return 4;
    case DType::i64:
      return 8;
  }
  return 0;
}

// f32, f16, bf16: the dtypes the kernels compute in.
constexpr bool is_floating(DType t) {
  return t == DType::f32 || t == DType::f16 || t == DType::bf16;
}

constexpr std::string_view dtype_name(DType t) {
  switch (t) {
    case DType::f32:
      return "f32";
    case DType::f16:
      return "f16";
    case DType::bf16:
      return "bf16";
    case DType::u8:
      return "u8";
    case DType::i32:
      return "i32";
    case DType::i64:
      return "i64";
  }
  return "?";
}

}  // namespace vrambench

// Bytes of quantised base weights (NF4, FP4, int8) and of bitsandbytes' 8-bit AdamW state, exactly
// as bitsandbytes stores them: pure functions that the step program and the analytic model share.
//
// The constants are read from bitsandbytes (github.com/bitsandbytes-foundation/bitsandbytes, main
// at 95f9af3, Aug 2026); each names the file and function it comes from.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "core/units.h"

namespace vrambench {

// How a frozen base weight is stored. nf4 / fp4: 4-bit codes with a per-block absmax
// (bnb.nn.Linear4bit); int8: one byte per weight with a per-row absmax (bnb.nn.Linear8bitLt).
enum class QuantKind : std::uint8_t { none, nf4, fp4, int8 };

constexpr std::string_view quant_kind_name(QuantKind kind) {
  switch (kind) {
    case QuantKind::none:
      return "none";
    case QuantKind::nf4:
      return "nf4";
    case QuantKind::fp4:
      return "fp4";
    case QuantKind::int8:
      return "int8";
  }
  return "?";
}
constexpr bool is_4bit(QuantKind kind) {
  return kind == QuantKind::nf4 || kind == QuantKind::fp4;
}

// ---- constants ----------------------------------------------------------------------------------

// Values per absmax block of a 4-bit weight. functional.py quantize_4bit: `if blocksize is None:
// blocksize = 64`; nn/modules.py Params4bit.__new__ the same default.
inline constexpr std::int64_t kQuant4bitBlock = 64;
// Absmax values per second-level block under double quantisation (compress_statistics).
// functional.py quantize_4bit: `quantize_blockwise(_absmax - offset, blocksize=256)`.
inline constexpr std::int64_t kQuantNestedBlock = 256;
// Entries of the 4-bit code table a QuantState keeps (`code`, fp32). functional.py get_4bit_type:
// 16 values, `assert data.numel() == 16`; quantize_4bit stores a fresh one in every QuantState.
inline constexpr std::int64_t kQuant4bitCodeEntries = 16;
// Entries of the dynamic 8-bit map (fp32). functional.py create_dynamic_map: 256 values;
// quantize_blockwise keeps its own copy in the nested state (`code.to(A.device, copy=True)`).
inline constexpr std::int64_t kDynamicMapEntries = 256;
// The mean subtracted from the absmax before double quantisation: one fp32 scalar on the device.
// functional.py quantize_4bit: `offset = _absmax.mean()`.
inline constexpr Bytes kNestedOffsetBytes = 4;

// Values per absmax block of 8-bit optimizer state. optim/optimizer.py Optimizer2State.init_state:
// `blocksize = 256`; csrc/ops.cu `#define BLOCKSIZE_2STATE 256` (one CUDA block per block).
inline constexpr std::int64_t kOptimizer8bitBlock = 256;
// Tensors with fewer elements keep fp32 state. optim/optimizer.py Optimizer2State.__init__
// `min_8bit_size=4096`; init_state: `if p.numel() < config["min_8bit_size"]: dtype =
// torch.float32`.
inline constexpr std::int64_t kMin8bitSize = 4096;
// A paged optimizer pages a state buffer only from this many elements on. optim/optimizer.py
// Optimizer8bit.get_state_buffer: `if not self.is_paged or p.numel() < 1e5:` a plain device buffer.
inline constexpr std::int64_t kPagedMinNumel = 100000;
// The two quantisation maps of an 8-bit optimizer (signed map for m, unsigned for v), once per
// optimizer, shared by all its tensors. optim/optimizer.py Optimizer8bit.fill_qmap: name2qmap
// "dynamic" and "udynamic", 256 fp32 each.
inline constexpr Bytes kOptimizer8bitMapBytes = 2 * kDynamicMapEntries * 4;

// ---- quantised weights ------------------------------------------------------------------------

// The bytes of one quantised weight of `numel` elements in `rows` output rows.
struct QuantizedWeightBytes {
  // The codes: (numel + 1) / 2 bytes for 4-bit (two per byte; functional.py quantize_4bit via
  // backends/cuda/ops.py `torch.empty(((n + 1) // 2, 1), dtype=uint8)`), numel for int8.
  Bytes data = 0;
  // First-level scales: 4-bit, fp32 per block of 64, or one byte per block under double quant
  // (the 8-bit code of absmax - offset); int8, fp32 per row (Int8Params.SCB).
  Bytes absmax = 0;
  // Double quant only: fp32 absmax per 256 first-level blocks (the nested QuantState's absmax).
  Bytes absmax2 = 0;
  // The library's small per-weight constants: the 4-bit code table (16 fp32); under double quant
  // also the nested dynamic map (256 fp32) and the offset (one fp32). None for int8.
  Bytes code_and_offset = 0;
  Bytes total = 0;  // all of the above: what the weight occupies while it is stored
  // Not stored: dequantize_4bit of a double-quantised weight first rebuilds the fp32 absmax
  // (functional.py dequantize_4bit: `absmax = dequantize_blockwise(...)`; `absmax += offset`),
  // a transient of 4 bytes per block next to the dequantised weight.
  Bytes nested_absmax_transient = 0;
  bool operator==(const QuantizedWeightBytes&) const = default;
};

// One allocation of a quantised weight as bitsandbytes makes it: the weight and each tensor of its
// QuantState are separate device tensors (an allocator rounds each on its own).
struct QuantizedTensor {
  std::string_view name;  // "weight", "absmax", "nested_absmax", "quant_map", "nested_quant_map",
                          // "offset", "row_absmax"
  Bytes bytes = 0;
  bool operator==(const QuantizedTensor&) const = default;
};

// Blocks of `block` values covering `numel` values (the last may be partial); rounded up without
// forming numel + block - 1, which could overflow.
constexpr std::int64_t quant_blocks(std::int64_t numel, std::int64_t block) {
  return numel / block + (numel % block != 0 ? 1 : 0);
}

// The bytes of a [rows, numel / rows] weight stored as `kind`; double_quant applies to nf4 / fp4
// (ignored for int8). QuantKind::none gives all zeros (the weight is not quantised). Throws
// UsageError for a negative numel, rows < 1 or numel not a multiple of rows (int8), and overflow.
QuantizedWeightBytes quantized_weight_bytes(std::int64_t numel, std::int64_t rows, QuantKind kind,
                                            bool double_quant);
// The same bytes as the separate tensors bitsandbytes allocates, in allocation order.
std::vector<QuantizedTensor> quantized_weight_tensors(std::int64_t numel, std::int64_t rows,
                                                      QuantKind kind, bool double_quant);

// ---- 8-bit optimizer state --------------------------------------------------------------------

// The state of one parameter tensor under bitsandbytes' 8-bit AdamW (Adam8bit / AdamW8bit /
// PagedAdamW8bit): m and v one byte each plus an fp32 absmax per block of 256 each, or, under
// kMin8bitSize elements, both moments fp32.
struct Optimizer8bitStateBytes {
  Bytes moments = 0;  // m and v: 2 * numel (8-bit) or 8 * numel (32-bit)
  Bytes absmax = 0;   // absmax1 and absmax2: 2 * 4 * ceil(numel / 256); 0 with 32-bit state
  Bytes total = 0;
  bool eight_bit = false;      // numel >= kMin8bitSize
  bool moments_paged = false;  // paged optimizer and numel >= kPagedMinNumel: m and v in managed
                               // memory (the absmax buffers always stay on the device)
  bool operator==(const Optimizer8bitStateBytes&) const = default;
};

// True when a tensor of numel elements keeps 8-bit state (numel >= kMin8bitSize).
constexpr bool optimizer_state_is_8bit(std::int64_t numel) {
  return numel >= kMin8bitSize;
}

// The state bytes of one parameter tensor of `numel` elements. Throws UsageError for a negative
// numel or overflow. The two maps (kOptimizer8bitMapBytes) are per optimizer, not counted here.
Optimizer8bitStateBytes optimizer8bit_state_bytes(std::int64_t numel, bool paged = false);

}  // namespace vrambench

// The starting contents of a step's persistent tensors, the same on every executor: the cpu
// executor fills them on the host, the cuda executor on the GPU, both from the rule chosen here
// (kernels/common/init_values.h computes each element from it).
//
//   weights            N(0, 0.02); biases (name ending ".b") 0; norm weights (name containing "ln"
//                      or "norm") 1; LoRA B (".lora_B") 0, as PEFT starts it, so an adapter
//                      starts as the identity; LoRA A by the weight rule
//   quantised weights  the parts of a frozen base weight stored quantised (QuantizedPart): the
//                      quantisation of the weight the weight rule draws for the dense linear's
//                      rows (rounded to the compute dtype first), so dequantising gives that
//                      weight within quantisation error; the code tables as the library keeps them
//   8-bit state        codes 0 and absmax 0 (every moment 0), as the optimizer state below
//   master weights     the fp32 value of the weight named without ".master", as stored in its dtype
//   optimizer state    0
//   inputs             i32: token ids uniform in [0, vocab); floating (the incoming activation or
//                      gradient of layer/attention/mlp scopes): N(0, 1)
//   anything else      0
// Deterministic in the seed and the tensor name, so a tensor gets the same values in every program
// and every trial.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "common/init_values.h"
#include "program/program.h"

namespace vrambench {

// The rule for persistent tensor `tensor_id` of `program` under `seed`.
kmath::InitRule init_rule(const Program& program, int tensor_id, std::uint64_t seed);

// The rule of a weight named `name` (Role::weight, not a quantised part) under `seed`.
kmath::InitRule weight_init_rule(std::uint64_t seed, std::string_view name);

// The starting value of element i of a weight tensor named `name` under `seed` (before rounding to
// its dtype); tests compare it with what an executor stores.
float initial_weight_value(std::uint64_t seed, std::string_view name, std::int64_t i);

// A persistent tensor that is part of a quantised frozen weight: filled as a whole (from the
// quantisation of the module's weight), not element by element.
struct QuantizedPart {
  enum class Kind { codes, absmax, absmax2, offset, quant_map, nested_quant_map };
  Kind kind = Kind::codes;
  QuantKind quant = QuantKind::none;
  bool double_quant = false;
  std::string weight;  // the dense linear's weight the rows come from: "layer0.attn.qkv.w"
  std::int64_t row_offset = 0, rows = 0, cols = 0;
  DType dtype = DType::f32;  // the dequantised copy's: the weight is drawn rounded to it
};
// The part `tensor_id` is, from the dequantize op that reads it (or its module's codes, for the
// code tables); nullopt for every other tensor.
std::optional<QuantizedPart> quantized_part(const Program& program, int tensor_id);

// The module's weight as the rule draws it: rows [row_offset, +rows) of `part.weight`, in
// part.dtype, rows * cols elements.
void draw_quantized_module(const QuantizedPart& part, std::uint64_t seed, void* w);

// The code tables of a part of kind quant_map (the 16 4-bit levels) or nested_quant_map (the
// signed dynamic map), fp32, into `table` (of the tensor's elements).
void fill_code_table(const QuantizedPart& part, float* table, std::int64_t elements);

// The host contents of a quantised part (the tensor's bytes): the weight drawn, quantised as
// cpu::quantize_weight does, the part copied out.
void fill_quantized_part(const Program& program, int tensor_id, const QuantizedPart& part,
                         std::uint64_t seed, void* data);

}  // namespace vrambench

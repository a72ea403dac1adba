// The configuration of one measurement: the model (architecture and sizes) and the run (sequence,
// batch, precision, attention, recompute, optimizer, scope, allocator, device capacity).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/dtype.h"
#include "core/units.h"

namespace vrambench {

enum class Arch { gpt, llama };
// fp32: fp32 everything. tf32: fp32 storage, tf32 GEMMs. fp16/bf16: mixed precision as in ZeRO
// (16-bit weights, gradients and activations; fp32 master weights and optimizer state).
enum class Precision { fp32, tf32, fp16, bf16 };
enum class Attention { eager, flash };
enum class Recompute { none, selective, full };
enum class Optimizer { adamw, sgd, none };
enum class Scope { model, layer, attention, mlp };
enum class AllocatorKind { direct, caching };

std::string_view to_string(Arch v);
std::string_view to_string(Precision v);
std::string_view to_string(Attention v);
std::string_view to_string(Recompute v);
std::string_view to_string(Optimizer v);
std::string_view to_string(Scope v);
std::string_view to_string(AllocatorKind v);

// Parse by name; throw UsageError naming the option and the allowed values.
Arch parse_arch(std::string_view s);
Precision parse_precision(std::string_view s);
Attention parse_attention(std::string_view s);
Recompute parse_recompute(std::string_view s);
Optimizer parse_optimizer(std::string_view s);
Scope parse_scope(std::string_view s);
AllocatorKind parse_allocator(std::string_view s);

// Storage type of activations and weights for a precision.
DType activation_dtype(Precision p);
// True when the recipe keeps separate fp32 master weights (fp16/bf16).
bool has_master_weights(Precision p);

struct ModelConfig {
  std::string name = "custom";  // preset name, or "custom"
  Arch arch = Arch::gpt;
  std::int64_t hidden = 768;          // H
  std::int64_t heads = 12;            // A
  std::int64_t kv_heads = 12;         // grouped-query attention: key/value heads (== heads for MHA)
  std::int64_t layers = 12;           // L
  std::int64_t ffn = 3072;            // F
  std::int64_t vocab = 50257;         // V
  std::int64_t max_positions = 1024;  // learned positions (gpt only)
  bool tied_embeddings = true;        // lm head shares the token embedding (gpt2) or not (llama)

  std::int64_t head_dim() const { return hidden / heads; }
};

struct RunConfig {
  ModelConfig model;
  std::int64_t seq = 1024;  // S
  std::int64_t batch = 1;   // B: the batch a single trial or estimate uses
  Precision dtype = Precision::bf16;
  Attention attention = Attention::flash;
  Recompute recompute = Recompute::none;
  Optimizer optimizer = Optimizer::adamw;
  double dropout = 0.0;
  Scope scope = Scope::model;
  AllocatorKind allocator = AllocatorKind::caching;
  std::string device = "auto";  // "auto", "sim:PROFILE", "cpu", "cuda"
  Bytes vram = 0;               // capacity override; 0 = the device's own
};

// Checks every field; throws UsageError with one line naming the value and what is allowed.
// Also rejects configurations whose largest tensor or total parameter bytes overflow 64 bits.
void validate(const RunConfig& cfg);

// Number of trainable parameters of the whole model (embeddings, blocks, final norm, lm head).
std::int64_t parameter_count(const ModelConfig& m);
// Parameters of one transformer block.
std::int64_t layer_parameter_count(const ModelConfig& m);

}  // namespace vrambench

// DeepSpeed's ZeRO estimators and their accounting over a rank's program (deepspeed.h).
#include "estimate/deepspeed.h"

#include <algorithm>

#include "model/weights.h"

namespace vrambench {
namespace {

bool estimated(const RunConfig& cfg) {
  return (cfg.strategy == Strategy::zero2 || cfg.strategy == Strategy::zero3) &&
         cfg.finetune == Finetune::full && is_adamw(cfg.optimizer) &&
         (cfg.dtype == Precision::bf16 || cfg.dtype == Precision::fp16);
}

}  // namespace

std::optional<Bytes> deepspeed_estimate(const RunConfig& cfg) {
  if (!estimated(cfg)) return std::nullopt;
  const std::int64_t p = parameter_count(cfg.model);
  const std::int64_t n = cfg.gpus;
  // DeepSpeed's int(18 * P / N): a double's product, truncated.
  const auto share = [&](int bytes) {
    return static_cast<Bytes>(static_cast<double>(bytes) * static_cast<double>(p) /
                              static_cast<double>(n));
  };
  if (cfg.strategy == Strategy::zero2)
    return cfg.offload == Offload::none ? 2 * p + share(18) : 2 * p;
  const Bytes largest = 4 * largest_module_parameters(cfg.model);
  switch (cfg.offload) {
    case Offload::none:
      return largest + share(18);
    case Offload::optimizer:
      return largest + share(2);
    case Offload::params:
      return largest;
  }
  return std::nullopt;
}

std::optional<Bytes> deepspeed_count(const Program& program) {
  const RunConfig& cfg = program.config;
  if (!estimated(cfg)) return std::nullopt;
  Bytes total = 0, largest = 0;
  for (const Tensor& t : program.tensors) {
    if (!t.on_device()) continue;  // offloaded to the host
    const bool gathered = t.component == MemoryComponent::gathered_parameters;
    if (gathered) largest = std::max(largest, t.bytes);
    const bool counted =
        (t.role == Role::weight && t.component != MemoryComponent::communication_buffers) ||
        t.role == Role::master_weight || t.role == Role::optimizer_state ||
        (t.role == Role::grad && cfg.strategy == Strategy::zero2) ||
        t.name.ends_with(".fp32_partition");
    if (counted) total += t.bytes;
  }
  // A gathered module and its gradient, in the same dtype.
  return total + 2 * largest;
}

}  // namespace vrambench

// The estimate as JSON: memory components by their names (the keys of every JSON that lists them),
// and the breakdown with its moments.
#pragma once

#include <nlohmann/json.hpp>

#include "estimate/estimate.h"

namespace vrambench {

NLOHMANN_JSON_SERIALIZE_ENUM(
    MemoryComponent, {
                         {MemoryComponent::weights, "weights"},
                         {MemoryComponent::master_weights, "master_weights"},
                         {MemoryComponent::gradients, "gradients"},
                         {MemoryComponent::optimizer_state, "optimizer_state"},
                         {MemoryComponent::cuda_context, "cuda_context"},
                         {MemoryComponent::gemm_workspace, "gemm_workspace"},
                         {MemoryComponent::quantized_weights, "quantized_weights"},
                         {MemoryComponent::frozen_weights, "frozen_weights"},
                         {MemoryComponent::adapters, "adapters"},
                         {MemoryComponent::adapter_grads, "adapter_grads"},
                         {MemoryComponent::paged_optimizer_state, "paged_optimizer_state"},
                         {MemoryComponent::dequant_transient, "dequant_transient"},
                         {MemoryComponent::optimizer_temporaries, "optimizer_temporaries"},
                         {MemoryComponent::gathered_parameters, "gathered_parameters"},
                         {MemoryComponent::communication_buffers, "communication_buffers"},
                         {MemoryComponent::host_offload, "host_offload"},
                         {MemoryComponent::reference_weights, "reference_weights"},
                         {MemoryComponent::saved_activations, "saved_activations"},
                         {MemoryComponent::norm_statistics, "norm_statistics"},
                         {MemoryComponent::recomputed_activations, "recomputed_activations"},
                         {MemoryComponent::backward_transient, "backward_transient"},
                         {MemoryComponent::tokens_and_targets, "tokens_and_targets"},
                         {MemoryComponent::scope_inputs, "scope_inputs"},
                         {MemoryComponent::logits_and_loss, "logits_and_loss"},
                         {MemoryComponent::embedding_dropout_mask, "embedding_dropout_mask"},
                         {MemoryComponent::attention_masks, "attention_masks"},
                         {MemoryComponent::reference_forward, "reference_forward"},
                         {MemoryComponent::allocator_fragmentation, "allocator_fragmentation"},
                     })

// The component's name: "saved_activations".
inline std::string to_string(MemoryComponent c) {
  return nlohmann::json(c).get<std::string>();
}

NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE(Component, kind, bytes)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE(Moment, name, fixed, per_sample)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE(Breakdown, moment, fixed, per_sample, other_moments, model_state)

}  // namespace vrambench

// What a tensor's bytes are reported under: the one vocabulary of memory components, for the
// program's tensors, the estimate read off them, the tables and the JSON (estimate/breakdown_json.h names
// them). A builder sets each tensor's component where it makes it; most take their role's.
#pragma once

#include <cstdint>

namespace vrambench {

enum class MemoryComponent : std::uint8_t {
  // Fixed.
  weights,
  master_weights,   // fp32 copies of 16-bit weights
  gradients,        // parameter gradients written so far
  optimizer_state,  // Adam m and v, SGD momentum
  cuda_context,     // the device's own: context, module images, library handles (not a tensor)
  gemm_workspace,   // cuBLASLt's scratch and the fused attention's
  // Fine-tuning (docs/memory-model.md, "Fine-tuning").
  quantized_weights,  // the frozen block linears as bitsandbytes stores them, constants included
  frozen_weights,     // the frozen base in the compute dtype: embeddings, norms, lm head, biases
  adapters,           // LoRA's A and B
  adapter_grads,      // their gradients written so far
  paged_optimizer_state,  // m and v in managed memory: reported, outside the device's capacity
  dequant_transient,      // a quantised linear dequantised for one GEMM (+ its rebuilt absmax)
  // Frameworks (docs/memory-model.md, "Frameworks").
  optimizer_temporaries,  // hf: what the optimizer step makes (AdamW foreach's sqrt(exp_avg_sq))
  // Data parallelism (program/shard.h, docs/multi-gpu.md).
  gathered_parameters,    // the parameters of the modules gathered now, and the all-gather buffers
  communication_buffers,  // reduce-scatter buffers, ZeRO's fp32 gradient partition, DDP's buckets
  host_offload,           // what --offload keeps in host memory: reported, never on the device
  // Preference training (docs/preference.md).
  reference_weights,  // the reference model's copy of the weights (--reference copy)
  // Per sample.
  saved_activations,
  norm_statistics,
  recomputed_activations,
  backward_transient,
  tokens_and_targets,
  scope_inputs,  // the activation entering a layer, mlp or attention scope and its gradient
  logits_and_loss,
  embedding_dropout_mask,
  attention_masks,          // hf: eager attention's causal masks, sdpa's sliding-window masks
  reference_forward,        // what the reference and KL forwards make under no_grad
  allocator_fragmentation,  // caching allocator: what it reserves beyond the tensors (a replay)
};

}  // namespace vrambench

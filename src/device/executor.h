// What runs the ops of a program over bound buffers: nothing (sim), the CPU reference kernels (cpu)
// or CUDA kernels (cuda). Executors never decide sizes or allocate tensors; the trial runner binds
// every live tensor to memory from the allocator and hands the executor one pointer per tensor.
#pragma once

#include <cstddef>
#include <string_view>
#include <vector>

#include "program/program.h"

namespace vrambench {

class Executor {
 public:
  virtual ~Executor() = default;
  virtual std::string_view name() const = 0;
  // Gives a freshly allocated persistent tensor its starting contents: weights (seeded random),
  // master weights (the fp32 copy of their weight, which is initialised first), optimizer state
  // (zeros), tokens and targets (seeded, in [0, vocab)). `data` points at tensor.bytes bytes.
  virtual void initialize(const Program& program, int tensor_id, void* data) = 0;
  // Runs program.ops[op_index]. data[id] is the memory of tensor id while it is live, else nullptr.
  virtual void execute(const Program& program, std::size_t op_index,
                       const std::vector<void*>& data) = 0;
  // Waits for queued work (CUDA); no-op elsewhere.
  virtual void synchronize() {}
  // What runs the attention core of `cfg`'s program: "eager" (score GEMMs and a softmax),
  // "kernel" (the fused kernels) or "cudnn-sdpa" (cuDNN's fused attention).
  virtual std::string_view attention_impl(const RunConfig& cfg) const {
    return cfg.attention == Attention::eager ? "eager" : "kernel";
  }
};

}  // namespace vrambench

// The starting contents of a step's persistent tensors, the same on every executor: the cpu
// executor fills them on the host, the cuda executor on the GPU, both from the rule chosen here
// (kernels/common/init.h computes each element from it).
//
//   weights            N(0, 0.02); biases (name ending ".b") 0; norm weights (name containing "ln"
//                      or "norm") 1
//   master weights     the fp32 value of the weight named without ".master", as stored in its dtype
//   optimizer state    0
//   inputs             i32: token ids uniform in [0, vocab); floating (the incoming activation or
//                      gradient of layer/attention/mlp scopes): N(0, 1)
//   anything else      0
// Deterministic in the seed and the tensor name, so a tensor gets the same values in every program
// and every trial.
#pragma once

#include <cstdint>
#include <string>

#include "common/init.h"
#include "program/program.h"

namespace vrambench {

// The rule for persistent tensor `tensor_id` of `program` under `seed`.
kmath::InitRule init_rule(const Program& program, int tensor_id, std::uint64_t seed);

// The starting value of element i of a weight tensor named `name` under `seed` (before rounding to
// its dtype); tests compare it with what an executor stores.
float initial_weight_value(std::uint64_t seed, const std::string& name, std::int64_t i);

}  // namespace vrambench

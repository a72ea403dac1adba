// The cpu device's Executor: runs each op of a Program with the reference kernels, reading every
// tensor through its dtype into fp32 and storing results rounded back to it.
//
// Initial contents follow device/init_rule.h (deterministic in the seed and the tensor name).
// An InputFiller, when given, is asked first for every tensor of role input and may fill it
// (returns true) — tests use it to give a task's tokens and targets.
//
// Op::accumulate adds into the op's `grad` outputs, except for embedding_bwd's dwpe: only the
// token table is tied, so the position table's gradient (which no op wrote before) is overwritten.
//
// Host memory: each op works on fp32 copies of its operands (and some kernels on fp64
// accumulators), outside the capped segment source. The process therefore holds more than the
// source hands out; what a cpu trial measures is the source's (and allocator's) accounting.
//
// Optimizer steps count per weight name inside the executor: the n-th step of a weight uses bias
// correction for step n (1 for a single measured step).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "device/executor.h"

namespace vrambench {

// Fills `data` (tensor.bytes bytes) for an input tensor; returns false to leave it to the default.
using InputFiller = std::function<bool(const Program&, const Tensor&, void* data)>;

std::unique_ptr<Executor> make_cpu_executor(std::uint64_t seed);
std::unique_ptr<Executor> make_cpu_executor(std::uint64_t seed, InputFiller fill_inputs);

}  // namespace vrambench

// DeepSpeed's own figure for ZeRO, beside vrambench's: its estimators of the model states per GPU
// (deepspeed.runtime.zero.stage_1_and_2.estimate_zero2_model_states_mem_needs and
// stage3.estimate_zero3_model_states_mem_needs), and the same accounting applied to a rank's step
// program, so that each term of theirs is checked against the program's tensors
// (tests/data/deepspeed_reference.json, docs/multi-gpu.md).
#pragma once

#include <optional>

#include "config/run_config.h"
#include "core/units.h"
#include "program/program.h"

namespace vrambench {

// DeepSpeed's estimate of the GPU bytes of ZeRO's model states for cfg (zero2 and zero3; nullopt
// for the other strategies, which it has no estimator of), with P = parameter_count and L =
// largest_module_parameters (model/weights.h), all GPUs on one node:
//   zero2:  2 P + 18 P / N;  optimizer offload: 2 P
//   zero3:  4 L + 18 P / N;  optimizer offload: 4 L + 2 P / N;  parameter offload: 4 L
// Full training of a 16-bit model only: the estimators count mixed-precision AdamW.
std::optional<Bytes> deepspeed_estimate(const RunConfig& cfg);

// The same terms read off a rank's program (shard.h) at the optimizer step: the 16-bit parameters
// it holds (whole under zero2, its rows under zero3), the fp32 master rows, the Adam moments and
// the fp32 gradient partition on the device, zero2's 16-bit gradient rows, and under zero3 the
// largest module gathered with its gradient. What DeepSpeed holds beyond its estimate (ZeRO-3's
// 16-bit gradient partition, the reduce bucket, the activations) is in the program's peak, not
// here. nullopt where deepspeed_estimate has none.
std::optional<Bytes> deepspeed_count(const Program& program);

}  // namespace vrambench

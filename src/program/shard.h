// One rank's step program under data parallelism (RunConfig::gpus, strategy, offload), made from
// the single-device program a builder wrote: the same ops over this rank's share of the model
// state, with the collectives and the buffers the engine adds (docs/multi-gpu.md).
//
//   ddp    every rank holds the whole model; DDP's gradient buckets, a copy of the gradients
//          (gradient_as_bucket_view=False, its default), are allocated with the model.
//   zero1  DeepSpeed ZeRO-1: the fp32 master weights and the Adam moments are partitioned (each
//          parameter's rows split over the ranks); the step reads this rank's fp32 partition of
//          the gradients and writes its rows of the 16-bit parameters, which are all-gathered.
//   zero2  and the gradients: each is reduce-scattered as soon as the backward has written it,
//          its full copy freed.
//   zero3  and the parameters: each module's are all-gathered before it runs (one of at most 5e7
//          elements with the module before it: the prefetch), in the forward and again in the
//          backward, and freed after; parameters of at most 1e5 elements stay whole on every rank
//          (stage3_param_persistence_threshold).
//   fsdp   PyTorch FSDP2 (fully_shard on each decoder layer and on the root): each parameter's
//          rows sharded; a layer's parameters all-gathered through one flat buffer before its
//          forward and freed after it, gathered again in the backward one layer ahead (backward
//          prefetch), and its gradients reduce-scattered through one flat buffer after its
//          backward; the root's (embeddings, final norm, head) stay gathered from the forward to
//          the end of the backward.
//   hsdp   fsdp over the ranks of one node (shard_ranks), replicated across nodes.
//
// The collectives are ops of their own (all_gather, reduce_scatter): a rank's program runs on one
// device as a rehearsal of the sharded run, each collective a copy of this rank's rows. What
// --offload keeps on the host becomes Role::paged_optimizer_state (managed memory on a device
// that runs it, outside its capacity) of component host_offload, reported apart.
#pragma once

#include "core/units.h"
#include "program/program.h"

namespace vrambench {

// Rewrites `program` (built for program.config, a whole-model step with its loss) into one rank's.
// Does nothing unless is_distributed(program.config). Throws InternalError on a program it cannot
// read (no loss backward, a parameter without its gradient's producer).
void shard_for_rank(Program& program);

// The rows of a tensor of `rows` rows that one of `ranks` ranks holds: ceil(rows / ranks), as
// FSDP2 pads every shard to the first rank's (and ZeRO-3 each parameter's partition).
constexpr std::int64_t shard_rows(std::int64_t rows, std::int64_t ranks) {
  return (rows + ranks - 1) / ranks;
}

// DeepSpeed's ZeRO-3 persistence threshold: parameters of at most this many elements stay whole on
// every rank (stage3_param_persistence_threshold, 1e5 by default).
inline constexpr std::int64_t kZero3PersistenceThreshold = 100000;
// DeepSpeed's ZeRO-3 prefetch (stage3_prefetch_bucket_size, 5e7 elements): a parameter of at
// most this many elements is gathered ahead, with the one used before it.
inline constexpr std::int64_t kZero3PrefetchBucket = 50000000;
// DeepSpeed's reduce bucket (reduce_bucket_size, 5e8 elements).
inline constexpr std::int64_t kZeroReduceBucket = 500000000;
// DeepSpeed's ZeRO-3 sub-group (sub_group_size, 1e9 elements): the step makes the fp32 gradient
// of one sub-group of the partition at a time.
inline constexpr std::int64_t kZero3SubGroup = 1000000000;

}  // namespace vrambench

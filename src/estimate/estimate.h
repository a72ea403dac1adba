// vrambench's memory model, read off the step program: every tensor's bytes are a line in the
// batch, so at each op the live bytes are fixed + B * per_sample, each a sum of the tensors'
// components; the peak is the largest over the ops that can be the peak, plus the allocator's
// share, replayed. docs/memory-model.md derives every term.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "alloc/sim_run.h"
#include "config/run_config.h"
#include "core/units.h"
#include "program/memory_component.h"
#include "program/scaled_program.h"
#include "program/schedule.h"

namespace vrambench {

// What the device adds beyond the program's own tensors.
struct DeviceOverhead {
  Bytes context = 0;         // CUDA context, module images, library handles
  Bytes gemm_workspace = 0;  // GEMM workspace (a tensor of the program: cuBLASLt's scratch and
                             // the partial sums of the norm and embedding backward)
  // The device's capacity: where the caching allocator's share is taken (at the largest batch
  // that fits, and the one after it). 0: at the configuration's batch, replayed without a limit.
  Bytes capacity = 0;
  // With a capacity: the share is taken at the configuration's batch and the one after it, each
  // replayed on the capacity (its cache freed and retried there, as a trial's is), so that
  // peak(cfg.batch) is what a trial at that batch reserves. For the peak of a given batch
  // (`estimate --batch B`, the longest sequence at a batch); max_batch() is then read off that
  // batch's line.
  bool share_at_batch = false;
  // false: the tensors alone, no allocator's share (allocated bytes, as
  // torch.cuda.max_memory_allocated counts them, plus the context).
  bool allocator_share = true;
  // The training steps the estimate describes (a trial's, DeviceInfo::trial_steps): the live
  // bytes of the last, and the allocator's share replayed over all of them, one after the other
  // without emptying the cache.
  int steps = kTrialSteps;
};

struct Component {
  MemoryComponent kind{};
  Bytes bytes = 0;  // for per-sample components: bytes for one sample (B = 1)
  bool operator==(const Component&) const = default;
};

// One point of the step, by its totals: the bytes live there are fixed + batch * per_sample.
struct Moment {
  std::string name;  // "cross-entropy backward", "block 0 backward: mlp.fc linear backward"
  Bytes fixed = 0;
  Bytes per_sample = 0;
  Bytes peak(std::int64_t batch) const;  // fixed + batch * per_sample (checked)
  bool operator==(const Moment&) const = default;
};

struct Breakdown {
  std::string moment;                 // the point of the step where the components below coexist:
                                      // the one with the most bytes per sample
  std::vector<Component> fixed;       // independent of batch
  std::vector<Component> per_sample;  // linear in batch
  // Points that hold more fixed bytes (gradients accumulate in backward while saved activations
  // are freed), so they can be the peak at small batches; and the end of the step ("optimizer
  // step" or "end of step": the whole model state), listed even when it is never the peak.
  std::vector<Moment> other_moments;
  // Weights, master weights, gradients and optimizer state: what no batch size changes, as live at
  // the end of the step.
  Bytes model_state = 0;
  // Fixed bytes on the device: paged optimizer state is left out (managed memory), as it is of
  // peak() and max_batch().
  Bytes fixed_total() const;
  Bytes per_sample_total() const;
  // max(fixed + batch * per_sample, the same for each of other_moments) (checked). Without other
  // moments this is fixed + batch * per_sample.
  Bytes peak(std::int64_t batch) const;
  // The largest batch whose peak fits: min over the moments of floor((capacity - fixed) /
  // (per_sample + extra_per_sample)), 0 when a fixed part alone does not fit.
  std::int64_t max_batch(Bytes capacity, Bytes extra_per_sample = 0) const;
  // A component's bytes at `batch` (fixed + batch * per_sample), 0 when absent.
  Bytes component(MemoryComponent kind, std::int64_t batch = 1) const;
  bool operator==(const Breakdown&) const = default;
};

// The breakdown of the step program of `step`'s configuration, whose sizes it reads at batch 2 (the
// structure of every batch from 2; a batch of another structure, hf gpt2's eager attention at 1,
// is replayed on its own for the allocator's share). `overhead.gemm_workspace` is the one `step`
// was made with. `runs`, when given, holds the replays of the run (alloc/sim_run.h) on the
// capacity the share is taken at, those made before and those the share makes, for whoever reads
// them next (a sim search's trials). Throws what build_program throws at the batches it asks for.
Breakdown analyze(BatchScaledProgram& step, const DeviceOverhead& overhead,
                  SimRuns* runs = nullptr);
// The same for `cfg` (validated), its program built here.
Breakdown analyze(const RunConfig& cfg, const DeviceOverhead& overhead);

// The tensors' own peak at `batch`, without the allocator's share or the context: allocated bytes,
// as torch.cuda.max_memory_allocated counts them and a sim trial's tensor_peak is (paged optimizer
// state, in managed memory, left out), read off `step`'s program at that batch.
Bytes allocated_peak(BatchScaledProgram& step, std::int64_t batch);

}  // namespace vrambench

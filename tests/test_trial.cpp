// run_step over a hand-built program with a counting allocator and a recording executor: peaks,
// the OOM report, memory returned, what the executor sees, and repeated steps.
#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <set>
#include <stdexcept>
#include <vector>

#include "core/error.h"
#include "device/sources.h"
#include "search/search.h"
#include "measure/trial.h"

namespace vrambench {
namespace {

// Serves requests up to `capacity` bytes of rounded blocks. Addresses are never reused, so a
// stale pointer would show as a different address, and every free must name a live block.
class CountingAllocator : public Allocator {
 public:
  CountingAllocator(Bytes capacity, Bytes granule) : capacity_(capacity), granule_(granule) {}

  std::optional<Block> allocate(Bytes bytes) override {
    const Bytes size = round_up(bytes, granule_);
    if (stats_.reserved + size > capacity_) return std::nullopt;
    const Block block{next_address_, size};
    next_address_ += static_cast<std::uintptr_t>(size) + 4096;
    live_.emplace(block.address, bytes);
    ++allocations;
    stats_.allocated += bytes;
    stats_.reserved += size;
    stats_.allocated_peak = std::max(stats_.allocated_peak, stats_.allocated);
    stats_.reserved_peak = std::max(stats_.reserved_peak, stats_.reserved);
    return block;
  }
  void free(const Block& block) override {
    auto it = live_.find(block.address);
    if (it == live_.end()) {
      ADD_FAILURE() << "free of a block that is not live: " << block.address;
      return;
    }
    stats_.allocated -= it->second;
    stats_.reserved -= block.size;
    live_.erase(it);
  }
  void release_cached() override { ++release_calls; }
  const AllocStats& stats() const override { return stats_; }
  void reset_peaks() override {
    ++reset_calls;
    stats_.allocated_peak = stats_.allocated;
    stats_.reserved_peak = stats_.reserved;
  }
  Bytes free_bytes() const override { return capacity_ - stats_.reserved; }

  std::size_t live_blocks() const { return live_.size(); }
  int allocations = 0;
  int release_calls = 0;
  int reset_calls = 0;

 private:
  Bytes capacity_;
  Bytes granule_;
  std::uintptr_t next_address_ = 0x10000;
  std::map<std::uintptr_t, Bytes> live_;  // address -> requested bytes
  AllocStats stats_;
};

// Records what it was asked to do and which tensors had memory at each call.
class RecordingExecutor : public Executor {
 public:
  std::string_view name() const override { return "recording"; }
  void initialize(const Program&, int tensor_id, void* data) override {
    initialized.push_back(tensor_id);
    EXPECT_NE(data, nullptr) << "tensor " << tensor_id;
  }
  void execute(const Program&, std::size_t op_index, const std::vector<void*>& data) override {
    executed.push_back(op_index);
    std::set<int> bound;
    for (std::size_t id = 0; id < data.size(); ++id)
      if (data[id] != nullptr) bound.insert(static_cast<int>(id));
    bound_per_call.push_back(bound);
  }
  void synchronize() override { ++synchronize_calls; }

  std::vector<int> initialized;
  std::vector<std::size_t> executed;
  std::vector<std::set<int>> bound_per_call;
  int synchronize_calls = 0;
};

// Tensor ids of the program below. u8 tensors so that bytes equal the element count.
enum Id { tokens, w, w_master, w_m, ws, x, h, y, dy, w_grad };

// A forward/backward/optimizer step small enough to work by hand:
//   op0 embed   (tokens, w -> x)           x: activation 30
//   op1 fc      (x, w, ws -> h)            ws: workspace 50 (until op4), h: transient 40 (until
//   op2) op2 act     (h -> y)                   y: transient 60 (until op3) op3 act.bwd (y, x ->
//   dy)               dy: transient 60 (until op4) op4 fc.bwd  (dy, x, w, ws -> w.grad)   w.grad:
//   grad 100 (until the end of the step) op5 adamw   (w, w.grad, w.m, w.master)
// Persistent: tokens 10 + w 100 + w.master 200 + w.m 200 = 510.
// Live tensor bytes while each op runs: 540, 630, 690, 710, 750, 610. Peak 750 at op4.
// Every size is multiplied by `unit`; x, h, y and dy also by `batch`, as activations are.
Program tiny_program(std::int64_t unit = 1, std::int64_t batch = 1) {
  Program p;
  const std::int64_t per_sample = unit * batch;
  p.add_tensor("tokens", {10 * unit}, DType::u8, Role::input);
  p.add_tensor("w", {100 * unit}, DType::u8, Role::weight);
  p.add_tensor("w.master", {200 * unit}, DType::u8, Role::master_weight);
  p.add_tensor("w.m", {200 * unit}, DType::u8, Role::optimizer_state);
  p.add_tensor("ws", {50 * unit}, DType::u8, Role::workspace);
  p.add_tensor("x", {30 * per_sample}, DType::u8, Role::activation);
  p.add_tensor("h", {40 * per_sample}, DType::u8, Role::transient);
  p.add_tensor("y", {60 * per_sample}, DType::u8, Role::transient);
  p.add_tensor("dy", {60 * per_sample}, DType::u8, Role::transient);
  p.add_tensor("w.grad", {100 * unit}, DType::u8, Role::grad);
  p.add_op(OpKind::embedding_fwd, "embed", {tokens, w}, {x});
  p.add_op(OpKind::linear_fwd, "fc", {x, w, ws}, {h});
  p.add_op(OpKind::gelu_fwd, "act", {h}, {y});
  p.add_op(OpKind::gelu_bwd, "act.bwd", {y, x}, {dy});
  // Three inputs and one output; the trial runner never looks at the kind.
  p.add_op(OpKind::cross_entropy_bwd, "fc.bwd", {dy, x, w, ws}, {w_grad});
  p.add_op(OpKind::adamw_step, "adamw", {w, w_grad, w_m, w_master}, {});  // w.master as v
  return p;
}

Bytes role_bytes(const TrialResult& r, Role role) {
  return r.peak_by_role[role];
}

TEST(Trial, FitReportsHandComputedPeaks) {
  const Program program = tiny_program();
  const Liveness liveness = compute_liveness(program);
  CountingAllocator allocator(1 << 20, 1);
  const TrialResult r = run_step(program, liveness, allocator, nullptr, 1000);
  EXPECT_TRUE(r.fit);
  EXPECT_FALSE(r.oom);
  EXPECT_EQ(r.tensor_peak, 750);
  EXPECT_EQ(r.peak_op, 4);
  EXPECT_EQ(r.reserved_peak, 750);  // granule 1: blocks are exactly the tensors
  EXPECT_EQ(r.device_peak, 1750);
  EXPECT_EQ(role_bytes(r, Role::input), 10);
  EXPECT_EQ(role_bytes(r, Role::weight), 100);
  EXPECT_EQ(role_bytes(r, Role::master_weight), 200);
  EXPECT_EQ(role_bytes(r, Role::optimizer_state), 200);
  EXPECT_EQ(role_bytes(r, Role::workspace), 50);
  EXPECT_EQ(role_bytes(r, Role::activation), 30);
  EXPECT_EQ(role_bytes(r, Role::transient), 60);
  EXPECT_EQ(role_bytes(r, Role::grad), 100);
}

TEST(Trial, TensorPeakAgreesWithTheLiveProfile) {
  const Program program = tiny_program();
  const Liveness liveness = compute_liveness(program);
  CountingAllocator allocator(1 << 20, 1);
  const TrialResult r = run_step(program, liveness, allocator, nullptr, 0);
  const LiveProfile profile = live_profile(program, liveness);
  EXPECT_EQ(r.tensor_peak, profile.peak);
  EXPECT_EQ(r.peak_op, profile.peak_op);
  Bytes sum = 0;
  for (Bytes b : r.peak_by_role.bytes) sum += b;
  EXPECT_EQ(sum, r.tensor_peak);
}

TEST(Trial, ReservedPeakFollowsTheAllocatorsRounding) {
  // Granule 64: persistent 64 + 128 + 256 + 256 = 704; at op4 x, ws, dy 64 each and w.grad 128
  // make 1024, more than op2 or op3 (704 + 4 * 64 = 960).
  const Program program = tiny_program();
  CountingAllocator allocator(1 << 20, 64);
  const TrialResult r = run_step(program, compute_liveness(program), allocator, nullptr, 1000);
  EXPECT_EQ(r.tensor_peak, 750);
  EXPECT_EQ(r.reserved_peak, 1024);
  EXPECT_EQ(r.device_peak, 2024);
}

TEST(Trial, PeaksFromAnEarlierTrialDoNotLeakIn) {
  const Program program = tiny_program();
  CountingAllocator allocator(1 << 20, 1);
  allocator.free(*allocator.allocate(100'000));  // an earlier, larger trial
  const TrialResult r = run_step(program, compute_liveness(program), allocator, nullptr, 0);
  EXPECT_EQ(allocator.reset_calls, 1);
  EXPECT_EQ(r.reserved_peak, 750);
}

TEST(Trial, OomInAnOpNamesTheOpTensorAndBytes) {
  // 700 bytes: op3 needs 650 + 60.
  const Program program = tiny_program();
  CountingAllocator allocator(700, 1);
  RecordingExecutor executor;
  const TrialResult r = run_step(program, compute_liveness(program), allocator, &executor, 0);
  EXPECT_FALSE(r.fit);
  ASSERT_TRUE(r.oom);
  EXPECT_EQ(r.oom->op, "act.bwd");
  EXPECT_EQ(r.oom->tensor, "dy");
  EXPECT_EQ(r.oom->requested, 60);
  EXPECT_EQ(r.oom->free, 50);
  // The peaks cover what ran: 690 while op2 ran.
  EXPECT_EQ(r.tensor_peak, 690);
  EXPECT_EQ(r.peak_op, 2);
  EXPECT_EQ(r.reserved_peak, 690);
  // op3 never ran.
  EXPECT_EQ(executor.executed, (std::vector<std::size_t>{0, 1, 2}));
  EXPECT_EQ(allocator.live_blocks(), 0u);
  EXPECT_EQ(allocator.stats().allocated, 0);
  EXPECT_EQ(allocator.release_calls, 1);
}

TEST(Trial, OomBeforeTheFirstOpNamesThePersistentTensor) {
  // tokens 10 + w 100 + w.master 200 leave 90 of 400 for w.m (200).
  const Program program = tiny_program();
  CountingAllocator allocator(400, 1);
  RecordingExecutor executor;
  const TrialResult r = run_step(program, compute_liveness(program), allocator, &executor, 0);
  EXPECT_FALSE(r.fit);
  ASSERT_TRUE(r.oom);
  EXPECT_EQ(r.oom->op, "");
  EXPECT_EQ(r.oom->tensor, "w.m");
  EXPECT_EQ(r.oom->requested, 200);
  EXPECT_EQ(r.oom->free, 90);
  EXPECT_EQ(r.tensor_peak, 310);
  EXPECT_EQ(r.peak_op, -1);
  // Nothing is initialised until every persistent tensor has memory.
  EXPECT_TRUE(executor.initialized.empty());
  EXPECT_TRUE(executor.executed.empty());
  EXPECT_EQ(allocator.live_blocks(), 0u);
  EXPECT_EQ(allocator.release_calls, 1);
}

TEST(Trial, OomMessageReadsForPeople) {
  EXPECT_EQ(to_string(OomInfo{"fc.bwd", "w.grad", 3 * MiB / 2, 512 * KiB}),
            "OOM in op 'fc.bwd' allocating 'w.grad': " + format_bytes(3 * MiB / 2) +
                " requested, " + format_bytes(512 * KiB) + " free");
  EXPECT_EQ(to_string(OomInfo{"", "wte", 2 * GiB, 0}),
            "OOM before the first op allocating 'wte': " + format_bytes(2 * GiB) + " requested, " +
                format_bytes(0) + " free");
}

TEST(Trial, AllMemoryIsReturnedAfterAFit) {
  const Program program = tiny_program();
  CountingAllocator allocator(1 << 20, 64);
  RecordingExecutor executor;
  const TrialResult r = run_step(program, compute_liveness(program), allocator, &executor, 0);
  EXPECT_TRUE(r.fit);
  EXPECT_EQ(allocator.live_blocks(), 0u);
  EXPECT_EQ(allocator.stats().allocated, 0);
  EXPECT_EQ(allocator.stats().reserved, 0);
  EXPECT_EQ(allocator.release_calls, 1);
  EXPECT_EQ(allocator.allocations, static_cast<int>(program.tensors.size()));
}

TEST(Trial, ExecutorSeesPointersForExactlyTheLiveTensors) {
  const Program program = tiny_program();
  CountingAllocator allocator(1 << 20, 1);
  RecordingExecutor executor;
  run_step(program, compute_liveness(program), allocator, &executor, 0);
  const std::vector<std::set<int>> expected{
      {tokens, w, w_master, w_m, x},
      {tokens, w, w_master, w_m, x, ws, h},
      {tokens, w, w_master, w_m, ws, x, h, y},
      {tokens, w, w_master, w_m, ws, x, y, dy},
      {tokens, w, w_master, w_m, ws, x, dy, w_grad},
      {tokens, w, w_master, w_m, w_grad},
  };
  EXPECT_EQ(executor.executed, (std::vector<std::size_t>{0, 1, 2, 3, 4, 5}));
  EXPECT_EQ(executor.bound_per_call, expected);
}

TEST(Trial, PersistentTensorsAreInitialisedOnceInIdOrder) {
  // Allocated and initialised in id order even when liveness lists them otherwise, so that a
  // master weight is always initialised after its weight.
  const Program program = tiny_program();
  Liveness liveness = compute_liveness(program);
  std::reverse(liveness.persistent.begin(), liveness.persistent.end());
  CountingAllocator allocator(1 << 20, 1);
  RecordingExecutor executor;
  run_step(program, liveness, allocator, &executor, 0, 2);
  EXPECT_EQ(executor.initialized, (std::vector<int>{tokens, w, w_master, w_m}));
}

TEST(Trial, TwoStepsRunEveryOpTwiceWithTheSamePeaks) {
  const Program program = tiny_program();
  const Liveness liveness = compute_liveness(program);
  CountingAllocator allocator(1 << 20, 64);
  RecordingExecutor executor;
  const TrialResult r = run_step(program, liveness, allocator, &executor, 0, 2);
  EXPECT_TRUE(r.fit);
  EXPECT_EQ(executor.executed, (std::vector<std::size_t>{0, 1, 2, 3, 4, 5, 0, 1, 2, 3, 4, 5}));
  // The gradient of step one is gone before step two allocates it again.
  EXPECT_EQ(executor.bound_per_call[6], executor.bound_per_call[0]);
  EXPECT_EQ(executor.bound_per_call[11], executor.bound_per_call[5]);
  EXPECT_EQ(executor.synchronize_calls, 2);
  EXPECT_EQ(r.tensor_peak, 750);
  EXPECT_EQ(r.peak_op, 4);
  EXPECT_EQ(r.reserved_peak, 1024);
  // Persistent once, the six step tensors twice.
  EXPECT_EQ(allocator.allocations, 4 + 2 * 6);
  EXPECT_EQ(allocator.live_blocks(), 0u);
  EXPECT_EQ(allocator.release_calls, 1);
}

TEST(Trial, TwoStepsNeedNoMoreThanOne) {
  // w.grad lives to the end of a step; freeing it there is what lets step two allocate it again
  // without holding two copies. One step's 750 bytes are enough for two steps, and 749 are not.
  const Program program = tiny_program();
  CountingAllocator allocator(750, 1);
  EXPECT_TRUE(run_step(program, compute_liveness(program), allocator, nullptr, 0, 2).fit);
  CountingAllocator tight(749, 1);
  const TrialResult r = run_step(program, compute_liveness(program), tight, nullptr, 0, 2);
  EXPECT_FALSE(r.fit);
  ASSERT_TRUE(r.oom);
  EXPECT_EQ(r.oom->op, "fc.bwd");
  EXPECT_EQ(r.oom->tensor, "w.grad");
  EXPECT_EQ(tight.live_blocks(), 0u);
}

// A lazy persistent tensor (the optimizer state a run makes at its first step): the first step
// makes and fills it before the op that first uses it, the second finds it there. One step peaks
// at the optimizer (610: the state only from op5 on), two at op4 of the second step (750).
TEST(Trial, LazyTensorsAreMadeAtTheirFirstUseAndKept) {
  Program program = tiny_program();
  program.tensors[w_m].lazy = true;
  const Liveness liveness = compute_liveness(program);
  CountingAllocator one_allocator(1 << 20, 1);
  RecordingExecutor one;
  const TrialResult r1 = run_step(program, liveness, one_allocator, &one, 0, 1);
  EXPECT_EQ(r1.tensor_peak, 610);
  EXPECT_EQ(r1.peak_op, 5);
  EXPECT_EQ(one.initialized, (std::vector<int>{tokens, w, w_master, w_m}));
  EXPECT_EQ(one.bound_per_call[0].count(w_m), 0u);
  EXPECT_EQ(one.bound_per_call[5].count(w_m), 1u);

  CountingAllocator two_allocator(1 << 20, 1);
  RecordingExecutor two;
  const TrialResult r2 = run_step(program, liveness, two_allocator, &two, 0, 2);
  EXPECT_EQ(r2.tensor_peak, 750);
  EXPECT_EQ(r2.peak_op, 4);
  EXPECT_EQ(two.initialized, (std::vector<int>{tokens, w, w_master, w_m}));  // once
  EXPECT_EQ(two.bound_per_call[6].count(w_m), 1u) << "kept from the first step";
  EXPECT_EQ(two_allocator.allocations, 3 + 1 + 2 * 6);
  EXPECT_EQ(two_allocator.live_blocks(), 0u);
  // 749 bytes hold the first step and not the second, which fails where the first did not.
  CountingAllocator tight(749, 1);
  EXPECT_TRUE(run_step(program, liveness, tight, nullptr, 0, 1).fit);
  const TrialResult failed = run_step(program, liveness, tight, nullptr, 0, 2);
  EXPECT_FALSE(failed.fit);
  ASSERT_TRUE(failed.oom);
  EXPECT_EQ(failed.oom->op, "fc.bwd");
  EXPECT_EQ(tight.live_blocks(), 0u);
}

// Throws from one op, as a device error would.
class FailingExecutor : public RecordingExecutor {
 public:
  void execute(const Program& program, std::size_t op_index,
               const std::vector<void*>& data) override {
    RecordingExecutor::execute(program, op_index, data);
    if (op_index == 2) throw InternalError("kernel failed");
  }
};

TEST(Trial, ExecutorErrorPropagatesAfterReturningTheMemory) {
  const Program program = tiny_program();
  CountingAllocator allocator(1 << 20, 1);
  FailingExecutor executor;
  EXPECT_THROW(run_step(program, compute_liveness(program), allocator, &executor, 0),
               InternalError);
  EXPECT_EQ(allocator.live_blocks(), 0u);
  EXPECT_EQ(allocator.release_calls, 1);
}

// A device whose every free fails once the executor has failed, as every CUDA call does after a
// sticky error: the error that ends the trial must be the executor's, not a free's.
class PoisonedSource : public SegmentSource {
 public:
  explicit PoisonedSource(Bytes capacity) : inner_(make_virtual_source(capacity)) {}
  std::optional<std::uintptr_t> allocate_segment(Bytes bytes) override {
    return inner_->allocate_segment(bytes);
  }
  void free_segment(std::uintptr_t address, Bytes bytes) override {
    ++free_calls;
    if (poisoned) throw std::runtime_error("cudaErrorIllegalAddress from cudaFree");
    inner_->free_segment(address, bytes);
  }
  Bytes capacity() const override { return inner_->capacity(); }
  Bytes in_use() const override { return inner_->in_use(); }
  bool poisoned = false;
  int free_calls = 0;

 private:
  std::unique_ptr<SegmentSource> inner_;
};

class PoisoningExecutor : public RecordingExecutor {
 public:
  explicit PoisoningExecutor(PoisonedSource& source) : source_(source) {}
  void execute(const Program& program, std::size_t op_index,
               const std::vector<void*>& data) override {
    RecordingExecutor::execute(program, op_index, data);
    if (op_index == 2) {
      source_.poisoned = true;
      throw InternalError("illegal address in op 2");
    }
  }

 private:
  PoisonedSource& source_;
};

TEST(Trial, AFailingFreeDuringCleanupDoesNotHideTheErrorThatCausedIt) {
  const Program program = tiny_program(MiB);
  for (AllocatorKind kind : {AllocatorKind::caching, AllocatorKind::direct}) {
    PoisonedSource source(4 * GiB);
    PoisoningExecutor executor(source);
    {
      const auto allocator = make_allocator(kind, source);
      try {
        run_step(program, compute_liveness(program), *allocator, &executor, 0);
        ADD_FAILURE() << "the executor's error was swallowed";
      } catch (const InternalError& e) {
        EXPECT_STREQ(e.what(), "illegal address in op 2");
      } catch (const std::exception& e) {
        ADD_FAILURE() << "a cleanup error replaced the executor's: " << e.what();
      }
    }  // the allocator's destructor returns what is left, quietly, without terminating
    EXPECT_GT(source.free_calls, 0) << "cleanup never tried to return the memory";
  }
}

// A library running out of its own scratch inside op 3, as cuBLASLt or cuDNN can on a GPU.
class ScratchOomExecutor : public RecordingExecutor {
 public:
  void execute(const Program& program, std::size_t op_index,
               const std::vector<void*>& data) override {
    RecordingExecutor::execute(program, op_index, data);
    if (op_index == 3) throw DeviceOutOfMemory("cuBLASLt workspace");
  }
};

// The device running out while the weights are being filled, before any op.
class InitOomExecutor : public RecordingExecutor {
 public:
  void initialize(const Program&, int, void*) override {
    throw DeviceOutOfMemory("no memory for the fill kernel");
  }
};

TEST(Trial, OutOfMemoryWhileFillingTheWeightsIsAnOomResult) {
  const Program program = tiny_program();
  CountingAllocator allocator(1 << 20, 1);
  InitOomExecutor executor;
  const TrialResult r = run_step(program, compute_liveness(program), allocator, &executor, 0);
  EXPECT_FALSE(r.fit);
  ASSERT_TRUE(r.oom.has_value());
  EXPECT_EQ(r.oom->op, "");
  EXPECT_EQ(r.oom->tensor, "(initial values)");
  EXPECT_TRUE(executor.executed.empty());
  EXPECT_EQ(allocator.live_blocks(), 0u);
}

TEST(Trial, LibraryOutOfMemoryIsAnOomResultNamingTheOp) {
  const Program program = tiny_program();
  CountingAllocator allocator(1 << 20, 1);
  ScratchOomExecutor executor;
  const TrialResult r = run_step(program, compute_liveness(program), allocator, &executor, 0);
  EXPECT_FALSE(r.fit);
  ASSERT_TRUE(r.oom.has_value());
  EXPECT_EQ(r.oom->op, "act.bwd");
  EXPECT_EQ(r.oom->tensor, "(library scratch)");
  EXPECT_EQ(allocator.live_blocks(), 0u);
}

// A driver that reports what the allocator holds plus library memory the allocator never sees:
// 100 bytes more while op 2 (act) runs.
class DriverView : public SegmentSource {
 public:
  explicit DriverView(const CountingAllocator& allocator) : allocator_(allocator) {}
  std::optional<std::uintptr_t> allocate_segment(Bytes) override { return std::nullopt; }
  void free_segment(std::uintptr_t, Bytes) override {}
  Bytes capacity() const override { return 1 << 20; }
  Bytes in_use() const override { return allocator_.stats().reserved; }
  std::optional<Bytes> device_used() const override {
    ++samples;
    return allocator_.stats().reserved + 5000 + (samples == 4 ? 100 : 0);
  }
  mutable int samples = 0;

 private:
  const CountingAllocator& allocator_;
};

TEST(Trial, DriverSamplesRaiseTheDevicePeakAboveTheAllocatorsView) {
  const Program program = tiny_program();
  CountingAllocator allocator(1 << 20, 1);
  DriverView driver(allocator);
  RecordingExecutor executor;
  const TrialResult r =
      run_step(program, compute_liveness(program), allocator, &executor, 0, 1, &driver);
  ASSERT_TRUE(r.fit);
  // One sample after the persistent tensors, then one before each of the 6 ops.
  EXPECT_EQ(driver.samples, 7);
  // Sample 4 is taken before op 2 (act), with 690 bytes live (see tiny_program): 690 + 5100.
  EXPECT_EQ(r.driver_peak, 690 + 5100);
  EXPECT_EQ(r.device_peak, 690 + 5100);
  EXPECT_EQ(r.reserved_peak, 750);

  // Without a driver the device peak is the allocator's view plus the fixed overhead.
  CountingAllocator plain(1 << 20, 1);
  const TrialResult p = run_step(program, compute_liveness(program), plain, nullptr, 64);
  EXPECT_EQ(p.driver_peak, 0);
  EXPECT_EQ(p.device_peak, 750 + 64);
}

TEST(Trial, RejectsBadArguments) {
  const Program program = tiny_program();
  CountingAllocator allocator(1 << 20, 1);
  EXPECT_THROW(run_step(program, compute_liveness(program), allocator, nullptr, 0, 0),
               InternalError);
  Program other = tiny_program();
  other.add_tensor("extra", {1}, DType::u8, Role::transient);
  EXPECT_THROW(run_step(other, compute_liveness(program), allocator, nullptr, 0), InternalError);
}

// The same program in MiB through the real caching allocator on a virtual source. Every size is an
// even number of MiB and at least 10 MiB, so each new segment is exactly its request, and a cached
// block is handed out whole (a remainder of 1 MiB or less is not split; none here is larger).
TEST(TrialCaching, CachedBlocksRaiseReservedAboveTensorBytes) {
  // h (40) is cached when dy (60) needs a new segment, h and y (60) are cached when w.grad (100)
  // does: reserved peaks at 510 + 30 + 50 + 40 + 60 + 60 + 100 = 850 MiB at op4.
  const Program program = tiny_program(MiB);
  const auto source = make_virtual_source(4 * GiB);
  const auto allocator = make_caching_allocator(*source);
  RecordingExecutor executor;
  const TrialResult r =
      run_step(program, compute_liveness(program), *allocator, &executor, 500 * MiB);
  EXPECT_TRUE(r.fit);
  EXPECT_EQ(r.tensor_peak, 750 * MiB);
  EXPECT_EQ(r.peak_op, 4);
  EXPECT_EQ(r.reserved_peak, 850 * MiB);
  EXPECT_EQ(r.device_peak, 1350 * MiB);
  EXPECT_EQ(source->in_use(), 0);
  // Virtual addresses are never null, so the executor sees exactly the live tensors here too.
  ASSERT_EQ(executor.bound_per_call.size(), 6u);
  EXPECT_EQ(executor.bound_per_call[4],
            (std::set<int>{tokens, w, w_master, w_m, ws, x, dy, w_grad}));
}

TEST(TrialCaching, SecondStepReusesTheCacheOfTheFirst) {
  // Step two finds a cached block of every size it asks for: no new segment, same peaks.
  const Program program = tiny_program(MiB);
  const auto source = make_virtual_source(4 * GiB);
  const auto allocator = make_caching_allocator(*source);
  const TrialResult r = run_step(program, compute_liveness(program), *allocator, nullptr, 0, 2);
  EXPECT_TRUE(r.fit);
  EXPECT_EQ(r.reserved_peak, 850 * MiB);
  EXPECT_EQ(allocator->stats().segment_allocs, 10);
  EXPECT_EQ(source->in_use(), 0);
}

TEST(TrialCaching, FreeAndRetryFitsWhereTheCacheWouldNot) {
  // 800 MiB: w.grad's segment would make 850, so the cache (h 40, y 60) is released first and
  // the step fits with 750 reserved.
  const Program program = tiny_program(MiB);
  const auto source = make_virtual_source(800 * MiB);
  const auto allocator = make_caching_allocator(*source);
  const TrialResult r = run_step(program, compute_liveness(program), *allocator, nullptr, 0);
  EXPECT_TRUE(r.fit);
  EXPECT_EQ(r.reserved_peak, 750 * MiB);
  EXPECT_EQ(allocator->stats().retries, 1);
  EXPECT_EQ(source->in_use(), 0);
}

TEST(TrialCaching, OomAfterRetryReportsWhatTheSourceHadLeft) {
  // 749 MiB: after the cache is released 650 MiB stay live, and w.grad needs 100 of the 99 left.
  const Program program = tiny_program(MiB);
  const auto source = make_virtual_source(749 * MiB);
  const auto allocator = make_caching_allocator(*source);
  const TrialResult r = run_step(program, compute_liveness(program), *allocator, nullptr, 0);
  EXPECT_FALSE(r.fit);
  ASSERT_TRUE(r.oom);
  EXPECT_EQ(r.oom->op, "fc.bwd");
  EXPECT_EQ(r.oom->tensor, "w.grad");
  EXPECT_EQ(r.oom->requested, 100 * MiB);
  EXPECT_EQ(r.oom->free, 99 * MiB);
  EXPECT_EQ(source->in_use(), 0);
}

TEST(TrialCaching, SearchOverTrialsFindsTheHandComputedMaxBatch) {
  // Direct allocator, 4 GiB: live MiB are 660 + 90B at op4 and 560 + 150B at op3, so the largest
  // batch with 560 + 150B <= 4096 is 23 (4010 MiB); 24 needs 4160.
  const auto source = make_virtual_source(4 * GiB);
  const auto allocator = make_direct_allocator(*source);
  std::map<std::int64_t, TrialResult> by_batch;
  auto fits = [&](std::int64_t batch) {
    const Program program = tiny_program(MiB, batch);
    by_batch[batch] = run_step(program, compute_liveness(program), *allocator, nullptr, 0);
    return by_batch[batch].fit;
  };
  const SearchResult s = find_max_batch(fits, 20);
  EXPECT_EQ(s.max_batch, 23);
  EXPECT_FALSE(s.non_monotone);
  EXPECT_EQ(by_batch.at(23).tensor_peak, 4010 * MiB);
  EXPECT_EQ(by_batch.at(23).peak_op, 3);
  ASSERT_TRUE(by_batch.at(24).oom);
  EXPECT_EQ(by_batch.at(24).oom->op, "act.bwd");
  EXPECT_EQ(by_batch.at(24).oom->tensor, "dy");
  EXPECT_EQ(source->in_use(), 0);
}

}  // namespace
}  // namespace vrambench

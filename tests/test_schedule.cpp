// The training run's events (program/schedule.h), the one walk of the step every consumer reads:
// their order on a hand-built program, the lazy tensors in the first step only, a step's end, and
// the live profile of the last step.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/error.h"
#include "program/program.h"
#include "program/schedule.h"

namespace vrambench {
namespace {

// w (weight), s (lazy state, first used by the optimizer), x (activation of op0 and op1), g (grad
// of op1, kept to the step's end), t (transient of op1).
struct Tiny {
  Program p;
  int w, s, x, g, t;
  Tiny() {
    w = p.add_tensor("w", {4}, DType::u8, Role::weight);
    s = p.add_tensor("s", {8}, DType::u8, Role::optimizer_state);
    x = p.add_tensor("x", {16}, DType::u8, Role::activation);
    g = p.add_tensor("g", {4}, DType::u8, Role::grad);
    t = p.add_tensor("t", {32}, DType::u8, Role::transient);
    p.tensors[static_cast<std::size_t>(s)].lazy = true;
    p.add_op(OpKind::gelu_fwd, "op0", {w}, {x});
    p.add_op(OpKind::linear_fwd, "op1", {x, w}, {t});  // t's only op
    p.add_op(OpKind::gelu_bwd, "op2", {t, x}, {g});
    p.add_op(OpKind::sgd_step, "op3", {w, g, s}, {});
  }
};

std::string text(const Program& p, const RunEvent& e) {
  switch (e.kind) {
    case RunEvent::Kind::alloc:
      return "alloc " + p.tensor(e.id).name.str();
    case RunEvent::Kind::init:
      return "init " + p.tensor(e.id).name.str();
    case RunEvent::Kind::ready:
      return "ready";
    case RunEvent::Kind::run:
      return "run " + p.ops[static_cast<std::size_t>(e.op)].name.str();
    case RunEvent::Kind::free:
      return "free " + p.tensor(e.id).name.str();
    case RunEvent::Kind::step_end:
      return "end " + std::to_string(e.step);
  }
  return "?";
}

TEST(Schedule, ATrainingRunEventByEvent) {
  Tiny tiny;
  const Schedule schedule(tiny.p, compute_liveness(tiny.p), 2);
  std::vector<std::string> got;
  for (const RunEvent& e : schedule.events()) got.push_back(text(tiny.p, e));
  const std::vector<std::string> step = {"alloc x", "run op0", "alloc t", "run op1",
                                         "alloc g", "run op2", "free x",  "free t"};
  std::vector<std::string> want = {"alloc w", "init w", "ready"};
  want.insert(want.end(), step.begin(), step.end());
  // The lazy state, made and filled where the first step first uses it; kept after.
  want.insert(want.end(), {"alloc s", "init s", "run op3", "end 0", "free g"});
  want.insert(want.end(), step.begin(), step.end());
  want.insert(want.end(), {"run op3", "end 1", "free g"});
  EXPECT_EQ(got, want);
  EXPECT_EQ(schedule.steps(), 2);
  // A step's events: from its first allocation to its last free, without what comes before.
  ASSERT_EQ(schedule.step(1).size(), step.size() + 3);
  EXPECT_EQ(text(tiny.p, schedule.step(1).front()), "alloc x");
  EXPECT_EQ(text(tiny.p, schedule.step(0)[8]), "alloc s");
  EXPECT_THROW(Schedule(tiny.p, compute_liveness(tiny.p), 0), InternalError);
  Program other;
  other.add_tensor("y", {1}, DType::u8, Role::weight);
  EXPECT_THROW(Schedule(tiny.p, compute_liveness(other), 1), InternalError);
}

// The live profile is the last step's: with two steps the lazy state is live throughout (its 8
// bytes in every op's figure), with one it comes at the optimizer.
TEST(Schedule, LiveProfileIsTheLastSteps) {
  Tiny tiny;
  const Liveness live = compute_liveness(tiny.p);
  const LiveProfile two = live_profile(tiny.p, Schedule(tiny.p, live, 2));
  EXPECT_EQ(two.allocated, (std::vector<Bytes>{16, 32, 4, 0}));
  EXPECT_EQ(two.freed, (std::vector<Bytes>{0, 0, 48, 0}));
  EXPECT_EQ(two.live_after, (std::vector<Bytes>{28, 60, 16, 16}));
  EXPECT_EQ(two.peak, 64);  // op2: w, s, x, t, g
  EXPECT_EQ(two.peak_op, 2);
  const LiveProfile one = live_profile(tiny.p, Schedule(tiny.p, live, 1));
  EXPECT_EQ(one.allocated, (std::vector<Bytes>{16, 32, 4, 8}));
  EXPECT_EQ(one.live_after, (std::vector<Bytes>{20, 52, 8, 16}));
  EXPECT_EQ(one.peak, 56);
  EXPECT_EQ(one.peak_op, 2);
}

}  // namespace
}  // namespace vrambench

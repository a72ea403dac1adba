// The progress line of long sweeps: counts, elapsed and remaining time.
#include <gtest/gtest.h>

#include "cli/progress.h"

namespace vrambench {
namespace {

TEST(Progress, DurationsReadAsSecondsMinutesOrHours) {
  EXPECT_EQ(format_duration(0.4), "0 s");
  EXPECT_EQ(format_duration(59.4), "59 s");
  EXPECT_EQ(format_duration(245), "4 min 05 s");
  EXPECT_EQ(format_duration(2 * 3600 + 3 * 60 + 10), "2 h 03 min");
  EXPECT_EQ(format_duration(-3), "0 s");
}

TEST(Progress, LineSaysDoneOfTotalTrialsElapsedAndRemaining) {
  ProgressState state;
  state.total = 120;
  state.done = 0;
  state.trials = 1;
  state.elapsed_seconds = 2;
  state.point = "seq=512 dtype=bf16";
  state.trial = "batch 81 fits";
  // Nothing finished yet: no pace, no remaining time.
  EXPECT_EQ(progress_line(state),
            "0/120 done, 1 trial, 2 s elapsed | seq=512 dtype=bf16: batch 81 fits");
  state.done = 30;  // 10 kept by --resume, 20 measured in 60 s: 3 s each, 90 to go
  state.measured = 20;
  state.trials = 57;
  state.elapsed_seconds = 60;
  state.trial.clear();
  EXPECT_EQ(progress_line(state),
            "30/120 done, 57 trials, 1 min 00 s elapsed, ~4 min 30 s left | seq=512 dtype=bf16");
}

}  // namespace
}  // namespace vrambench

// The progress line of a long sweep on a terminal: configurations done of the total, trials,
// elapsed and remaining time, and the trial that just ran. Written to stderr, rewritten in place;
// nothing at all when stderr is not a terminal or with --quiet.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

namespace vrambench {

struct ProgressState {
  std::int64_t total = 0;     // configurations this run answers for
  std::int64_t done = 0;      // finished, those kept by --resume included
  std::int64_t measured = 0;  // finished by this run: the pace of the remaining time
  std::int64_t trials = 0;    // trials run by this run
  double elapsed_seconds = 0.0;
  std::string point;  // the configuration running: "seq=2048 dtype=bf16"
  std::string trial;  // what its last trial said: "batch 81 fits"
};

// "3/120 done, 57 trials, 12 s elapsed, ~7 min left | seq=2048 dtype=bf16: batch 81 fits"; the
// remaining time is left out until a configuration has finished in this run.
std::string progress_line(const ProgressState& state);

// "12 s", "4 min 05 s", "2 h 03 min".
std::string format_duration(double seconds);

class Progress {
 public:
  Progress(bool enabled, std::int64_t total);
  void starting(const std::string& point);
  void trial(std::int64_t batch, bool fit);
  void finished(bool measured);  // measured: false for a row kept by --resume
  void clear();                  // erases the line, before the table is printed
  bool enabled() const { return enabled_; }

 private:
  bool enabled_;
  ProgressState state_;
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
  void show();
};

}  // namespace vrambench

#include "cli/progress.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

namespace vrambench {

std::string format_duration(double seconds) {
  const auto s = static_cast<std::int64_t>(std::llround(std::max(0.0, seconds)));
  if (s < 60) return fmt::format("{} s", s);
  if (s < 3600) return fmt::format("{} min {:02} s", s / 60, s % 60);
  return fmt::format("{} h {:02} min", s / 3600, (s % 3600) / 60);
}

std::string progress_line(const ProgressState& state) {
  std::string line =
      fmt::format("{}/{} done, {} trial{}, {} elapsed", state.done, state.total, state.trials,
                  state.trials == 1 ? "" : "s", format_duration(state.elapsed_seconds));
  if (state.measured > 0 && state.done < state.total)
    line += fmt::format(
        ", ~{} left", format_duration(state.elapsed_seconds / static_cast<double>(state.measured) *
                                      static_cast<double>(state.total - state.done)));
  if (!state.point.empty()) line += " | " + state.point;
  if (!state.trial.empty()) line += ": " + state.trial;
  return line;
}

Progress::Progress(bool enabled, std::int64_t total) : enabled_(enabled) {
  state_.total = total;
}

void Progress::show() {
  if (!enabled_) return;
  state_.elapsed_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  fmt::print(stderr, "\r\033[K{}", progress_line(state_));
}

void Progress::starting(const std::string& point) {
  state_.point = point;
  state_.trial.clear();
  show();
}

void Progress::trial(std::int64_t batch, bool fit) {
  ++state_.trials;
  state_.trial = fmt::format("batch {} {}", batch, fit ? "fits" : "out of memory");
  show();
}

void Progress::finished(bool measured) {
  ++state_.done;
  if (measured) ++state_.measured;
}

void Progress::clear() {
  if (enabled_) fmt::print(stderr, "\r\033[K");
}

}  // namespace vrambench

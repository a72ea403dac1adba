// measure() in a child process: trials reported as they start and end, the Measurement as JSON.
#include "measure/isolate.h"

#include <fmt/format.h>
#include <unistd.h>

#include <csignal>
#include <cstdlib>
#include <vector>

#include "config/fields.h"
#include "device/child_process.h"
#include "measure/measurement_json.h"

namespace vrambench {

Fault fault_from_environment(const RunConfig& cfg) {
  const char* value = std::getenv("VRAMBENCH_FAULT");
  if (!value) return Fault::none;
  std::string_view v(value);
  if (const std::size_t at = v.find('@'); at != std::string_view::npos) {
    const std::string_view condition = v.substr(at + 1);
    v = v.substr(0, at);
    const std::size_t equals = condition.find('=');
    if (equals == std::string_view::npos) return Fault::none;
    const FieldInfo& field = find_field(condition.substr(0, equals));
    if (field_text(field, get_field(cfg, field)) != condition.substr(equals + 1))
      return Fault::none;
  }
  if (v == "abort") return Fault::abort;
  if (v == "segfault") return Fault::segfault;
  if (v == "exit") return Fault::exit_nonzero;
  if (v == "hang") return Fault::hang;
  return Fault::none;
}

Measurement measure_isolated(const RunConfig& cfg, const Device& device, const SearchLimits& limits,
                             Fault fault, const TrialObserver& observe,
                             double trial_timeout_seconds) {
  // What the parent knows of the child's progress: the trial running and those that finished.
  std::optional<std::int64_t> running;
  std::vector<Probe> finished;
  ChildWatch watch;
  watch.silence_limit_seconds = trial_timeout_seconds;
  watch.on_message = [&](const nlohmann::json& message) {
    if (message.contains("starting")) {
      running = message["starting"].get<std::int64_t>();
      return;
    }
    const std::int64_t batch = message.at("batch").get<std::int64_t>();
    const TrialResult result = message.at("trial").get<TrialResult>();
    running.reset();
    finished.push_back({batch, result.fit});
    if (observe) observe(batch, result);
  };
  ChildFailure why;
  const std::optional<nlohmann::json> answer = run_in_child(
      [&](const ChildSend& send) -> nlohmann::json {
        switch (fault) {
          case Fault::abort:
            std::abort();
          case Fault::segfault:
            std::raise(SIGSEGV);
            break;
          case Fault::exit_nonzero:
            ::_exit(3);
          case Fault::hang_up:
            ::_exit(0);
          case Fault::hang:
            send(nlohmann::json{{"starting", 1}});
            for (;;) ::pause();
          case Fault::none:
            break;
        }
        const TrialObserver report = [&](std::int64_t batch, const TrialResult& result) {
          send(nlohmann::json{{"batch", batch}, {"trial", result}});
        };
        const TrialStarting starting = [&](std::int64_t batch) {
          send(nlohmann::json{{"starting", batch}});
        };
        return measure(cfg, device, limits, report, starting);
      },
      watch, &why);
  if (answer) return measurement_from_json(*answer, cfg);
  if (why.kind == Failure::timeout)
    why.detail =
        running
            ? fmt::format("the trial at batch {} ran over {:g} s", *running, trial_timeout_seconds)
            : fmt::format("the device did not start within {:g} s", trial_timeout_seconds);
  Measurement m = failed_measurement(cfg, device.info, why.kind, std::move(why.detail));
  m.search.trials = std::move(finished);  // what ran before the end, for the row's details
  return m;
}

}  // namespace vrambench

// Runs measure() for one configuration in a child process, so that a sticky CUDA error or a crash
// (illegal address, launch failure, abort) poisons only that child: the parent never touches the
// device, and a crashed configuration comes back as a failed measurement with its reason.
#pragma once

#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "search/measure.h"

namespace vrambench {

// Runs `work` in a forked child and returns what it returned, or nullopt with *why set to how the
// child ended (a signal, an exit code, an exception's message). The parent touches nothing that
// `work` touches: the way to ask a CUDA question without a CUDA context in this process.
std::optional<std::string> run_in_child(const std::function<std::string()>& work, std::string* why);

// What the child does wrong on purpose, to test the crash path without a GPU.
enum class Fault { none, abort, segfault, exit_nonzero, hang_up };

// Measures in a forked child and returns what it sent back; on a crash, a Measurement with
// config, estimate and est_max_batch filled and reason "crashed: ..." (search left empty).
Measurement measure_isolated(const RunConfig& cfg, const DeviceSpec& device,
                             const SourceFactory& sources, const ExecutorFactory& executors,
                             const SearchLimits& limits, Fault fault = Fault::none,
                             const TrialObserver& observe = {});

// The fault named by the environment variable VRAMBENCH_FAULT (abort, segfault, exit), else none.
Fault fault_from_environment();

// A trial as JSON (raw integer bytes, peaks by role, the OOM), and back: the pipe between child
// and parent, and the per-row details of the result files.
nlohmann::json to_json(const TrialResult& t);
TrialResult trial_from_json(const nlohmann::json& j);

// Round trip of a Measurement through JSON (the pipe between child and parent).
nlohmann::json to_json(const Measurement& m);
Measurement measurement_from_json(const nlohmann::json& j, const RunConfig& cfg);

}  // namespace vrambench

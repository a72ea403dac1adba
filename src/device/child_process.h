// Work in a forked child process, so that a sticky CUDA error or a crash (illegal address, launch
// failure, abort) poisons only the child, and a question about the GPU can be asked without a CUDA
// context in this process (a process that has one cannot fork children that use the GPU).
#pragma once

#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

namespace vrambench {

// How work that was to answer did not.
enum class Failure {
  none,
  failed,   // it threw: the detail is the exception's message
  crashed,  // the process ended without an answer: a signal, an exit code, or no result sent
  timeout,  // it was silent for longer than its limit and was stopped
};
NLOHMANN_JSON_SERIALIZE_ENUM(Failure, {{Failure::none, "none"},
                                       {Failure::failed, "failed"},
                                       {Failure::crashed, "crashed"},
                                       {Failure::timeout, "timeout"}})
// "failed", "crashed", "timeout" (the JSON names).
std::string to_string(Failure kind);

struct ChildFailure {
  Failure kind = Failure::none;
  std::string detail;  // "signal 6 (Aborted)", "exit code 3", the exception's message
};
// "crashed: signal 6 (Aborted)".
std::string to_string(const ChildFailure& failure);

// Runs `work` in a forked child and returns what it returned, or nullopt with *why set to how the
// child ended. The parent touches nothing that `work` touches. Answers cross the pipe as JSON.
std::optional<nlohmann::json> run_in_child(const std::function<nlohmann::json()>& work,
                                           ChildFailure* why);

// What a working child tells its parent before its answer, one JSON value per message.
using ChildSend = std::function<void(const nlohmann::json& message)>;
struct ChildWatch {
  // Called in the parent for every message, in order, as it arrives.
  std::function<void(const nlohmann::json& message)> on_message;
  // A child silent for longer than this (no message and no answer) is killed, and *why is a
  // Failure::timeout. 0 waits for ever.
  double silence_limit_seconds = 0;
};
std::optional<nlohmann::json> run_in_child(
    const std::function<nlohmann::json(const ChildSend&)>& work, const ChildWatch& watch,
    ChildFailure* why);

}  // namespace vrambench

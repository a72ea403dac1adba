// Work in a forked child process, so that a sticky CUDA error or a crash (illegal address, launch
// failure, abort) poisons only the child, and a question about the GPU can be asked without a CUDA
// context in this process (a process that has one cannot fork children that use the GPU).
#pragma once

#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

namespace vrambench {

// Runs `work` in a forked child and returns what it returned, or nullopt with *why set to how the
// child ended (a signal, an exit code, an exception's message). The parent touches nothing that
// `work` touches.
std::optional<std::string> run_in_child(const std::function<std::string()>& work, std::string* why);

// What a working child tells its parent before its answer, one JSON value per message.
using ChildSend = std::function<void(const nlohmann::json& message)>;
struct ChildWatch {
  // Called in the parent for every message, in order, as it arrives.
  std::function<void(const nlohmann::json& message)> on_message;
  // A child silent for longer than this (no message and no answer) is killed, and *why starts
  // with "timeout: ". 0 waits for ever.
  double silence_limit_seconds = 0;
};
std::optional<std::string> run_in_child(const std::function<std::string(const ChildSend&)>& work,
                                        const ChildWatch& watch, std::string* why);

}  // namespace vrambench

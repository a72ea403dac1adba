// fork(), measure in the child, send messages and the result back as JSON lines over a pipe, watch
// for silence, reap the child.
#include "search/isolate.h"

#include <fmt/format.h>
#include <poll.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "core/error.h"

namespace vrambench {
namespace {

nlohmann::json components_to_json(const std::vector<Component>& components) {
  nlohmann::json j = nlohmann::json::array();
  for (const Component& c : components) j.push_back({c.name, c.bytes});
  return j;
}

std::vector<Component> components_from_json(const nlohmann::json& j) {
  std::vector<Component> out;
  for (const nlohmann::json& c : j)
    out.push_back({c.at(0).get<std::string>(), c.at(1).get<Bytes>()});
  return out;
}

void write_all(int fd, const std::string& data) {
  std::size_t done = 0;
  while (done < data.size()) {
    const ssize_t n = ::write(fd, data.data() + done, data.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    done += static_cast<std::size_t>(n);
  }
}

// The child: run the work, write its messages and then its answer (or {"error": what}) to the pipe,
// one JSON object per line, and leave with _exit so that no atexit handler or static destructor of
// the parent's state runs twice.
[[noreturn]] void child_main(int fd, const std::function<std::string(const ChildSend&)>& work) {
  int code = 0;
  const ChildSend send = [fd](const nlohmann::json& message) {
    write_all(fd, nlohmann::json{{"message", message}}.dump() + "\n");
  };
  try {
    const std::string answer = work(send);
    write_all(fd, nlohmann::json{{"result", answer}}.dump() + "\n");
  } catch (const std::exception& e) {
    write_all(fd, nlohmann::json{{"error", e.what()}}.dump() + "\n");
    code = 1;
  }
  ::close(fd);
  ::_exit(code);
}

// Reads the child's lines as they come, handing messages on; returns the final line's JSON, or a
// discarded value when the child closed the pipe without one. False in `timed_out` unless the
// child stayed silent for longer than the limit.
nlohmann::json read_lines(int fd, const ChildWatch& watch, bool& timed_out) {
  using Clock = std::chrono::steady_clock;
  const bool limited = watch.silence_limit_seconds > 0;
  const auto limit = std::chrono::duration_cast<Clock::duration>(
      std::chrono::duration<double>(watch.silence_limit_seconds));
  auto deadline = Clock::now() + limit;
  std::string pending;
  nlohmann::json answer = nlohmann::json::value_t::discarded;
  timed_out = false;
  char buffer[65536];
  for (;;) {
    int wait_ms = -1;
    if (limited) {
      const auto left = std::chrono::duration<double, std::milli>(deadline - Clock::now()).count();
      if (left <= 0) {
        timed_out = true;
        return answer;
      }
      wait_ms = static_cast<int>(std::min(std::ceil(left), 3.6e6));
    }
    pollfd p{fd, POLLIN, 0};
    const int ready = ::poll(&p, 1, wait_ms);
    if (ready < 0 && errno == EINTR) continue;
    if (ready < 0) throw InternalError(fmt::format("poll() failed: {}", std::strerror(errno)));
    if (ready == 0) continue;  // the deadline check above decides
    const ssize_t n = ::read(fd, buffer, sizeof buffer);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return answer;  // the child closed the pipe
    pending.append(buffer, static_cast<std::size_t>(n));
    for (std::size_t end; (end = pending.find('\n')) != std::string::npos;) {
      nlohmann::json j = nlohmann::json::parse(pending.substr(0, end), nullptr, false);
      pending.erase(0, end + 1);
      if (j.is_object() && j.contains("message")) {
        deadline = Clock::now() + limit;
        if (watch.on_message) watch.on_message(j["message"]);
      } else {
        answer = std::move(j);
      }
    }
  }
}

std::string describe_status(int status) {
  if (WIFSIGNALED(status)) {
    const int sig = WTERMSIG(status);
    return fmt::format("crashed: signal {} ({})", sig, strsignal(sig));
  }
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return "crashed: the child sent no result";
  if (WIFEXITED(status)) return fmt::format("crashed: exit code {}", WEXITSTATUS(status));
  return "crashed";
}

}  // namespace

nlohmann::json to_json(const TrialResult& t) {
  nlohmann::json roles = nlohmann::json::object();
  for (int r = 0; r < kRoleCount; ++r)
    roles[std::string(to_string(static_cast<Role>(r))) + "_bytes"] =
        t.peak_by_role[static_cast<std::size_t>(r)];
  nlohmann::json j{{"fit", t.fit},
                   {"tensor_peak_bytes", t.tensor_peak},
                   {"reserved_peak_bytes", t.reserved_peak},
                   {"device_peak_bytes", t.device_peak},
                   {"driver_peak_bytes", t.driver_peak},
                   {"peak_op", t.peak_op},
                   {"peak_by_role", roles}};
  if (t.oom)
    j["oom"] = {{"op", t.oom->op},
                {"tensor", t.oom->tensor},
                {"requested_bytes", t.oom->requested},
                {"free_bytes", t.oom->free}};
  return j;
}

TrialResult trial_from_json(const nlohmann::json& j) {
  TrialResult t;
  t.fit = j.at("fit").get<bool>();
  t.tensor_peak = j.at("tensor_peak_bytes").get<Bytes>();
  t.reserved_peak = j.at("reserved_peak_bytes").get<Bytes>();
  t.device_peak = j.at("device_peak_bytes").get<Bytes>();
  t.driver_peak = j.at("driver_peak_bytes").get<Bytes>();
  t.peak_op = j.at("peak_op").get<int>();
  for (int r = 0; r < kRoleCount; ++r)
    t.peak_by_role[static_cast<std::size_t>(r)] =
        j.at("peak_by_role")
            .at(std::string(to_string(static_cast<Role>(r))) + "_bytes")
            .get<Bytes>();
  if (j.contains("oom")) {
    const nlohmann::json& o = j.at("oom");
    t.oom = OomInfo{o.at("op").get<std::string>(), o.at("tensor").get<std::string>(),
                    o.at("requested_bytes").get<Bytes>(), o.at("free_bytes").get<Bytes>()};
  }
  return t;
}

nlohmann::json to_json(const Measurement& m) {
  nlohmann::json j;
  j["estimate_fixed"] = components_to_json(m.estimate.fixed);
  j["estimate_per_sample"] = components_to_json(m.estimate.per_sample);
  j["estimate_moment"] = m.estimate.moment;
  nlohmann::json moments = nlohmann::json::array();
  for (const Moment& mo : m.estimate.other_moments)
    moments.push_back({mo.name, mo.fixed, mo.per_sample});
  j["estimate_other_moments"] = moments;
  j["est_max_batch"] = m.est_max_batch;
  j["max_batch"] = m.search.max_batch;
  j["hit_limit"] = m.search.hit_limit;
  nlohmann::json probes = nlohmann::json::array();
  for (const Probe& p : m.search.trials) probes.push_back({p.batch, p.fits});
  j["probes"] = probes;
  if (m.search.non_monotone)
    j["non_monotone"] = {m.search.non_monotone->first, m.search.non_monotone->second};
  nlohmann::json trials = nlohmann::json::array();
  for (const auto& [batch, t] : m.trials) trials.push_back({batch, to_json(t)});
  j["trials"] = trials;
  if (m.next_needed) j["next_needed"] = to_json(*m.next_needed);
  j["reason"] = m.reason;
  j["attention_impl"] = m.attention_impl;
  j["fixed_overhead_bytes"] = m.fixed_overhead;
  return j;
}

Measurement measurement_from_json(const nlohmann::json& j, const RunConfig& cfg) {
  Measurement m;
  m.config = cfg;
  m.estimate.fixed = components_from_json(j.at("estimate_fixed"));
  m.estimate.per_sample = components_from_json(j.at("estimate_per_sample"));
  m.estimate.moment = j.at("estimate_moment").get<std::string>();
  for (const nlohmann::json& mo : j.at("estimate_other_moments"))
    m.estimate.other_moments.push_back(
        {mo.at(0).get<std::string>(), mo.at(1).get<Bytes>(), mo.at(2).get<Bytes>()});
  m.est_max_batch = j.at("est_max_batch").get<std::int64_t>();
  m.search.max_batch = j.at("max_batch").get<std::int64_t>();
  m.search.hit_limit = j.at("hit_limit").get<bool>();
  for (const nlohmann::json& p : j.at("probes"))
    m.search.trials.push_back({p.at(0).get<std::int64_t>(), p.at(1).get<bool>()});
  if (j.contains("non_monotone"))
    m.search.non_monotone = std::pair{j["non_monotone"].at(0).get<std::int64_t>(),
                                      j["non_monotone"].at(1).get<std::int64_t>()};
  for (const nlohmann::json& t : j.at("trials"))
    m.trials.emplace(t.at(0).get<std::int64_t>(), trial_from_json(t.at(1)));
  if (j.contains("next_needed")) m.next_needed = trial_from_json(j["next_needed"]);
  m.reason = j.at("reason").get<std::string>();
  m.attention_impl = j.at("attention_impl").get<std::string>();
  m.fixed_overhead = j.at("fixed_overhead_bytes").get<Bytes>();
  return m;
}

Fault fault_from_environment() {
  const char* value = std::getenv("VRAMBENCH_FAULT");
  if (!value) return Fault::none;
  const std::string_view v(value);
  if (v == "abort") return Fault::abort;
  if (v == "segfault") return Fault::segfault;
  if (v == "exit") return Fault::exit_nonzero;
  if (v == "hang") return Fault::hang;
  return Fault::none;
}

std::optional<std::string> run_in_child(const std::function<std::string()>& work,
                                        std::string* why) {
  return run_in_child([&](const ChildSend&) { return work(); }, ChildWatch{}, why);
}

std::optional<std::string> run_in_child(const std::function<std::string(const ChildSend&)>& work,
                                        const ChildWatch& watch, std::string* why) {
  int fds[2];
  if (::pipe(fds) != 0) throw InternalError(fmt::format("pipe() failed: {}", std::strerror(errno)));
  std::fflush(nullptr);  // nothing buffered may be written twice by the child
  const pid_t pid = ::fork();
  if (pid < 0) {
    ::close(fds[0]);
    ::close(fds[1]);
    throw InternalError(fmt::format("fork() failed: {}", std::strerror(errno)));
  }
  if (pid == 0) {
    ::close(fds[0]);
    child_main(fds[1], work);
  }
  ::close(fds[1]);
  bool timed_out = false;
  nlohmann::json j;
  try {
    j = read_lines(fds[0], watch, timed_out);
  } catch (...) {
    // A message handler failed: the child must not outlive the answer nobody will read.
    ::kill(pid, SIGKILL);
    ::close(fds[0]);
    while (::waitpid(pid, nullptr, 0) < 0 && errno == EINTR) {
    }
    throw;
  }
  if (timed_out) ::kill(pid, SIGKILL);  // it may be stuck in a kernel or a driver call
  ::close(fds[0]);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  std::string reason;
  if (timed_out)
    reason = fmt::format("timeout: no word from the child for {:g} s", watch.silence_limit_seconds);
  else if (!j.is_discarded() && j.is_object() && j.contains("error"))
    reason = "failed: " + j["error"].get<std::string>();
  else if (!(WIFEXITED(status) && WEXITSTATUS(status) == 0) || j.is_discarded() || !j.is_object() ||
           !j.contains("result"))
    reason = describe_status(status);
  else
    return j["result"].get<std::string>();
  if (why) *why = reason;
  return std::nullopt;
}

Measurement measure_isolated(const RunConfig& cfg, const DeviceSpec& device,
                             const SourceFactory& sources, const ExecutorFactory& executors,
                             const SearchLimits& limits, Fault fault, const TrialObserver& observe,
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
    const TrialResult result = trial_from_json(message.at("trial"));
    running.reset();
    finished.push_back({batch, result.fit});
    if (observe) observe(batch, result);
  };
  std::string why;
  const std::optional<std::string> answer = run_in_child(
      [&](const ChildSend& send) -> std::string {
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
          send(nlohmann::json{{"batch", batch}, {"trial", to_json(result)}});
        };
        const TrialStarting starting = [&](std::int64_t batch) {
          send(nlohmann::json{{"starting", batch}});
        };
        return to_json(measure(cfg, device, sources, executors, limits, report, starting)).dump();
      },
      watch, &why);
  if (answer) return measurement_from_json(nlohmann::json::parse(*answer), cfg);
  if (why.starts_with("timeout"))
    why = running ? fmt::format("timeout: the trial at batch {} ran over {:g} s", *running,
                                trial_timeout_seconds)
                  : fmt::format("timeout: the device did not start within {:g} s",
                                trial_timeout_seconds);
  Measurement m = failed_measurement(cfg, device, why);
  m.search.trials = std::move(finished);  // what ran before the end, for the row's details
  return m;
}

}  // namespace vrambench

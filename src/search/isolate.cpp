// fork(), measure in the child, send the result back as JSON over a pipe, reap the child.
#include "search/isolate.h"

#include <fmt/format.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>

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

std::string read_all(int fd) {
  std::string out;
  char buffer[65536];
  for (;;) {
    const ssize_t n = ::read(fd, buffer, sizeof buffer);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    out.append(buffer, static_cast<std::size_t>(n));
  }
  return out;
}

// The child: run the work, write its answer (or {"error": what}) to the pipe, and leave with
// _exit so that no atexit handler or static destructor of the parent's state runs twice.
[[noreturn]] void child_main(int fd, const std::function<std::string()>& work) {
  int code = 0;
  try {
    write_all(fd, nlohmann::json{{"result", work()}}.dump());
  } catch (const std::exception& e) {
    write_all(fd, nlohmann::json{{"error", e.what()}}.dump());
    code = 1;
  }
  ::close(fd);
  ::_exit(code);
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
  return m;
}

Fault fault_from_environment() {
  const char* value = std::getenv("VRAMBENCH_FAULT");
  if (!value) return Fault::none;
  const std::string_view v(value);
  if (v == "abort") return Fault::abort;
  if (v == "segfault") return Fault::segfault;
  if (v == "exit") return Fault::exit_nonzero;
  return Fault::none;
}

std::optional<std::string> run_in_child(const std::function<std::string()>& work,
                                        std::string* why) {
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
  const std::string payload = read_all(fds[0]);
  ::close(fds[0]);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  const nlohmann::json j = nlohmann::json::parse(payload, nullptr, /*allow_exceptions=*/false);
  std::string reason;
  if (!j.is_discarded() && j.is_object() && j.contains("error"))
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
                             const SearchLimits& limits, Fault fault,
                             const TrialObserver& observe) {
  std::string why;
  const std::optional<std::string> answer = run_in_child(
      [&]() -> std::string {
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
          case Fault::none:
            break;
        }
        // The observer runs in the child: what it prints goes to the stderr both share.
        return to_json(measure(cfg, device, sources, executors, limits, observe)).dump();
      },
      &why);
  if (!answer) return failed_measurement(cfg, device, why);
  return measurement_from_json(nlohmann::json::parse(*answer), cfg);
}

}  // namespace vrambench

// measure() in a child process: trials reported as they start and end, the Measurement as JSON.
#include "search/isolate.h"

#include <fmt/format.h>
#include <unistd.h>

#include <csignal>
#include <cstdlib>
#include <vector>

#include "device/child_process.h"
#include "estimate/json.h"

namespace vrambench {
namespace {

nlohmann::json components_to_json(const std::vector<Component>& components) {
  nlohmann::json j = nlohmann::json::array();
  for (const Component& c : components) j.push_back({c.kind, c.bytes});
  return j;
}

std::vector<Component> components_from_json(const nlohmann::json& j) {
  std::vector<Component> out;
  for (const nlohmann::json& c : j)
    out.push_back({c.at(0).get<MemoryComponent>(), c.at(1).get<Bytes>()});
  return out;
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
  j["estimate_model_state"] = m.estimate.model_state;
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
  m.estimate.model_state = j.at("estimate_model_state").get<Bytes>();
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
        return to_json(measure(cfg, device, limits, report, starting)).dump();
      },
      watch, &why);
  if (answer) return measurement_from_json(nlohmann::json::parse(*answer), cfg);
  if (why.starts_with("timeout"))
    why = running ? fmt::format("timeout: the trial at batch {} ran over {:g} s", *running,
                                trial_timeout_seconds)
                  : fmt::format("timeout: the device did not start within {:g} s",
                                trial_timeout_seconds);
  Measurement m = failed_measurement(cfg, device.info, why);
  m.search.trials = std::move(finished);  // what ran before the end, for the row's details
  return m;
}

}  // namespace vrambench

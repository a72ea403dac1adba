// The one rule of "the same run" that merge, --resume and compare share.
#include "report/same_run.h"

#include <fmt/format.h>

#include <optional>

#include "report/table.h"

namespace vrambench {
namespace {

// A provenance field as text ("" when absent); the framework lives in "extra".
std::string field(const nlohmann::json& provenance, const std::string& what) {
  if (!provenance.is_object()) return "";
  const nlohmann::json* value = nullptr;
  if (what == "framework") {
    const auto extra = provenance.find("extra");
    if (extra == provenance.end() || !extra->is_object() || !extra->contains("framework"))
      return "";
    value = &(*extra)["framework"];
  } else {
    const auto it = provenance.find(what);
    if (it == provenance.end()) return "";
    value = &*it;
  }
  return value->is_string() ? value->get<std::string>() : value->dump();
}

}  // namespace

std::vector<std::string> command_words(const std::string& command_line, Shard* shard) {
  const std::vector<std::string> words = shell_words(command_line);
  std::vector<std::string> kept;
  for (std::size_t i = 1; i < words.size(); ++i) {
    const std::string& w = words[i];
    const auto value_of = [&](std::string_view flag) -> std::optional<std::string> {
      if (w == flag && i + 1 < words.size()) return words[++i];
      if (w.starts_with(std::string(flag) + "=")) return w.substr(flag.size() + 1);
      return std::nullopt;
    };
    if (const auto value = value_of("--shard")) {
      if (shard) *shard = parse_shard(*value);
      continue;
    }
    if (value_of("--out") || value_of("--name") || value_of("--format") || value_of("--jobs"))
      continue;
    if (w == "--quiet" || w == "--resume") continue;
    kept.push_back(w);
  }
  return kept;
}

std::string quoted_command(const std::vector<std::string>& words) {
  std::vector<const char*> argv{"vrambench"};
  for (const std::string& w : words) argv.push_back(w.c_str());
  return make_provenance(static_cast<int>(argv.size()), argv.data(), "").command_line;
}

std::vector<RunDifference> run_differences(const nlohmann::json& a, const nlohmann::json& b) {
  std::vector<RunDifference> out;
  const std::string line_a = field(a, "command_line"), line_b = field(b, "command_line");
  const std::string command_a = line_a.empty() ? "(none)" : quoted_command(command_words(line_a));
  const std::string command_b = line_b.empty() ? "(none)" : quoted_command(command_words(line_b));
  if (line_a.empty() || line_b.empty() || command_a != command_b)
    out.push_back({"command", command_a, command_b});
  for (const char* what : {"tool_version", "git_commit", "device", "framework"})
    if (field(a, what) != field(b, what)) out.push_back({what, field(a, what), field(b, what)});
  return out;
}

std::string describe(const std::vector<RunDifference>& differences) {
  std::string out;
  for (const RunDifference& d : differences) {
    if (!out.empty()) out += "; ";
    if (d.what == "command")
      out += fmt::format("command `{}` vs `{}`", d.a, d.b);
    else
      out += fmt::format("{} {} vs {}", d.what, d.a.empty() ? "(none)" : d.a,
                         d.b.empty() ? "(none)" : d.b);
  }
  return out;
}

}  // namespace vrambench

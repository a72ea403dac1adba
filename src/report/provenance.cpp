// Provenance of a result: tool version and commit, device, UTC time and the command line, quoted so
// that it can be pasted back into a shell.
#include <fmt/chrono.h>
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <ctime>
#include <string_view>

#include "core/version.h"
#include "report/table.h"

namespace vrambench {
namespace {

// Characters a POSIX shell reads literally; anything else (spaces, quotes, globs, $, ;, [ ...)
// makes the argument need quoting.
bool shell_safe(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
         std::string_view("_-+=/.,:@%").find(c) != std::string_view::npos;
}

std::string shell_quote(std::string_view arg) {
  if (!arg.empty() && std::all_of(arg.begin(), arg.end(), shell_safe)) return std::string(arg);
  // Inside single quotes nothing is special except the quote itself, written as '\''.
  std::string out = "'";
  for (const char c : arg) {
    if (c == '\'')
      out += "'\\''";
    else
      out += c;
  }
  return out + "'";
}

std::string utc_now() {
  const std::time_t now = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  return fmt::format("{:%Y-%m-%dT%H:%M:%SZ}", fmt::gmtime(now));
}

}  // namespace

Provenance make_provenance(int argc, const char* const* argv, std::string device) {
  Provenance p;
  p.tool_version = kVersion;
  p.git_commit = kGitCommit;
  p.device = std::move(device);
  p.utc_time = utc_now();
  for (int i = 0; i < argc; ++i) {
    if (i > 0) p.command_line += ' ';
    p.command_line += shell_quote(argv[i] == nullptr ? "" : argv[i]);
  }
  return p;
}

std::vector<std::string> shell_words(std::string_view command_line) {
  std::vector<std::string> words;
  std::string word;
  bool in_word = false, quoted = false;
  for (std::size_t i = 0; i < command_line.size(); ++i) {
    const char c = command_line[i];
    if (quoted) {
      if (c == '\'')
        quoted = false;
      else
        word += c;
    } else if (c == '\'') {
      quoted = in_word = true;
    } else if (c == '\\' && i + 1 < command_line.size()) {
      word += command_line[++i];
      in_word = true;
    } else if (c == ' ') {
      if (in_word) words.push_back(std::move(word));
      word.clear();
      in_word = false;
    } else {
      word += c;
      in_word = true;
    }
  }
  if (in_word) words.push_back(std::move(word));
  return words;
}

}  // namespace vrambench

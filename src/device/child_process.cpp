// fork(), run the work in the child, send its messages and answer back as JSON lines over a pipe,
// watch for silence, reap the child.
#include "device/child_process.h"

#include <fmt/format.h>
#include <poll.h>
#include <sys/prctl.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstring>

#include "core/error.h"

namespace vrambench {
namespace {

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
[[noreturn]] void child_main(int fd, const std::function<nlohmann::json(const ChildSend&)>& work) {
  int code = 0;
  const ChildSend send = [fd](const nlohmann::json& message) {
    write_all(fd, nlohmann::json{{"message", message}}.dump() + "\n");
  };
  try {
    nlohmann::json answer = work(send);
    write_all(fd, nlohmann::json{{"result", std::move(answer)}}.dump() + "\n");
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

// How a child that sent no answer ended.
std::string describe_status(int status) {
  if (WIFSIGNALED(status)) {
    const int sig = WTERMSIG(status);
    return fmt::format("signal {} ({})", sig, strsignal(sig));
  }
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return "the child sent no result";
  if (WIFEXITED(status)) return fmt::format("exit code {}", WEXITSTATUS(status));
  return "the child ended without a status";
}

}  // namespace

std::string to_string(Failure kind) {
  return nlohmann::json(kind).get<std::string>();
}

std::string to_string(const ChildFailure& failure) {
  return fmt::format("{}: {}", to_string(failure.kind), failure.detail);
}

std::optional<nlohmann::json> run_in_child(const std::function<nlohmann::json()>& work,
                                           ChildFailure* why) {
  return run_in_child([&](const ChildSend&) { return work(); }, ChildWatch{}, why);
}

std::optional<nlohmann::json> run_in_child(
    const std::function<nlohmann::json(const ChildSend&)>& work, const ChildWatch& watch,
    ChildFailure* why) {
  int fds[2];
  if (::pipe(fds) != 0) throw InternalError(fmt::format("pipe() failed: {}", std::strerror(errno)));
  std::fflush(nullptr);  // nothing buffered may be written twice by the child
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0) {
    ::close(fds[0]);
    ::close(fds[1]);
    throw InternalError(fmt::format("fork() failed: {}", std::strerror(errno)));
  }
  if (pid == 0) {
    // A sweep killed outright (SIGKILL, a preempted job) must not leave a hanging trial behind.
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(1);  // the parent died before prctl
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
  ChildFailure failure;
  if (timed_out)
    failure = {Failure::timeout,
               fmt::format("no word from the child for {:g} s", watch.silence_limit_seconds)};
  else if (!j.is_discarded() && j.is_object() && j.contains("error"))
    failure = {Failure::failed, j["error"].get<std::string>()};
  else if (!(WIFEXITED(status) && WEXITSTATUS(status) == 0) || j.is_discarded() || !j.is_object() ||
           !j.contains("result"))
    failure = {Failure::crashed, describe_status(status)};
  else
    return std::move(j["result"]);
  if (why) *why = std::move(failure);
  return std::nullopt;
}

}  // namespace vrambench

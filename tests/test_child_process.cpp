// Work in a child process: its answer, or why there is none (an exception, a signal, silence).
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <stdexcept>
#include <vector>

#include "device/child_process.h"

namespace vrambench {
namespace {

TEST(ChildProcess, RunInChildReturnsTheAnswerOrWhyNot) {
  std::string why;
  EXPECT_EQ(run_in_child([] { return std::string("forty-two"); }, &why), "forty-two");
  EXPECT_EQ(run_in_child([]() -> std::string { throw std::runtime_error("no driver"); }, &why),
            std::nullopt);
  EXPECT_EQ(why, "failed: no driver");
  EXPECT_EQ(run_in_child([]() -> std::string { std::abort(); }, &why), std::nullopt);
  EXPECT_NE(why.find("signal 6"), std::string::npos) << why;
}

TEST(ChildProcess, SilenceIsMeasuredBetweenMessagesNotOverTheWholeRun) {
  // 6 messages 0.1 s apart take 0.6 s in all, longer than the limit of 0.4 s, but the child is
  // never silent for that long.
  std::vector<int> seen;
  ChildWatch watch;
  watch.silence_limit_seconds = 0.4;
  watch.on_message = [&](const nlohmann::json& m) { seen.push_back(m.get<int>()); };
  std::string why;
  const auto chatty = run_in_child(
      [](const ChildSend& send) {
        for (int i = 0; i < 6; ++i) {
          ::usleep(100000);
          send(i);
        }
        return std::string("done");
      },
      watch, &why);
  EXPECT_EQ(chatty, "done") << why;
  EXPECT_EQ(seen, (std::vector<int>{0, 1, 2, 3, 4, 5}));

  const auto silent = run_in_child(
      [](const ChildSend& send) {
        send(0);
        ::sleep(30);
        return std::string("too late");
      },
      watch, &why);
  EXPECT_EQ(silent, std::nullopt);
  EXPECT_EQ(why, "timeout: no word from the child for 0.4 s");
}

}  // namespace
}  // namespace vrambench

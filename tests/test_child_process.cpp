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
  ChildFailure why;
  // The answer is JSON, nested as it was, not JSON text inside a string.
  const std::optional<nlohmann::json> answer = run_in_child(
      []() -> nlohmann::json {
        return {{"answer", {42, "forty-two"}}};
      },
      &why);
  ASSERT_TRUE(answer.has_value());
  EXPECT_EQ(answer->at("answer").at(0), 42);
  EXPECT_EQ(answer->at("answer").at(1), "forty-two");

  EXPECT_EQ(run_in_child([]() -> nlohmann::json { throw std::runtime_error("no driver"); }, &why),
            std::nullopt);
  EXPECT_EQ(why.kind, Failure::failed);
  EXPECT_EQ(why.detail, "no driver");
  EXPECT_EQ(to_string(why), "failed: no driver");

  EXPECT_EQ(run_in_child([]() -> nlohmann::json { std::abort(); }, &why), std::nullopt);
  EXPECT_EQ(why.kind, Failure::crashed);
  EXPECT_NE(why.detail.find("signal 6"), std::string::npos) << why.detail;

  EXPECT_EQ(run_in_child([]() -> nlohmann::json { ::_exit(0); }, &why), std::nullopt);
  EXPECT_EQ(why.kind, Failure::crashed);
  EXPECT_EQ(why.detail, "the child sent no result");
}

TEST(ChildProcess, SilenceIsMeasuredBetweenMessagesNotOverTheWholeRun) {
  // 6 messages 0.1 s apart take 0.6 s in all, longer than the limit of 0.4 s, but the child is
  // never silent for that long.
  std::vector<int> seen;
  ChildWatch watch;
  watch.silence_limit_seconds = 0.4;
  watch.on_message = [&](const nlohmann::json& m) { seen.push_back(m.get<int>()); };
  ChildFailure why;
  const auto chatty = run_in_child(
      [](const ChildSend& send) -> nlohmann::json {
        for (int i = 0; i < 6; ++i) {
          ::usleep(100000);
          send(i);
        }
        return "done";
      },
      watch, &why);
  ASSERT_TRUE(chatty.has_value()) << to_string(why);
  EXPECT_EQ(*chatty, "done");
  EXPECT_EQ(seen, (std::vector<int>{0, 1, 2, 3, 4, 5}));

  const auto silent = run_in_child(
      [](const ChildSend& send) -> nlohmann::json {
        send(0);
        ::sleep(30);
        return "too late";
      },
      watch, &why);
  EXPECT_EQ(silent, std::nullopt);
  EXPECT_EQ(why.kind, Failure::timeout);
  EXPECT_EQ(why.detail, "no word from the child for 0.4 s");
}

}  // namespace
}  // namespace vrambench

// Name (core/name.h): the program's tensor and op names, in place up to kInPlace characters and
// on the heap beyond, reading and joining as a string would.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <sstream>
#include <string>
#include <string_view>
#include <type_traits>
#include <unordered_map>
#include <utility>

#include "core/name.h"

namespace vrambench {
namespace {

const std::string kLong(Name::kInPlace + 9, 'x');  // past what is kept in place

bool in_place(const Name& n) {
  return n.capacity() == Name::kInPlace;
}

TEST(Name, JoinsPiecesAndNumbersInPlace) {
  const Name pre = Name("layer") + 3 + ".";
  const Name name = pre + "attn" + std::string(".qkv") + std::string_view(".w") + Name(".grad");
  EXPECT_EQ(name, "layer3.attn.qkv.w.grad");
  EXPECT_EQ(name.size(), 22u);
  EXPECT_TRUE(in_place(name));
  Name n = "x";
  n += std::int64_t{0};
  n += 1234567890123;
  n += -45;
  n += std::numeric_limits<std::int64_t>::min();
  EXPECT_EQ(n, "x01234567890123-45-9223372036854775808");
}

TEST(Name, GoesToTheHeapPastItsPlaceAndKeepsEveryCharacter) {
  Name n = std::string_view(kLong).substr(0, Name::kInPlace);
  EXPECT_TRUE(in_place(n));
  n += "tail";
  EXPECT_FALSE(in_place(n));
  EXPECT_EQ(n, kLong.substr(0, Name::kInPlace) + "tail");
  for (int i = 0; i < 100; ++i) n += "0123456789";
  EXPECT_EQ(n.size(), Name::kInPlace + 4 + 1000);
  EXPECT_EQ(n.substr(Name::kInPlace, 6), "tail01");
  EXPECT_TRUE(n.ends_with("789"));
}

TEST(Name, AppendingItsOwnTextWhileItMoves) {
  Name n = std::string_view(kLong).substr(0, Name::kInPlace - 1);
  n += n.view();  // the storage moves to the heap while the view is read
  EXPECT_EQ(n, std::string(2 * (Name::kInPlace - 1), 'x'));
  Name small = "ab";
  small += small.view();
  EXPECT_EQ(small, "abab");
}

TEST(Name, CopiesAndMovesInPlaceAndOnTheHeap) {
  for (const std::string& text : {std::string("layer0.mlp.fc"), kLong}) {
    const Name a = text;
    Name copy = a;
    EXPECT_EQ(copy, text);
    Name moved = std::move(copy);
    EXPECT_EQ(moved, text);
    EXPECT_TRUE(copy.empty());  // NOLINT: a moved-from name is empty
    Name assigned = "before";
    assigned = a;
    EXPECT_EQ(assigned, text);
    Name long_before = kLong + "y";
    long_before = a;
    EXPECT_EQ(long_before, text);
    Name move_assigned = kLong + "z";
    move_assigned = std::move(moved);
    EXPECT_EQ(move_assigned, text);
    copy = a;  // a moved-from name takes a value again
    EXPECT_EQ(copy, text);
    Name& self = copy;
    copy = self;
    EXPECT_EQ(copy, text);
  }
}

TEST(Name, ReadsAsAStringView) {
  const Name n = "layer11.attn.probs.recompute";
  EXPECT_TRUE(n.starts_with("layer11."));
  EXPECT_TRUE(n.ends_with(".recompute"));
  EXPECT_EQ(n.find("attn"), 8u);
  EXPECT_EQ(n.find('.', 8), 12u);
  EXPECT_EQ(n.rfind('.'), 18u);
  EXPECT_EQ(n.rfind(".r"), 18u);
  EXPECT_EQ(n.find("nope"), std::string_view::npos);
  EXPECT_EQ(n.substr(0, 7), "layer11");
  const std::string_view v = n;
  EXPECT_EQ(v, "layer11.attn.probs.recompute");
  EXPECT_EQ(n.str(), std::string(v));
  Name cut = n;
  cut.remove_suffix(std::string_view(".recompute").size());
  EXPECT_EQ(cut, "layer11.attn.probs");
  cut.remove_suffix(100);
  EXPECT_TRUE(cut.empty());
}

TEST(Name, ComparesHashesAndPrints) {
  const Name a = "layer2.ln1.w";
  EXPECT_TRUE(a == "layer2.ln1.w");
  EXPECT_TRUE(a == std::string("layer2.ln1.w"));
  EXPECT_TRUE(a == std::string_view("layer2.ln1.w"));
  EXPECT_TRUE(a != Name("layer2.ln1.b"));
  EXPECT_LT(Name("layer2.ln1.b"), a);
  EXPECT_GT(a, std::string_view("layer10"));
  std::unordered_map<Name, int> steps;
  ++steps[a];
  ++steps[Name("layer2.") + "ln1.w"];
  EXPECT_EQ(steps.size(), 1u);
  EXPECT_EQ(steps.at(a), 2);
  EXPECT_EQ(fmt::format("[{:>14}]", a), "[  layer2.ln1.w]");
  std::ostringstream out;
  out << a;
  EXPECT_EQ(out.str(), "layer2.ln1.w");
}

TEST(Name, TextBeforeANameMakesAMessage) {
  const Name n = "wte";
  const auto message = "tensor '" + n + "' bytes";
  static_assert(std::is_same_v<std::remove_const_t<decltype(message)>, std::string>);
  EXPECT_EQ(message, "tensor 'wte' bytes");
  EXPECT_EQ(std::string("no ") + n, "no wte");
}

}  // namespace
}  // namespace vrambench

// SmallVector (core/small_vector.h): the program's shapes and operand lists, in place up to N
// elements and on the heap beyond, with std::vector's behaviour either way.
#include <gtest/gtest.h>

#include <cstdint>
#include <utility>
#include <vector>

#include "core/small_vector.h"

namespace vrambench {
namespace {

using Small = SmallVector<int, 3>;

std::vector<int> as_vector(const Small& v) {
  return {v.begin(), v.end()};
}

TEST(SmallVector, KeepsUpToNInPlaceAndMovesToTheHeapBeyond) {
  Small v{1, 2, 3};
  EXPECT_EQ(v.capacity(), 3u);
  const int* in_place = v.data();
  v.push_back(4);
  EXPECT_NE(v.data(), in_place);
  EXPECT_GE(v.capacity(), 4u);
  for (int i = 5; i <= 40; ++i) v.push_back(i);
  ASSERT_EQ(v.size(), 40u);
  for (int i = 0; i < 40; ++i) EXPECT_EQ(v[static_cast<std::size_t>(i)], i + 1);
  EXPECT_EQ(v.front(), 1);
  EXPECT_EQ(v.back(), 40);
}

TEST(SmallVector, PushBackOfItsOwnElementWhileGrowing) {
  Small v{7, 8, 9};
  v.push_back(v[0]);  // the element's storage moves while it is read
  EXPECT_EQ(as_vector(v), (std::vector<int>{7, 8, 9, 7}));
}

TEST(SmallVector, CopiesAndMovesInPlaceAndOnTheHeap) {
  for (const std::vector<int>& items : {std::vector<int>{1, 2}, std::vector<int>{1, 2, 3, 4, 5}}) {
    const Small original(items.begin(), items.end());
    Small copy = original;
    EXPECT_EQ(as_vector(copy), items);
    copy[0] = 99;  // a copy owns its elements
    EXPECT_EQ(original[0], 1);

    Small moved = std::move(copy);
    EXPECT_EQ(moved[0], 99);
    EXPECT_EQ(moved.size(), items.size());
    EXPECT_TRUE(copy.empty());  // NOLINT(bugprone-use-after-move): moved-from is empty

    Small assigned{5};
    assigned = original;
    EXPECT_EQ(assigned, original);
    Small move_assigned{6, 6, 6, 6, 6, 6};
    move_assigned = std::move(assigned);
    EXPECT_EQ(as_vector(move_assigned), items);
    move_assigned = move_assigned;  // self-assignment keeps the elements
    EXPECT_EQ(as_vector(move_assigned), items);
  }
}

TEST(SmallVector, InsertEraseResizeAndAt) {
  Small v{1, 5};
  v.insert(v.begin() + 1, {2, 3, 4});
  EXPECT_EQ(as_vector(v), (std::vector<int>{1, 2, 3, 4, 5}));
  v.insert(v.end(), 6);
  v.erase(v.begin(), v.begin() + 2);
  EXPECT_EQ(as_vector(v), (std::vector<int>{3, 4, 5, 6}));
  v.erase(v.begin() + 1);
  EXPECT_EQ(as_vector(v), (std::vector<int>{3, 5, 6}));
  v.resize(5, -1);
  EXPECT_EQ(as_vector(v), (std::vector<int>{3, 5, 6, -1, -1}));
  v.resize(1);
  EXPECT_EQ(as_vector(v), (std::vector<int>{3}));
  EXPECT_EQ(v.at(0), 3);
  EXPECT_THROW(v.at(1), std::out_of_range);
  v.pop_back();
  EXPECT_TRUE(v.empty());
  EXPECT_EQ(Small(4, 2), (Small{2, 2, 2, 2}));
}

TEST(SmallVector, ComparesWithItselfAndWithStdVector) {
  const SmallVector<std::int64_t, 4> shape{2, 1024, 768};
  EXPECT_EQ(shape, (std::vector<std::int64_t>{2, 1024, 768}));
  EXPECT_NE(shape, (std::vector<std::int64_t>{2, 1024}));
  EXPECT_NE(shape, (SmallVector<std::int64_t, 4>{2, 1024, 769}));
  EXPECT_EQ(shape, (SmallVector<std::int64_t, 4>{2, 1024, 768}));
}

}  // namespace
}  // namespace vrambench

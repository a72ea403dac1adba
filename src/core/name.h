// A short string kept in place: the names of a step program's tensors and ops ("layer3.attn.qkv",
// "layer11.mlp.gelu.one_plus_tanh.recompute"), which a build makes by the thousand. Up to
// kInPlace characters cost no allocation, neither to make nor to join; longer ones go to the heap.
// It reads as a std::string_view (the conversion is implicit) and joins with `+` in place:
// Name("layer") + 3 + ".attn" is the Name "layer3.attn"; text + a name is a std::string (a
// message).
#pragma once

#include <fmt/format.h>

#include <algorithm>
#include <compare>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <ostream>
#include <string>
#include <string_view>

namespace vrambench {

class Name {
 public:
  // Every name of the programs built so far fits (the longest is 41 characters).
  static constexpr std::size_t kInPlace = 48;

  Name() = default;
  Name(const char* text) : Name(std::string_view(text)) {}         // NOLINT: a literal is a name
  Name(std::string_view text) { append(text); }                    // NOLINT
  Name(const std::string& text) : Name(std::string_view(text)) {}  // NOLINT
  Name(const Name& other) {
    if (other.heap_) {
      append(other.view());
    } else {
      size_ = other.size_;
      copy_in_place(other);
    }
  }
  Name(Name&& other) noexcept { take(other); }
  Name& operator=(const Name& other) {
    if (this != &other) {
      size_ = 0;
      if (other.heap_ || heap_) {
        append(other.view());
      } else {
        size_ = other.size_;
        copy_in_place(other);
      }
    }
    return *this;
  }
  Name& operator=(Name&& other) noexcept {
    if (this != &other) {
      heap_.reset();
      capacity_ = kInPlace;
      take(other);
    }
    return *this;
  }
  ~Name() = default;

  operator std::string_view() const { return view(); }  // NOLINT: reads as a view
  std::string_view view() const { return {data(), size_}; }
  std::string str() const { return std::string(view()); }
  const char* data() const { return heap_ ? heap_.get() : in_place_; }
  std::size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  std::size_t capacity() const { return capacity_; }

  // Drops the last `count` characters (at most size()).
  void remove_suffix(std::size_t count) {
    size_ -= static_cast<std::uint32_t>(std::min<std::size_t>(count, size_));
  }

  Name& operator+=(std::string_view text) {
    append(text);
    return *this;
  }
  // The decimal digits of `number` (a block's index, a count).
  Name& operator+=(std::int64_t number) {
    char digits[21];
    std::size_t n = 0;
    const bool negative = number < 0;
    // Digits of the magnitude, least significant first; unsigned so that the most negative
    // number has one.
    std::uint64_t rest =
        negative ? ~static_cast<std::uint64_t>(number) + 1 : static_cast<std::uint64_t>(number);
    do {
      digits[n++] = static_cast<char>('0' + rest % 10);
      rest /= 10;
    } while (rest > 0);
    if (negative) digits[n++] = '-';
    reserve(size_ + n);
    char* out = mutable_data() + size_;
    for (std::size_t i = 0; i < n; ++i) out[i] = digits[n - 1 - i];
    size_ += static_cast<std::uint32_t>(n);
    return *this;
  }
  Name& operator+=(int number) { return *this += static_cast<std::int64_t>(number); }
  Name& operator+=(char) = delete;  // a character would be taken for its code

  friend Name operator+(Name a, std::string_view b) { return std::move(a += b); }
  friend Name operator+(Name a, const char* b) { return std::move(a += std::string_view(b)); }
  friend Name operator+(Name a, const std::string& b) {
    return std::move(a += std::string_view(b));
  }
  friend Name operator+(Name a, const Name& b) { return std::move(a += b.view()); }
  friend Name operator+(Name a, std::int64_t number) { return std::move(a += number); }
  friend Name operator+(Name a, int number) { return std::move(a += number); }
  friend Name operator+(Name a, char c) = delete;
  // Text before a name is a message, not a name: a std::string.
  friend std::string operator+(std::string a, const Name& b) { return a.append(b.view()); }
  friend std::string operator+(const char* a, const Name& b) { return std::string(a) + b; }

  // What std::string_view offers, for code that asks a name about its parts.
  bool starts_with(std::string_view prefix) const { return view().starts_with(prefix); }
  bool ends_with(std::string_view suffix) const { return view().ends_with(suffix); }
  std::size_t find(std::string_view text, std::size_t from = 0) const {
    return view().find(text, from);
  }
  std::size_t find(char c, std::size_t from = 0) const { return view().find(c, from); }
  std::size_t rfind(std::string_view text) const { return view().rfind(text); }
  std::size_t rfind(char c) const { return view().rfind(c); }
  std::string_view substr(std::size_t from, std::size_t count = std::string_view::npos) const {
    return view().substr(from, count);
  }

  friend bool operator==(const Name& a, const Name& b) { return a.view() == b.view(); }
  friend bool operator==(const Name& a, std::string_view b) { return a.view() == b; }
  friend bool operator==(const Name& a, const char* b) { return a.view() == std::string_view(b); }
  friend bool operator==(const Name& a, const std::string& b) { return a.view() == b; }
  friend std::strong_ordering operator<=>(const Name& a, const Name& b) {
    return a.view() <=> b.view();
  }
  friend std::strong_ordering operator<=>(const Name& a, std::string_view b) {
    return a.view() <=> b;
  }
  friend std::ostream& operator<<(std::ostream& out, const Name& name) {
    return out << name.view();
  }

 private:
  char* mutable_data() { return heap_ ? heap_.get() : in_place_; }
  void reserve(std::size_t wanted) {
    if (wanted <= capacity_) return;
    const std::size_t grown = std::max<std::size_t>(wanted, 2 * std::size_t{capacity_});
    std::unique_ptr<char[]> bigger(new char[grown]);
    std::memcpy(bigger.get(), data(), size_);
    heap_ = std::move(bigger);
    capacity_ = static_cast<std::uint32_t>(grown);
  }
  void append(std::string_view text) {
    // `text` may be a view of this name: copied before the storage can move. It never reaches
    // past size_, where the new characters go.
    if (text.empty()) return;
    if (size_ + text.size() > capacity_) {
      const std::string copy(text);
      reserve(size_ + copy.size());
      std::memcpy(mutable_data() + size_, copy.data(), copy.size());
    } else {
      std::memcpy(mutable_data() + size_, text.data(), text.size());
    }
    size_ += static_cast<std::uint32_t>(text.size());
  }
  // The whole in-place buffer, a size known when compiling: a few vector moves, no call.
  void copy_in_place(const Name& other) { std::memcpy(in_place_, other.in_place_, kInPlace); }
  void take(Name& other) {
    size_ = other.size_;
    if (other.heap_) {
      heap_ = std::move(other.heap_);
      capacity_ = other.capacity_;
    } else {
      copy_in_place(other);
    }
    other.size_ = 0;
    other.capacity_ = kInPlace;
  }

  std::uint32_t size_ = 0;
  std::uint32_t capacity_ = kInPlace;
  std::unique_ptr<char[]> heap_;
  char in_place_[kInPlace];  // the first size_ are the name (when not on the heap)
};

}  // namespace vrambench

template <>
struct std::hash<vrambench::Name> {
  std::size_t operator()(const vrambench::Name& name) const noexcept {
    return std::hash<std::string_view>{}(name.view());
  }
};

template <>
struct fmt::formatter<vrambench::Name> : fmt::formatter<std::string_view> {
  auto format(const vrambench::Name& name, format_context& ctx) const {
    return fmt::formatter<std::string_view>::format(name.view(), ctx);
  }
};

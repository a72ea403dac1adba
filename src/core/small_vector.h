// A vector that keeps up to N elements in place and goes to the heap only beyond them: a step
// program's tensor shapes and op operand lists, which a build makes by the thousand and which hold
// a handful of numbers each (rank <= 4, a few operands), cost no allocation of their own.
// Only for trivially copyable elements; the interface is the part of std::vector the code uses.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <iterator>
#include <memory>
#include <stdexcept>
#include <type_traits>

namespace vrambench {

template <class T, std::size_t N>
class SmallVector {
  static_assert(std::is_trivially_copyable_v<T>, "elements are copied as bytes");
  static_assert(N > 0);

 public:
  using value_type = T;
  using size_type = std::size_t;
  using difference_type = std::ptrdiff_t;
  using reference = T&;
  using const_reference = const T&;
  using pointer = T*;
  using const_pointer = const T*;
  using iterator = T*;
  using const_iterator = const T*;

  // Provided, not defaulted: a value-initialised vector (an op's empty list) is not zeroed whole
  // first, in_place_ included.
  SmallVector() noexcept {}  // NOLINT(modernize-use-equals-default)
  SmallVector(std::initializer_list<T> init) { append(init.begin(), init.end()); }
  template <class It>
  requires std::input_iterator<It> SmallVector(It first, It last) { append(first, last); }
  SmallVector(size_type count, const T& value) {
    reserve(count);
    std::fill_n(data(), count, value);
    size_ = static_cast<std::uint32_t>(count);
  }
  SmallVector(const SmallVector& other) { append(other.begin(), other.end()); }
  SmallVector(SmallVector&& other) noexcept { take(other); }
  SmallVector& operator=(const SmallVector& other) {
    if (this != &other) {
      size_ = 0;
      append(other.begin(), other.end());
    }
    return *this;
  }
  SmallVector& operator=(SmallVector&& other) noexcept {
    if (this != &other) {
      heap_.reset();
      capacity_ = N;
      take(other);
    }
    return *this;
  }
  SmallVector& operator=(std::initializer_list<T> init) {
    size_ = 0;
    append(init.begin(), init.end());
    return *this;
  }
  ~SmallVector() = default;

  size_type size() const { return size_; }
  bool empty() const { return size_ == 0; }
  size_type capacity() const { return capacity_; }
  T* data() { return heap_ ? heap_.get() : in_place_; }
  const T* data() const { return heap_ ? heap_.get() : in_place_; }
  iterator begin() { return data(); }
  iterator end() { return data() + size_; }
  const_iterator begin() const { return data(); }
  const_iterator end() const { return data() + size_; }
  T& operator[](size_type i) { return data()[i]; }
  const T& operator[](size_type i) const { return data()[i]; }
  T& at(size_type i) {
    if (i >= size_) throw std::out_of_range("SmallVector::at");
    return data()[i];
  }
  const T& at(size_type i) const {
    if (i >= size_) throw std::out_of_range("SmallVector::at");
    return data()[i];
  }
  T& front() { return data()[0]; }
  const T& front() const { return data()[0]; }
  T& back() { return data()[size_ - 1]; }
  const T& back() const { return data()[size_ - 1]; }

  void reserve(size_type wanted) {
    if (wanted <= capacity_) return;
    const size_type grown = std::max<size_type>(wanted, 2 * size_type{capacity_});
    std::unique_ptr<T[]> bigger(new T[grown]);
    const T* from = data();
    for (size_type i = 0; i < size_; ++i) bigger[i] = from[i];
    heap_ = std::move(bigger);
    capacity_ = static_cast<std::uint32_t>(grown);
  }
  void push_back(const T& value) {
    if (size_ == capacity_) {
      const T copy = value;  // `value` may be an element
      reserve(size_ + 1);
      data()[size_++] = copy;
      return;
    }
    data()[size_++] = value;
  }
  void pop_back() { --size_; }
  void clear() { size_ = 0; }
  void resize(size_type count, const T& value = T()) {
    reserve(count);
    if (count > size_) std::fill(data() + size_, data() + count, value);
    size_ = static_cast<std::uint32_t>(count);
  }
  // Inserts [first, last), which must not point into this vector, before `pos`.
  template <class It>
  requires std::forward_iterator<It> iterator insert(const_iterator pos, It first, It last) {
    const auto at = static_cast<size_type>(pos - begin());
    const auto count = static_cast<size_type>(std::distance(first, last));
    reserve(size_ + count);
    T* d = data();
    std::copy_backward(d + at, d + size_, d + size_ + count);
    std::copy(first, last, d + at);
    size_ += static_cast<std::uint32_t>(count);
    return d + at;
  }
  iterator insert(const_iterator pos, std::initializer_list<T> values) {
    return insert(pos, values.begin(), values.end());
  }
  iterator insert(const_iterator pos, const T& value) {
    const T copy = value;
    return insert(pos, &copy, &copy + 1);
  }
  iterator erase(const_iterator first, const_iterator last) {
    T* d = data();
    const auto from = static_cast<size_type>(first - d);
    const auto to = static_cast<size_type>(last - d);
    std::copy(d + to, d + size_, d + from);
    size_ -= static_cast<std::uint32_t>(to - from);
    return d + from;
  }
  iterator erase(const_iterator pos) { return erase(pos, pos + 1); }

  friend bool operator==(const SmallVector& a, const SmallVector& b) {
    return std::equal(a.begin(), a.end(), b.begin(), b.end());
  }
  template <class Range>
  requires requires(const Range& r) { std::begin(r), std::end(r); }
  friend bool operator==(const SmallVector& a, const Range& b) {
    return std::equal(a.begin(), a.end(), std::begin(b), std::end(b));
  }

 private:
  template <class It>
  void append(It first, It last) {
    if constexpr (std::forward_iterator<It>)
      reserve(size_ + static_cast<size_type>(std::distance(first, last)));
    for (; first != last; ++first) push_back(*first);
  }
  void take(SmallVector& other) {
    size_ = other.size_;
    if (other.heap_) {
      heap_ = std::move(other.heap_);
      capacity_ = other.capacity_;
    } else {
      std::copy_n(other.in_place_, other.size_, in_place_);
    }
    other.size_ = 0;
    other.capacity_ = N;
  }

  std::uint32_t size_ = 0;
  std::uint32_t capacity_ = N;
  std::unique_ptr<T[]> heap_;
  T in_place_[N];  // the first size_ are the elements (when not on the heap)
};

}  // namespace vrambench

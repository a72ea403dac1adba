// A least-recently-used cache for built library plans (cuDNN graphs, cuBLASLt descriptors and
// algorithms): bounded, because a search visits many batch sizes and each would add entries. Pure
// host code, tested without a device.
#pragma once

#include <cstddef>
#include <functional>
#include <list>
#include <stdexcept>
#include <tuple>
#include <unordered_map>
#include <utility>

namespace vrambench::cuda {

// Least-recently-used map of at most `capacity` entries: built graphs hold device code and host
// memory, and a search visits many batch sizes, so the cache must not grow with the search.
template <typename Key, typename Value, typename Hash = std::hash<Key>>
class LruCache {
 public:
  explicit LruCache(std::size_t capacity) : capacity_(capacity) {
    if (capacity == 0) throw std::invalid_argument("LruCache: capacity must be at least 1");
  }
  // The entry for `key` (now the most recently used), or nullptr.
  Value* find(const Key& key) {
    auto it = index_.find(key);
    if (it == index_.end()) return nullptr;
    items_.splice(items_.begin(), items_, it->second);
    return &it->second->second;
  }
  // Inserts (or replaces) the entry for `key` as the most recently used, then drops the least
  // recently used entries beyond the capacity.
  Value& insert(const Key& key, Value value) {
    if (auto it = index_.find(key); it != index_.end()) {
      items_.erase(it->second);
      index_.erase(it);
    }
    items_.emplace_front(key, std::move(value));
    index_.emplace(key, items_.begin());
    while (items_.size() > capacity_) {
      index_.erase(items_.back().first);
      items_.pop_back();
    }
    return items_.front().second;
  }
  std::size_t size() const { return items_.size(); }
  std::size_t capacity() const { return capacity_; }

 private:
  using Items = std::list<std::pair<Key, Value>>;  // most recently used first
  std::size_t capacity_;
  Items items_;
  std::unordered_map<Key, typename Items::iterator, Hash> index_;
};

// Hash of a std::tuple (nested tuples included) from the std::hash of each element.
struct TupleHash {
  template <typename T>
  std::size_t operator()(const T& value) const {
    return std::hash<T>{}(value);
  }
  template <typename... Ts>
  std::size_t operator()(const std::tuple<Ts...>& value) const {
    std::size_t seed = 0;
    std::apply([&](const auto&... element) { ((seed = combine(seed, (*this)(element))), ...); },
               value);
    return seed;
  }

 private:
  static std::size_t combine(std::size_t seed, std::size_t h) {
    return seed ^ (h + 0x9E3779B97F4A7C15ull + (seed << 6) + (seed >> 2));
  }
};

}  // namespace vrambench::cuda

// A step's allocations and frees as a list of tokens, from the program's liveness or from the
// estimate's tensor events (estimate/walk.h), so that tests can hold the two together token for
// token.
#pragma once

#include <algorithm>
#include <cstddef>
#include <vector>

#include "estimate/walk.h"
#include "program/program.h"

namespace vrambench::testing_tokens {

// One allocation or free, by its bytes.
struct Token {
  bool alloc = false;
  Bytes bytes = 0;
  bool operator==(const Token&) const = default;
};

// The frees after one op come in no order that matters to the allocator: sorted by size.
inline void sort_free_runs(std::vector<Token>& tokens) {
  for (std::size_t i = 0; i < tokens.size();) {
    std::size_t j = i;
    while (j < tokens.size() && !tokens[j].alloc) ++j;
    std::sort(tokens.begin() + static_cast<std::ptrdiff_t>(i),
              tokens.begin() + static_cast<std::ptrdiff_t>(j),
              [](const Token& a, const Token& b) { return a.bytes < b.bytes; });
    i = j == i ? i + 1 : j;
  }
}

// The program's whole-step tensors in creation order (paged state aside: it is not device
// memory), then op by op what it allocates and what it frees.
inline std::vector<Token> program_tokens(const Program& program) {
  const Liveness live = compute_liveness(program);
  std::vector<Token> out;
  std::vector<int> persistent = live.persistent;
  std::sort(persistent.begin(), persistent.end());
  for (int id : persistent)
    if (program.tensor(id).role != Role::paged_optimizer_state)
      out.push_back({true, program.tensor(id).bytes});
  for (std::size_t i = 0; i < program.ops.size(); ++i) {
    for (int id : live.allocs_before[i]) out.push_back({true, program.tensor(id).bytes});
    for (int id : live.frees_after[i]) out.push_back({false, program.tensor(id).bytes});
  }
  sort_free_runs(out);
  return out;
}

// The estimate's events with their sizes at `batch`.
inline std::vector<Token> event_tokens(const estimate_walk::TensorEvents& events,
                                       std::int64_t batch) {
  std::vector<Token> out;
  std::vector<Bytes> bytes;
  for (const estimate_walk::TensorEvent& e : events) {
    const auto slot = static_cast<std::size_t>(e.slot);
    if (bytes.size() <= slot) bytes.resize(slot + 1);
    if (e.alloc) bytes[slot] = e.fixed + batch * e.per_sample;
    out.push_back({e.alloc, bytes[slot]});
  }
  sort_free_runs(out);
  return out;
}

// Where the two lists first differ: a's size when they agree so far (compare the sizes too).
inline std::size_t first_difference(const std::vector<Token>& a, const std::vector<Token>& b) {
  const auto [x, y] = std::mismatch(a.begin(), a.end(), b.begin(), b.end());
  return x == a.end() && y == b.end() ? a.size() : static_cast<std::size_t>(x - a.begin());
}

}  // namespace vrambench::testing_tokens

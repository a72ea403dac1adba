// Host storage for every tensor of a program, bound all at once, for the tests that hand an
// executor or the operand decoder its data (test_cpu_executor.cpp, test_operands.cpp).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "common/math.h"
#include "program/program.h"

namespace vrambench::test {

struct Memory {
  std::vector<std::vector<std::uint8_t>> bytes;
  std::vector<void*> data;  // data[id]: tensor id's bytes; nullptr for a tensor of none
  explicit Memory(const Program& p) {
    for (const Tensor& t : p.tensors) {
      bytes.emplace_back(static_cast<std::size_t>(t.bytes));
      data.push_back(t.bytes > 0 ? bytes.back().data() : nullptr);
    }
  }
  void* of(int id) const { return data[static_cast<std::size_t>(id)]; }
  // Element i of tensor id, read (written) through its dtype.
  float at(const Program& p, int id, std::int64_t i) const {
    return kmath::load(of(id), p.tensor(id).dtype, i);
  }
  void set(const Program& p, int id, std::int64_t i, float v) {
    kmath::store(of(id), p.tensor(id).dtype, i, v);
  }
};

}  // namespace vrambench::test

// The virtual SegmentSource (the sim device's, and the estimate's replay of the caching
// allocator): fake, increasing, 2 MiB-aligned addresses with no memory behind them, refused once
// the bytes handed out would pass the capacity. Declared here for the estimate's replay, which
// copies it with another capacity where a replay at the device's capacity parts from one without.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "alloc/allocator.h"

namespace vrambench {

class VirtualSource final : public SegmentSource {
 public:
  explicit VirtualSource(Bytes capacity);
  // The same segments, handed out up to `capacity` from now on.
  VirtualSource(const VirtualSource& other, Bytes capacity);

  std::optional<std::uintptr_t> allocate_segment(Bytes bytes) override;
  void free_segment(std::uintptr_t address, Bytes bytes) override;
  Bytes capacity() const override { return capacity_; }
  Bytes in_use() const override { return in_use_; }

 private:
  VirtualSource(const VirtualSource&) = default;

  Bytes capacity_;
  Bytes in_use_ = 0;
  std::uintptr_t next_address_;
  // Every segment handed out, in address order (addresses only increase), to catch bad frees;
  // a freed one keeps its place with no bytes.
  struct Segment {
    std::uintptr_t address;
    Bytes bytes;
  };
  std::vector<Segment> segments_;
  std::size_t next_freed_ = 0;  // the index after the segment freed last
};

}  // namespace vrambench

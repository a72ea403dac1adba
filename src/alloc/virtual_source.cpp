// The virtual SegmentSource (virtual_source.h).
#include "alloc/virtual_source.h"

#include <fmt/format.h>

#include <algorithm>
#include <source_location>
#include <string_view>
#include <vector>

#include "core/error.h"

namespace vrambench {
namespace {

// cudaMalloc returns addresses aligned to at least 256 B, and segments of large-page size on 2 MiB
// boundaries; aligning every fake segment to 2 MiB keeps the addresses looking like device ones
// and makes a block's offset inside its segment easy to read in a debugger.
constexpr Bytes kSegmentAlignment = 2 * MiB;
// First fake address: non-zero, so that 0 never names a segment (allocators use {0, 0} for the
// empty block of a zero-byte request), and high like a device pointer.
constexpr std::uintptr_t kFirstAddress = std::uintptr_t{0x7f00} << 32;

[[noreturn]] void fail(std::string_view what,
                       std::source_location where = std::source_location::current()) {
  throw InternalError(
      fmt::format("{}:{}: virtual segment source: {}", where.file_name(), where.line(), what));
}

}  // namespace

VirtualSource::VirtualSource(Bytes capacity) : capacity_(capacity), next_address_(kFirstAddress) {
  if (capacity < 0) fail(fmt::format("negative capacity {}", capacity));
}

VirtualSource::VirtualSource(const VirtualSource& other, Bytes capacity) : VirtualSource(other) {
  if (capacity < 0) fail(fmt::format("negative capacity {}", capacity));
  capacity_ = capacity;
}

std::optional<std::uintptr_t> VirtualSource::allocate_segment(Bytes bytes) {
  if (bytes <= 0) fail(fmt::format("segment of {} bytes requested", bytes));
  // Written as a subtraction so that a huge request cannot overflow in_use_ + bytes.
  if (bytes > capacity_ - in_use_) return std::nullopt;
  const std::uintptr_t address = next_address_;
  // bytes <= capacity, so the rounded advance fits in 64 bits; the address space of a 64-bit
  // uintptr_t is never exhausted by the number of trials a sweep runs.
  next_address_ += static_cast<std::uintptr_t>(round_up(bytes, kSegmentAlignment));
  segments_.push_back({address, bytes});
  in_use_ += bytes;
  return address;
}

void VirtualSource::free_segment(std::uintptr_t address, Bytes bytes) {
  // Allocators hand their segments back mostly in the order they took them: the one after the
  // last freed is looked at first.
  auto it = segments_.begin() + static_cast<std::ptrdiff_t>(next_freed_);
  if (next_freed_ >= segments_.size() || it->address != address)
    it = std::lower_bound(segments_.begin(), segments_.end(), address,
                          [](const Segment& s, std::uintptr_t a) { return s.address < a; });
  if (it == segments_.end() || it->address != address || it->bytes == 0)
    fail(fmt::format("free of unknown segment {:#x}", address));
  if (it->bytes != bytes) {
    fail(fmt::format("segment {:#x} holds {} bytes, freed as {}", address, it->bytes, bytes));
  }
  in_use_ -= bytes;
  it->bytes = 0;
  next_freed_ = static_cast<std::size_t>(it - segments_.begin()) + 1;
}

std::unique_ptr<SegmentSource> make_virtual_source(Bytes capacity) {
  return std::make_unique<VirtualSource>(capacity);
}

}  // namespace vrambench

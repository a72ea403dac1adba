// The `direct` policy: raw cudaMalloc/cudaFree, one segment per request and nothing cached, the
// baseline against which the caching allocator's rounding and fragmentation are measured.
#include <fmt/format.h>

#include <algorithm>
#include <source_location>
#include <string_view>
#include <unordered_map>

#include "alloc/allocator.h"
#include "core/error.h"

namespace vrambench {
namespace {

[[noreturn]] void fail(std::string_view what,
                       std::source_location where = std::source_location::current()) {
  throw InternalError(
      fmt::format("{}:{}: direct allocator: {}", where.file_name(), where.line(), what));
}

class DirectAllocator final : public Allocator {
 public:
  explicit DirectAllocator(SegmentSource& source) : source_(source) {}

  ~DirectAllocator() override {
    // Hand back what the caller still holds so the source is clean for the next allocator.
    for (const auto& [address, live] : live_)
      free_segment_quietly(source_, address, live.segment_bytes);
  }

  std::optional<Block> allocate(Bytes bytes) override {
    if (bytes < 0) fail(fmt::format("negative request of {} bytes", bytes));
    // cudaMalloc(0) returns a null pointer and reserves nothing; the empty block stands for it.
    if (bytes == 0) return Block{};
    // Rounding a request close to 2^63 would overflow; no source can serve it anyway.
    if (bytes > source_.capacity()) return std::nullopt;
    const Bytes segment_bytes = direct_segment_bytes(bytes);
    const auto address = source_.allocate_segment(segment_bytes);
    if (!address) return std::nullopt;
    live_.emplace(*address, Live{bytes, segment_bytes});
    ++stats_.segment_allocs;
    stats_.allocated += bytes;
    stats_.reserved += segment_bytes;
    stats_.allocated_peak = std::max(stats_.allocated_peak, stats_.allocated);
    stats_.reserved_peak = std::max(stats_.reserved_peak, stats_.reserved);
    return Block{*address, segment_bytes};
  }

  void free(const Block& block) override {
    if (block.size == 0 && block.address == 0) return;  // the empty block of a zero-byte request
    const auto it = live_.find(block.address);
    if (it == live_.end()) fail(fmt::format("free of unknown block {:#x}", block.address));
    if (it->second.segment_bytes != block.size) {
      fail(fmt::format("block {:#x} holds {} bytes, freed as {}", block.address,
                       it->second.segment_bytes, block.size));
    }
    // cudaFree returns the memory at once: there is no cache to hold it.
    source_.free_segment(block.address, block.size);
    stats_.allocated -= it->second.requested_bytes;
    stats_.reserved -= it->second.segment_bytes;
    live_.erase(it);
  }

  void release_cached() override {}  // nothing is ever cached

  const AllocStats& stats() const override { return stats_; }

  void reset_peaks() override { stats_.reset_peaks(); }

  Bytes free_bytes() const override { return source_.capacity() - source_.in_use(); }

 private:
  struct Live {
    Bytes requested_bytes;  // what the tensor asked for: counted in `allocated`
    Bytes segment_bytes;    // what the driver reserved: counted in `reserved`
  };

  SegmentSource& source_;
  AllocStats stats_;
  std::unordered_map<std::uintptr_t, Live> live_;
};

}  // namespace

std::unique_ptr<Allocator> make_direct_allocator(SegmentSource& source) {
  return std::make_unique<DirectAllocator>(source);
}

}  // namespace vrambench

// Host segments: aligned operator new/delete with a running total checked against the capacity.
#include <new>
#include <string>
#include <unordered_map>

#include "core/error.h"
#include "device/sources.h"

namespace vrambench {
namespace {

// 256 bytes matches cudaMalloc's alignment guarantee, so kernels see the same pointer alignment.
constexpr std::align_val_t kAlignment{256};

class HostSource final : public SegmentSource {
 public:
  explicit HostSource(Bytes capacity) : capacity_(capacity) {}
  HostSource(const HostSource&) = delete;
  HostSource& operator=(const HostSource&) = delete;
  ~HostSource() override {
    for (const auto& [address, bytes] : segments_)
      ::operator delete(reinterpret_cast<void*>(address), kAlignment);
  }

  std::optional<std::uintptr_t> allocate_segment(Bytes bytes) override {
    if (bytes < 0 || bytes > capacity_ - in_use_) return std::nullopt;
    // A zero-byte segment still needs a distinct address.
    void* p =
        ::operator new(static_cast<std::size_t>(bytes > 0 ? bytes : 1), kAlignment, std::nothrow);
    if (p == nullptr) return std::nullopt;
    const auto address = reinterpret_cast<std::uintptr_t>(p);
    segments_.emplace(address, bytes);
    in_use_ += bytes;
    return address;
  }

  void free_segment(std::uintptr_t address, Bytes bytes) override {
    const auto it = segments_.find(address);
    if (it == segments_.end() || it->second != bytes)
      throw InternalError("host source: free of a segment it did not hand out (" +
                          std::to_string(bytes) + " bytes)");
    ::operator delete(reinterpret_cast<void*>(address), kAlignment);
    in_use_ -= bytes;
    segments_.erase(it);
  }

  Bytes capacity() const override { return capacity_; }
  Bytes in_use() const override { return in_use_; }

 private:
  Bytes capacity_;
  Bytes in_use_ = 0;
  std::unordered_map<std::uintptr_t, Bytes> segments_;
};

}  // namespace

std::unique_ptr<SegmentSource> make_host_source(Bytes capacity) {
  return std::make_unique<HostSource>(capacity);
}

}  // namespace vrambench

// keep_freed_memory (heap.h).
#include "core/heap.h"

#include <cstdlib>  // defines __GLIBC__ under glibc
#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include "core/units.h"

namespace vrambench {

void keep_freed_memory() {
#if defined(__GLIBC__)
  // Blocks up to the largest threshold glibc takes (32 MiB on 64 bits) come from the heap rather
  // than a mapping of their own, and the heap's free top is kept up to 1 GiB. Setting either turns
  // off glibc's own adjustment of both, which would settle lower.
  mallopt(M_MMAP_THRESHOLD, static_cast<int>(32 * MiB));
  mallopt(M_TRIM_THRESHOLD, static_cast<int>(1 * GiB));
#endif
}

}  // namespace vrambench

// How the process's heap hands memory back to the kernel.
#pragma once

namespace vrambench {

// Keeps the memory this process frees for its own next allocations instead of returning it to the
// kernel. A search builds and drops step programs and replays of a few MiB each, hundreds of times
// a second: glibc's malloc gives freed blocks of that size back (trimming the top of the heap, or
// unmapping a block it mapped on its own), and every page of the next one faults in again, which
// cost a quarter of a sim search (docs/search.md, "Engine speed"). What the process holds is then
// its high-water mark, which it reaches anyway. The tool and the benchmarks call it first thing;
// elsewhere than glibc it does nothing.
void keep_freed_memory();

}  // namespace vrambench

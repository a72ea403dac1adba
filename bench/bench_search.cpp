// Speed of find_max_batch itself over synthetic predicates (fits(b) = b <= T), so that the search
// never dominates a sim sweep. Reports the trials per search as a counter.
#include <benchmark/benchmark.h>

#include <cstdint>

#include "search/search.h"

namespace vrambench {
namespace {

// state.range(0): true max batch T; state.range(1): hint as a percentage of T.
void BM_FindMaxBatch(benchmark::State& state) {
  const std::int64_t true_max = state.range(0);
  const std::int64_t hint = true_max * state.range(1) / 100;
  auto fits = [true_max](std::int64_t batch) { return batch <= true_max; };
  std::size_t trials = 0;
  for (auto _ : state) {
    const SearchResult result = find_max_batch(fits, hint);
    trials = result.trials.size();
    benchmark::DoNotOptimize(result.max_batch);
  }
  state.counters["trials"] = static_cast<double>(trials);
}
BENCHMARK(BM_FindMaxBatch)
    ->ArgNames({"T", "hint%"})
    ->ArgsProduct({{8, 300, 5000, 60000}, {50, 90, 100, 110, 200}});

// The worst case the limits allow: everything fits, from batch 1 to the default limit.
void BM_FindMaxBatchToLimit(benchmark::State& state) {
  auto fits = [](std::int64_t) { return true; };
  for (auto _ : state) benchmark::DoNotOptimize(find_max_batch(fits, 1).max_batch);
}
BENCHMARK(BM_FindMaxBatchToLimit);

}  // namespace
}  // namespace vrambench

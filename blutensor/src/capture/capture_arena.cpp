// Interval placement of a captured step's temporaries (Note [Step arena],
// blutensor/capture_arena.h).
#include <algorithm>
#include <numeric>
#include <utility>

#include "blutensor/capture_arena.h"
#include "blutensor/error.h"

namespace blu::capture {

ArenaPlan plan_arena(const std::vector<ArenaInterval>& intervals, std::size_t alignment) {
  BLU_CHECK(alignment > 0 && (alignment & (alignment - 1)) == 0, "capture::plan_arena: alignment ",
            alignment, " is not a power of two");
  const auto round_up = [alignment](std::size_t x) {
    return (x + alignment - 1) / alignment * alignment;
  };
  int end = -1;
  for (size_t i = 0; i < intervals.size(); ++i) {
    const ArenaInterval& v = intervals[i];
    BLU_CHECK(v.first >= 0 && v.first <= v.last, "capture::plan_arena: interval ", i,
              " has nodes [", v.first, ", ", v.last, "]");
    end = std::max(end, v.last);
  }
  ArenaPlan plan;
  plan.offsets.assign(intervals.size(), 0);
  std::vector<size_t> order(intervals.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    if (intervals[a].bytes != intervals[b].bytes) return intervals[a].bytes > intervals[b].bytes;
    return intervals[a].first < intervals[b].first;
  });
  std::vector<size_t> placed;
  std::vector<std::pair<std::size_t, std::size_t>> busy;  // [offset, end) of overlapping placed
  for (size_t i : order) {
    const ArenaInterval& v = intervals[i];
    const std::size_t size = round_up(v.bytes);
    plan.summed_bytes += size;
    busy.clear();
    for (size_t j : placed) {
      const ArenaInterval& o = intervals[j];
      if (o.first <= v.last && v.first <= o.last)
        busy.emplace_back(plan.offsets[j], plan.offsets[j] + round_up(o.bytes));
    }
    std::sort(busy.begin(), busy.end());
    std::size_t at = 0;
    for (const auto& [lo, hi] : busy) {
      if (at + size <= lo) break;
      at = std::max(at, hi);
    }
    plan.offsets[i] = at;
    plan.bytes = std::max(plan.bytes, at + size);
    placed.push_back(i);
  }
  // The lower bound: a sweep over the nodes of the sizes that start and end at each.
  std::vector<std::size_t> starts(static_cast<size_t>(end + 2), 0),
      ends(static_cast<size_t>(end + 2), 0);
  for (const ArenaInterval& v : intervals) {
    starts[static_cast<size_t>(v.first)] += round_up(v.bytes);
    ends[static_cast<size_t>(v.last) + 1] += round_up(v.bytes);
  }
  std::size_t live = 0;
  for (size_t t = 0; t + 1 < starts.size(); ++t) {
    live = live + starts[t] - ends[t];
    plan.lower_bound_bytes = std::max(plan.lower_bound_bytes, live);
  }
  return plan;
}

}  // namespace blu::capture

// Interval placement of a captured step's temporaries (Note [Step arena],
// blutensor/capture_arena.h), with in-place pairs (Note [In-place reuse]).
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
  // partners[i]: the intervals i shares an in-place pair with (at most one each way round).
  std::vector<std::vector<size_t>> partners(intervals.size());
  std::vector<char> gives(intervals.size(), 0);
  for (size_t i = 0; i < intervals.size(); ++i) {
    const ArenaInterval& v = intervals[i];
    BLU_CHECK(v.first >= 0 && v.first <= v.last, "capture::plan_arena: interval ", i,
              " has nodes [", v.first, ", ", v.last, "]");
    end = std::max(end, v.last);
    if (v.inplace_of < 0) continue;
    const auto j = static_cast<size_t>(v.inplace_of);
    BLU_CHECK(j < intervals.size() && j != i && intervals[j].last == v.first,
              "capture::plan_arena: interval ", i, " [", v.first, ", ", v.last,
              "] cannot take the bytes of interval ", v.inplace_of,
              j < intervals.size() && j != i ? " (its last node is not this one's first)" : "");
    BLU_CHECK(!gives[j], "capture::plan_arena: interval ", j,
              " gives its bytes in place to two intervals");
    gives[j] = 1;
    partners[i].push_back(j);
    partners[j].push_back(i);
  }
  ArenaPlan plan;
  plan.offsets.assign(intervals.size(), 0);
  std::vector<size_t> order(intervals.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    if (intervals[a].bytes != intervals[b].bytes) return intervals[a].bytes > intervals[b].bytes;
    return intervals[a].first < intervals[b].first;
  });
  std::vector<char> is_placed(intervals.size(), 0);
  std::vector<size_t> placed;
  std::vector<std::pair<std::size_t, std::size_t>> busy;  // [offset, end) of overlapping placed
  // Whether v fits at `at` beside the placed intervals live with it, `partner` (an in-place
  // partner placed at `at`) excepted.
  const auto fits = [&](const ArenaInterval& v, std::size_t at, std::size_t size, size_t partner) {
    for (size_t j : placed) {
      const ArenaInterval& o = intervals[j];
      if (j == partner || !(o.first <= v.last && v.first <= o.last)) continue;
      if (at < plan.offsets[j] + round_up(o.bytes) && plan.offsets[j] < at + size) return false;
    }
    return true;
  };
  for (size_t i : order) {
    const ArenaInterval& v = intervals[i];
    const std::size_t size = round_up(v.bytes);
    plan.summed_bytes += size;
    bool done = false;
    for (size_t p : partners[i]) {
      if (!is_placed[p] || !fits(v, plan.offsets[p], size, p)) continue;
      plan.offsets[i] = plan.offsets[p];
      ++plan.inplace_pairs;
      done = true;
      break;
    }
    if (!done) {
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
    }
    plan.bytes = std::max(plan.bytes, plan.offsets[i] + size);
    placed.push_back(i);
    is_placed[i] = 1;
  }
  // The lower bound: a sweep over the nodes of the sizes that start and end at each; an in-place
  // pair at its node needs only the larger of its two sizes.
  std::vector<std::size_t> starts(static_cast<size_t>(end + 2), 0),
      ends(static_cast<size_t>(end + 2), 0), shared(static_cast<size_t>(end + 2), 0);
  for (const ArenaInterval& v : intervals) {
    starts[static_cast<size_t>(v.first)] += round_up(v.bytes);
    ends[static_cast<size_t>(v.last) + 1] += round_up(v.bytes);
    if (v.inplace_of >= 0)
      shared[static_cast<size_t>(v.first)] +=
          std::min(round_up(v.bytes), round_up(intervals[static_cast<size_t>(v.inplace_of)].bytes));
  }
  std::size_t live = 0;
  for (size_t t = 0; t + 1 < starts.size(); ++t) {
    live = live + starts[t] - ends[t];
    plan.lower_bound_bytes = std::max(plan.lower_bound_bytes, live - shared[t]);
  }
  return plan;
}

}  // namespace blu::capture

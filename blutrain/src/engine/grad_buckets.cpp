// grad_buckets.cpp: the bucket plan of the fused step's gradient all-reduce (Note [Gradient
// buckets of the fused step] in grad_buckets.h).
#include "engine/grad_buckets.h"

#include <algorithm>
#include <cstdio>

#include "blutensor/error.h"

namespace blu::train {

std::vector<GradBucket> plan_grad_buckets(const std::vector<GradRange>& units, std::size_t target_elems) {
  BLU_CHECK(target_elems >= 1, "gradient buckets: the target size must be at least one element");
  std::vector<GradBucket> out;
  for (size_t k = 0; k < units.size(); ++k) {
    const GradRange& u = units[k];
    BLU_CHECK(u.end > u.begin, "gradient buckets: ready unit ", k, " [", u.begin, ", ", u.end, ") is empty");
    BLU_CHECK(k == 0 || u.end == units[k - 1].begin, "gradient buckets: ready unit ", k, " [", u.begin, ", ", u.end,
              ") does not end where unit ", k - 1, " begins (", units[k - 1].begin,
              "): the backward must finalise the flat buffer from its end to its start");
    const bool open = !out.empty() && out.back().range.size() < target_elems;
    if (open) {
      out.back().range.begin = u.begin;
      out.back().last_unit = static_cast<int>(k);
    } else {
      GradBucket b;
      b.range = u;
      b.first_unit = b.last_unit = static_cast<int>(k);
      out.push_back(b);
    }
  }
  return out;
}

std::string describe_grad_buckets(const std::vector<GradBucket>& buckets) {
  if (buckets.empty()) return "no gradient buckets";
  std::size_t lo = buckets.front().range.size(), hi = lo;
  for (const GradBucket& b : buckets) {
    lo = std::min(lo, b.range.size());
    hi = std::max(hi, b.range.size());
  }
  char buf[128];
  std::snprintf(buf, sizeof(buf), "%zu gradient bucket(s) of %.1f .. %.1f MB", buckets.size(), lo * 4 / 1e6,
                hi * 4 / 1e6);
  return buf;
}

}  // namespace blu::train

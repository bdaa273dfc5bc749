// grad_buckets_test.cpp: the bucket plan of the fused step's data-parallel gradient all-reduce
// (Note [Gradient buckets of the fused step]): buckets cover the flat buffer exactly once, in
// backward order, each launched at its last unit's ready point, sizes near the target; layouts
// the backward cannot produce are clear errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstddef>
#include <cstdio>
#include <string>
#include <vector>

#include "blutensor/error.h"

#include "../../blutrain/src/engine/grad_buckets.h"

using blu::train::GradBucket;
using blu::train::GradRange;
using blu::train::plan_grad_buckets;

namespace {

std::size_t pad64(std::size_t n) { return (n + 63) / 64 * 64; }

// The fused step's ready units for a GPT-2 layout (Note [Gradient buckets of the fused step]):
// flat = wte, wpe, h.0 .. h.{L-1}, ln_f (each parameter padded to 64 elements); units in backward
// order: ln_f, h.{L-1} .. h.0, wte + wpe.
std::vector<GradRange> gpt2_units(int n_layer, std::size_t C, std::size_t vocab, std::size_t ctx) {
  const std::size_t embed = pad64(vocab * C) + pad64(ctx * C);
  const std::size_t block = 4 * pad64(C) + pad64(3 * C * C) + pad64(3 * C) + pad64(C * C) + pad64(C) +
                            pad64(4 * C * C) + pad64(4 * C) + pad64(4 * C * C) + pad64(C);
  const std::size_t lnf_begin = embed + static_cast<std::size_t>(n_layer) * block;
  std::vector<GradRange> units;
  units.push_back({lnf_begin, lnf_begin + 2 * pad64(C)});
  for (int l = n_layer - 1; l >= 0; --l) {
    const std::size_t b = embed + static_cast<std::size_t>(l) * block;
    units.push_back({b, b + block});
  }
  units.push_back({0, embed});
  return units;
}

// Every element of [0, total) in exactly one bucket; buckets in decreasing address order
// (backward order), adjacent; last units strictly increasing and ending at the final unit.
void expect_exact_cover(const std::vector<GradBucket>& buckets, const std::vector<GradRange>& units) {
  ASSERT_FALSE(buckets.empty());
  const std::size_t total = units.front().end;
  if (total <= (std::size_t(1) << 22)) {  // element by element where cheap; else the adjacency below
    std::vector<int> covered(total, 0);
    for (const GradBucket& b : buckets) {
      for (std::size_t i = b.range.begin; i < b.range.end; ++i) ++covered[i];
    }
    for (std::size_t i = 0; i < total; ++i) ASSERT_EQ(covered[i], 1) << "element " << i;
  }
  for (const GradBucket& b : buckets) EXPECT_GT(b.range.size(), 0u);
  EXPECT_EQ(buckets.front().range.end, total);
  EXPECT_EQ(buckets.back().range.begin, 0u);
  EXPECT_EQ(buckets.front().first_unit, 0);
  EXPECT_EQ(buckets.back().last_unit, static_cast<int>(units.size()) - 1);
  for (size_t k = 0; k < buckets.size(); ++k) {
    const GradBucket& b = buckets[k];
    EXPECT_EQ(b.range.begin, units[static_cast<size_t>(b.last_unit)].begin) << "bucket " << k;
    EXPECT_EQ(b.range.end, units[static_cast<size_t>(b.first_unit)].end) << "bucket " << k;
    if (k > 0) {
      EXPECT_EQ(b.range.end, buckets[k - 1].range.begin) << "bucket " << k << " is not adjacent";
      EXPECT_EQ(b.first_unit, buckets[k - 1].last_unit + 1) << "bucket " << k;
    }
  }
}

}  // namespace

TEST(GradBuckets, Gpt2SmallAt25MiBIsOneBucketPerBlockAndTheEmbeddingLast) {
  const std::vector<GradRange> units = gpt2_units(12, 768, 50304, 1024);
  const std::size_t target = (std::size_t(25) << 20) / 4;
  const std::vector<GradBucket> buckets = plan_grad_buckets(units, target);
  expect_exact_cover(buckets, units);
  // ln_f (6 KB) joins h.11; every block alone (28.3 MB > 25 MiB); wte + wpe last.
  ASSERT_EQ(buckets.size(), 13u);
  EXPECT_EQ(buckets[0].first_unit, 0);
  EXPECT_EQ(buckets[0].last_unit, 1);
  for (int k = 1; k < 12; ++k) EXPECT_EQ(buckets[static_cast<size_t>(k)].last_unit, k + 1);
  EXPECT_EQ(buckets.back().first_unit, 13);
  EXPECT_EQ(buckets.back().range.size(), units.back().size());
  std::printf("%s\n", blu::train::describe_grad_buckets(buckets).c_str());
}

TEST(GradBuckets, SizesStayNearTheTarget) {
  // A small model, many targets: every bucket but the last holds at least the target and less
  // than the target plus the largest unit; no bucket could have closed a unit earlier.
  const std::vector<GradRange> units = gpt2_units(6, 128, 1000, 64);
  std::size_t largest = 0;
  for (const GradRange& u : units) largest = std::max(largest, u.size());
  for (std::size_t target : {std::size_t{1}, std::size_t{1000}, std::size_t{50000}, std::size_t{200000},
                             std::size_t{10000000}}) {
    const std::vector<GradBucket> buckets = plan_grad_buckets(units, target);
    expect_exact_cover(buckets, units);
    for (size_t k = 0; k + 1 < buckets.size(); ++k) {
      const GradBucket& b = buckets[k];
      EXPECT_GE(b.range.size(), target) << "target " << target << " bucket " << k;
      EXPECT_LT(b.range.size(), target + largest) << "target " << target << " bucket " << k;
      // Closed at the first unit that reached the target.
      const std::size_t before_last = b.range.size() - units[static_cast<size_t>(b.last_unit)].size();
      EXPECT_TRUE(b.first_unit == b.last_unit || before_last < target) << "target " << target << " bucket " << k;
    }
    if (target == 1) {
      EXPECT_EQ(buckets.size(), units.size());
    }
    if (target == 10000000) {
      EXPECT_EQ(buckets.size(), 1u);
    }
  }
}

TEST(GradBuckets, OddUnitSizesAndOneUnit) {
  std::vector<GradRange> units = {{90, 97}, {13, 90}, {12, 13}, {0, 12}};
  std::vector<GradBucket> b = plan_grad_buckets(units, 10);
  expect_exact_cover(b, units);
  ASSERT_EQ(b.size(), 2u);
  EXPECT_EQ(b[0].range.begin, 13u);  // 7 < 10, then 7 + 77
  EXPECT_EQ(b[1].range.begin, 0u);   // 1 + 12
  std::vector<GradRange> one = {{0, 5}};
  b = plan_grad_buckets(one, 100);
  ASSERT_EQ(b.size(), 1u);
  EXPECT_EQ(b[0].range.size(), 5u);
}

TEST(GradBuckets, LayoutsTheBackwardCannotProduceAreErrors) {
  auto error_of = [](const std::vector<GradRange>& units, std::size_t target) {
    try {
      plan_grad_buckets(units, target);
    } catch (const blu::Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  // A gap between units (forward order, or a parameter outside every unit).
  EXPECT_NE(error_of({{10, 20}, {0, 9}}, 4).find("does not end where unit 0 begins"), std::string::npos);
  EXPECT_NE(error_of({{0, 10}, {10, 20}}, 4).find("from its end to its start"), std::string::npos);
  EXPECT_NE(error_of({{10, 20}, {10, 10}}, 4).find("ready unit 1 [10, 10) is empty"), std::string::npos);
  EXPECT_NE(error_of({{0, 10}}, 0).find("at least one element"), std::string::npos);
}

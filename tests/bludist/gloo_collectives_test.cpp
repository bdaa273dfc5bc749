// The Gloo backend's collectives on 2-4 CPU ranks (threads of this process), against results
// computed by hand in float64: all_reduce sum/avg/max/min (f32, f64, bf16, i64), reduce_scatter,
// all_gather, broadcast, send/recv (plain and grouped ring), barrier, sub-groups and a 2x2 mesh,
// Tensor forms and their error messages. Odd sizes, never zeros.
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>

#include "bludist/process_group.h"
#include "blutensor/error.h"
#include "blutensor/ops.h"
#include "support/require_gloo.h"
#include "support/thread_ranks.h"

using namespace bludist;
using bludist::test::run_gloo_ranks;
using bludist::test::test_value;

namespace {
constexpr std::size_t kCount = 1237;  // odd, more than one Gloo segment for f64? no matter: odd

float expected_reduce(ReduceOp op, int n, std::size_t i, int salt) {
  double acc = op == ReduceOp::kMax ? -1e300 : op == ReduceOp::kMin ? 1e300 : 0.0;
  for (int r = 0; r < n; ++r) {
    double v = static_cast<float>(test_value(r, i, salt));
    if (op == ReduceOp::kMax) acc = std::max(acc, v);
    else if (op == ReduceOp::kMin) acc = std::min(acc, v);
    else acc += v;
  }
  if (op == ReduceOp::kAvg) acc /= n;
  return static_cast<float>(acc);
}
}  // namespace

class GlooRanks : public ::testing::TestWithParam<int> {};

TEST_P(GlooRanks, AllReduceF32AllOps) {
  BLUDIST_REQUIRE_GLOO();
  const int n = GetParam();
  run_gloo_ranks(n, [&](ProcessGroup& pg) {
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax, ReduceOp::kMin}) {
      std::vector<float> buf(kCount);
      for (std::size_t i = 0; i < kCount; ++i) buf[i] = static_cast<float>(test_value(pg.rank(), i, int(op)));
      pg.all_reduce(buf.data(), kCount, DType::F32, op);
      for (std::size_t i = 0; i < kCount; ++i) {
        float want = expected_reduce(op, n, i, int(op));
        ASSERT_NEAR(buf[i], want, 1e-6f * (1 + std::fabs(want)) * n)
            << reduce_op_name(op) << " rank " << pg.rank() << " i " << i;
      }
    }
  });
}

TEST_P(GlooRanks, AllReduceF64I64Bf16) {
  BLUDIST_REQUIRE_GLOO();
  const int n = GetParam();
  run_gloo_ranks(n, [&](ProcessGroup& pg) {
    std::vector<double> d(kCount);
    std::vector<int64_t> k(kCount);
    for (std::size_t i = 0; i < kCount; ++i) {
      d[i] = test_value(pg.rank(), i);
      k[i] = static_cast<int64_t>(i) * (pg.rank() + 3) - 7;
    }
    pg.all_reduce(d.data(), kCount, DType::F64, ReduceOp::kSum);
    pg.all_reduce(k.data(), kCount, DType::I64, ReduceOp::kSum);
    for (std::size_t i = 0; i < kCount; ++i) {
      double want = 0;
      int64_t want_k = 0;
      for (int r = 0; r < n; ++r) {
        want += test_value(r, i);
        want_k += static_cast<int64_t>(i) * (r + 3) - 7;
      }
      ASSERT_NEAR(d[i], want, 1e-12 * (1 + std::fabs(want)));
      ASSERT_EQ(k[i], want_k);
    }
    // bf16 through a Tensor: values exactly representable, sums exact in bf16.
    blu::Tensor t = blu::full({37}, 0.5 * (pg.rank() + 1), blu::kBFloat16);
    pg.all_reduce(t, ReduceOp::kSum);
    double want = 0.5 * n * (n + 1) / 2.0;
    for (double v : t.to_double_vector()) ASSERT_EQ(v, want);
  });
}

TEST_P(GlooRanks, ReduceScatterAllGatherBroadcast) {
  BLUDIST_REQUIRE_GLOO();
  const int n = GetParam();
  run_gloo_ranks(n, [&](ProcessGroup& pg) {
    const std::size_t chunk = 101;
    std::vector<float> in(chunk * n), out(chunk, -999.f);
    for (std::size_t i = 0; i < in.size(); ++i) in[i] = static_cast<float>(test_value(pg.rank(), i, 5));
    pg.reduce_scatter(out.data(), in.data(), chunk, DType::F32, ReduceOp::kAvg);
    for (std::size_t i = 0; i < chunk; ++i) {
      float want = expected_reduce(ReduceOp::kAvg, n, pg.rank() * chunk + i, 5);
      ASSERT_NEAR(out[i], want, 1e-6f * (1 + std::fabs(want)) * n) << i;
    }
    std::vector<double> mine(chunk), all(chunk * n, -999.0);
    for (std::size_t i = 0; i < chunk; ++i) mine[i] = test_value(pg.rank(), i, 6);
    pg.all_gather(all.data(), mine.data(), chunk, DType::F64);
    for (int r = 0; r < n; ++r)
      for (std::size_t i = 0; i < chunk; ++i) ASSERT_EQ(all[r * chunk + i], test_value(r, i, 6));
    // In place: the input is this rank's own slot of the output.
    std::vector<double> inplace(chunk * n, -1.0);
    for (std::size_t i = 0; i < chunk; ++i) inplace[pg.rank() * chunk + i] = test_value(pg.rank(), i, 7);
    pg.all_gather(inplace.data(), inplace.data() + pg.rank() * chunk, chunk, DType::F64);
    for (int r = 0; r < n; ++r)
      for (std::size_t i = 0; i < chunk; ++i) ASSERT_EQ(inplace[r * chunk + i], test_value(r, i, 7));
    for (int root = 0; root < n; ++root) {
      std::vector<float> b(333);
      for (std::size_t i = 0; i < b.size(); ++i) b[i] = static_cast<float>(test_value(pg.rank(), i, 8 + root));
      pg.broadcast(b.data(), b.size(), DType::F32, root);
      for (std::size_t i = 0; i < b.size(); ++i) ASSERT_EQ(b[i], static_cast<float>(test_value(root, i, 8 + root)));
    }
  });
}

TEST_P(GlooRanks, SendRecvAndGroupedRing) {
  BLUDIST_REQUIRE_GLOO();
  const int n = GetParam();
  run_gloo_ranks(n, [&](ProcessGroup& pg) {
    const int right = (pg.rank() + 1) % n, left = (pg.rank() + n - 1) % n;
    // Plain pairs: even ranks send first, odd ranks receive first (no deadlock without groups).
    std::vector<float> mine(257), got(257, -5.f);
    for (std::size_t i = 0; i < mine.size(); ++i) mine[i] = static_cast<float>(test_value(pg.rank(), i, 9));
    if (n % 2 == 0) {
      if (pg.rank() % 2 == 0) {
        pg.send(mine.data(), mine.size(), DType::F32, right);
        pg.recv(got.data(), got.size(), DType::F32, left);
      } else {
        pg.recv(got.data(), got.size(), DType::F32, left);
        pg.send(mine.data(), mine.size(), DType::F32, right);
      }
      for (std::size_t i = 0; i < got.size(); ++i) ASSERT_EQ(got[i], static_cast<float>(test_value(left, i, 9)));
    }
    // Ring exchange in a group, three rounds (sequence numbers per peer keep rounds apart).
    for (int round = 0; round < 3; ++round) {
      std::fill(got.begin(), got.end(), -5.f);
      for (std::size_t i = 0; i < mine.size(); ++i) mine[i] = static_cast<float>(test_value(pg.rank(), i, 10 + round));
      pg.group_start();
      pg.send(mine.data(), mine.size(), DType::F32, right);
      pg.recv(got.data(), got.size(), DType::F32, left);
      pg.group_end();
      for (std::size_t i = 0; i < got.size(); ++i)
        ASSERT_EQ(got[i], static_cast<float>(test_value(left, i, 10 + round))) << "round " << round;
    }
    pg.barrier();
  });
}

INSTANTIATE_TEST_SUITE_P(Ranks, GlooRanks, ::testing::Values(2, 3, 4));

TEST(GlooGroups, SubGroupsAndMesh2x2) {
  BLUDIST_REQUIRE_GLOO();
  run_gloo_ranks(4, [&](ProcessGroup& pg) {
    // Odd and even ranks form two groups; rank order in the list sets the sub-rank.
    auto evens = pg.new_group({2, 0});
    auto odds = pg.new_group({1, 3});
    auto mine = pg.rank() % 2 == 0 ? evens : odds;
    ASSERT_TRUE(mine);
    EXPECT_FALSE(pg.rank() % 2 == 0 ? odds : evens);
    EXPECT_EQ(mine->size(), 2);
    if (pg.rank() == 2) {
      EXPECT_EQ(mine->rank(), 0);
    }
    std::vector<double> v = {static_cast<double>(pg.rank()) + 0.5};
    mine->all_reduce(v.data(), 1, DType::F64, ReduceOp::kSum);
    EXPECT_EQ(v[0], pg.rank() % 2 == 0 ? 0.5 + 2.5 : 1.5 + 3.5);
    // The world group still works after making sub-groups.
    std::vector<float> w = {1.25f};
    pg.all_reduce(w.data(), 1, DType::F32, ReduceOp::kSum);
    EXPECT_EQ(w[0], 5.0f);
    Mesh2D m = make_mesh_2d(pg, 2, 2);
    EXPECT_EQ(m.row, pg.rank() / 2);
    EXPECT_EQ(m.col, pg.rank() % 2);
    std::vector<double> r = {std::pow(10.0, pg.rank())}, c = r;
    m.row_group->all_reduce(r.data(), 1, DType::F64, ReduceOp::kSum);
    m.col_group->all_reduce(c.data(), 1, DType::F64, ReduceOp::kSum);
    EXPECT_EQ(r[0], m.row == 0 ? 11.0 : 1100.0);
    EXPECT_EQ(c[0], m.col == 0 ? 101.0 : 1010.0);
  });
}

TEST(GlooGroups, TensorFormsCheckTheirArguments) {
  BLUDIST_REQUIRE_GLOO();
  run_gloo_ranks(2, [&](ProcessGroup& pg) {
    blu::Tensor out = blu::zeros({3, 5});
    blu::Tensor in = blu::arange(30.0).reshape({2, 3, 5}) + 0.5 * (pg.rank() + 1);
    pg.reduce_scatter(out, in, ReduceOp::kSum);
    std::vector<double> o = out.to_double_vector();
    for (int i = 0; i < 15; ++i) ASSERT_EQ(o[i], 2.0 * (pg.rank() * 15 + i) + 1.5);
    blu::Tensor gathered = blu::zeros({2, 3, 5});
    pg.all_gather(gathered, out);
    // Errors: wrong sizes, non-contiguous, wrong dtype. Every rank throws before communicating.
    try {
      pg.all_gather(blu::zeros({7}), out);
      ADD_FAILURE() << "size mismatch accepted";
    } catch (const blu::Error& e) {
      EXPECT_NE(std::string(e.what()).find("all_gather"), std::string::npos) << e.what();
    }
    EXPECT_THROW(pg.all_reduce(blu::zeros({4, 6}).t()), blu::Error);
    EXPECT_THROW(pg.reduce_scatter(blu::zeros({15}, blu::kFloat64), in), blu::Error);
    EXPECT_THROW(pg.all_reduce(blu::zeros({3}, blu::kFloat16)), blu::Error);
  });
}

TEST(GlooGroups, DeadPeerFailsWithAClearErrorInsteadOfHanging) {
  BLUDIST_REQUIRE_GLOO();
  auto t0 = std::chrono::steady_clock::now();
  std::atomic<int> errors{0};
  std::string message;
  std::mutex mu;
  try {
    run_gloo_ranks(2, [&](ProcessGroup& pg) {
      std::vector<float> v(10, 1.0f);
      pg.all_reduce(v.data(), v.size(), DType::F32, ReduceOp::kSum);
      if (pg.rank() == 1) return;  // rank 1 leaves; its group is destroyed (sockets close)
      try {
        pg.all_reduce(v.data(), v.size(), DType::F32, ReduceOp::kSum);
      } catch (const blu::Error& e) {
        ++errors;
        std::lock_guard<std::mutex> lock(mu);
        message = e.what();
      }
    }, std::chrono::seconds(5), /*final_barrier=*/false);  // rank 1 leaves on purpose
  } catch (const std::exception& e) {
    ADD_FAILURE() << e.what();
  }
  EXPECT_EQ(errors.load(), 1);
  EXPECT_NE(message.find("all_reduce"), std::string::npos) << message;
  EXPECT_NE(message.find("rank 0"), std::string::npos) << message;
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(30));
}

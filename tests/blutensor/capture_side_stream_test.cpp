// capture_side_stream_test.cpp: Note [Side stream] (src/capture/capture_side_stream.cpp) on
// hand-built records of a CUDA step (planning needs no GPU): which calls go to the side stream,
// where the main stream forks and joins them, and how long what they touch must live.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "blutensor/capture.h"
#include "common/scoped_env.h"
#include "support/capture_record.h"

namespace {

using blu::Device;
using blu::capture::Graph;
using blu::capture::SidePlan;
using blu::capture::side_stream_plan;

// A record under construction: buffers and calls reading / writing them.
struct Record {
  Graph g;
  Device dev = Device::cuda(0);
  int buffer() { return blu::test::add_buffer(g, dev, 256); }
  int call(const std::string& op, std::vector<int> reads, std::vector<int> writes) {
    blu::capture::Node n;
    n.op = op;
    n.device = dev;
    auto arg = [&](int b, bool read, bool write) {
      std::string name = "t";  // ("t" + to_string trips GCC 12's -Wrestrict false positive)
      name += std::to_string(n.args.size());
      n.args.push_back(blu::test::tensor_arg(name, b, read, write, blu::DType::F32, {64}));
    };
    for (int b : reads) arg(b, true, false);
    for (int b : writes) arg(b, false, true);
    g.nodes.push_back(n);
    return static_cast<int>(g.nodes.size()) - 1;
  }
  // `count` main-stream calls that touch only a buffer of their own.
  void filler(int count) {
    for (int k = 0; k < count; ++k) {
      const int b = buffer();
      call("fill", {}, {b});
    }
  }
  // Two groups in flight unless asked otherwise: the general plan (Executables default to one).
  // chains: Note [Side chains] (the tests below it are the gap rule's alone).
  SidePlan plan(const std::vector<int>& override_of = {}, int in_flight = 2, bool chains = false) const {
    return side_stream_plan(g, override_of, in_flight, chains);
  }
};

// One linear layer's backward as the record holds it, then the optimizer tail.
TEST(CaptureSideStream, WeightGradientsForkAndJoinAtTheFirstConflict) {
  Record r;
  const int w = r.buffer(), x = r.buffer(), act = r.buffer(), dy = r.buffer(), dx = r.buffer(),
            gw = r.buffer(), gb = r.buffer(), norm = r.buffer(), d2 = r.buffer(), e = r.buffer();
  r.call("gemm", {x, w}, {act});          // 0 forward
  r.call("binary", {act}, {dy});          // 1 the gradient coming down
  r.call("gemm", {dy, w}, {dx});          // 2 dX: read at 5, main
  r.call("gemm", {dy, x}, {gw});          // 3 dW: next read at 10, side: forks group 0
  r.call("reduce", {dy}, {gb});           // 4 bias gradient: side, same group
  r.call("binary", {dx}, {d2});           // 5 main, no conflict: overlaps the group
  r.call("binary", {d2}, {e});            // 6 main (read at 9)
  r.filler(2);                            // 7-8
  r.call("binary", {e}, {dy});            // 9 writes dy, which the group reads: joins before it
  r.call("global_norm", {gw, gb}, {norm});  // 10 main (its result is read at once)
  r.call("host_read", {norm}, {});          // 11
  r.call("adamw_step", {gw, gb}, {w});      // 12 writes what nothing reads again: main
  const SidePlan p = r.plan();
  std::vector<int> want(13, -1);
  want[3] = want[4] = 0;
  EXPECT_EQ(p.group_of, want);
  EXPECT_EQ(p.fork_at, (std::vector<int>{3}));
  EXPECT_EQ(p.join_before, (std::vector<int>{9}));
  EXPECT_EQ(p.side_calls, 2u);
  EXPECT_EQ(p.extend_to[static_cast<size_t>(dy)], 9);  // read by group 0: lives to its join
  EXPECT_EQ(p.extend_to[static_cast<size_t>(x)], 9);
  EXPECT_EQ(p.extend_to[static_cast<size_t>(gw)], 9);
  EXPECT_EQ(p.extend_to[static_cast<size_t>(dx)], -1);  // no group touches it
  EXPECT_EQ(p.extend_to[static_cast<size_t>(act)], -1);
  // The dW waits for dy's writer (1), not for the dX GEMM before it (2): they overlap. What the
  // group writes lives from there on.
  EXPECT_EQ(p.ready_after, (std::vector<int>{1}));
  EXPECT_EQ(p.start_from[static_cast<size_t>(gw)], 2);
  EXPECT_EQ(p.start_from[static_cast<size_t>(gb)], 2);
  EXPECT_EQ(p.start_from[static_cast<size_t>(dx)], -1);
}

// A main launch between the writer of the group's inputs and the fork that touches what the
// group writes (here: reads the old value of its output) is waited for as well; a group whose
// inputs come from before the step waits for the step's start.
TEST(CaptureSideStream, TheGroupWaitsForTheLastConflictingLaunchBeforeIt) {
  Record r;
  const int x = r.buffer(), y = r.buffer(), g = r.buffer(), t = r.buffer(), u = r.buffer(), s = r.buffer();
  r.call("binary", {x}, {y});     // 0 writes y
  r.call("binary", {g}, {t});     // 1 reads g (the group will write g); t is an output
  r.call("binary", {x}, {u});     // 2 unrelated (an output too)
  r.call("gemm", {y}, {g});       // 3 side (g next read at 8)
  r.filler(4);                    // 4-7
  r.call("binary", {g}, {s});     // 8
  r.call("host_read", {s}, {});
  const SidePlan p = r.plan();
  EXPECT_EQ(p.fork_at, (std::vector<int>{3}));
  EXPECT_EQ(p.ready_after, (std::vector<int>{1}));
  EXPECT_EQ(p.start_from[static_cast<size_t>(g)], 2);

  Record q;
  const int w = q.buffer(), gw = q.buffer(), o = q.buffer();
  q.call("gemm", {w}, {gw});  // 0 side: reads only what the step started with
  q.filler(4);
  q.call("binary", {gw}, {o});
  q.call("host_read", {o}, {});
  const SidePlan pq = q.plan();
  EXPECT_EQ(pq.fork_at, (std::vector<int>{0}));
  EXPECT_EQ(pq.ready_after, (std::vector<int>{-1}));
  EXPECT_EQ(pq.start_from[static_cast<size_t>(gw)], 0);
}

TEST(CaptureSideStream, AReaderOfWhatTheGroupWritesJoinsIt) {
  Record r;
  const int dy = r.buffer(), x = r.buffer(), gw = r.buffer(), t = r.buffer(), norm = r.buffer();
  r.call("fill", {}, {dy});
  r.call("gemm", {dy, x}, {gw});  // 1 side
  r.call("binary", {dy}, {t});    // 2 main, reads what the group reads: no conflict
  r.filler(2);                    // 3-4
  r.call("global_norm", {gw}, {norm});  // 5 reads gw: joins before it
  r.call("host_read", {norm}, {});
  const SidePlan p = r.plan();
  EXPECT_EQ(p.group_of, (std::vector<int>{-1, 0, -1, -1, -1, -1, -1}));
  EXPECT_EQ(p.join_before, (std::vector<int>{5}));
  EXPECT_EQ(p.extend_to[static_cast<size_t>(dy)], 5);
}

TEST(CaptureSideStream, TheNextForkJoinsTheGroupInFlight) {
  Record r;
  const int a = r.buffer(), b = r.buffer(), g1 = r.buffer(), g2 = r.buffer(), c = r.buffer(),
            sum = r.buffer();
  r.call("fill", {}, {a});
  r.call("gemm", {a}, {g1});   // 1 group 0
  r.call("binary", {a}, {b});  // 2 main
  r.call("gemm", {b}, {g2});   // 3 group 1: group 0 joined here (one group in flight)
  r.call("binary", {b}, {c});  // 4 main
  r.filler(3);                 // 5-7
  r.call("binary", {g1, g2}, {sum});  // 8 joins group 1
  r.call("host_read", {sum}, {});
  const SidePlan p = r.plan({}, 1);
  EXPECT_EQ(p.fork_at, (std::vector<int>{1, 3}));
  EXPECT_EQ(p.join_before, (std::vector<int>{3, 8}));
  EXPECT_EQ(p.extend_to[static_cast<size_t>(a)], 3);
  EXPECT_EQ(p.extend_to[static_cast<size_t>(b)], 8);
  // Note [Side groups in flight]: with two in flight (the default) group 0 stays open past group
  // 1's fork; node 8 reads both groups' results and joins both (what group 0 reads lives to 8).
  const SidePlan q = r.plan();
  EXPECT_EQ(q.fork_at, (std::vector<int>{1, 3}));
  EXPECT_EQ(q.join_before, (std::vector<int>{8, 8}));
  EXPECT_EQ(q.ready_after, p.ready_after);
  EXPECT_EQ(q.extend_to[static_cast<size_t>(a)], 8);
  EXPECT_EQ(q.extend_to[static_cast<size_t>(b)], 8);
  EXPECT_EQ(q.start_from[static_cast<size_t>(g1)], p.start_from[static_cast<size_t>(g1)]);
}

// Note [Side groups in flight]: three groups, two in flight: the third fork joins the oldest only;
// a main launch that conflicts with the newer of two open groups joins both (the side stream runs
// them in order), one that conflicts with the older joins that one alone.
TEST(CaptureSideStream, TwoGroupsInFlightJoinOldestFirst) {
  Record r;
  const int x = r.buffer(), y = r.buffer(), z = r.buffer(), g0 = r.buffer(), g1 = r.buffer(), g2 = r.buffer(),
            w = r.buffer(), sum = r.buffer();
  r.call("fill", {}, {x});            // 0
  r.call("gemm", {x}, {g0});          // 1 group 0
  r.call("binary", {x}, {y});         // 2 main
  r.call("gemm", {y}, {g1});          // 3 group 1 (two open)
  r.call("binary", {y}, {z});         // 4 main
  r.call("gemm", {z}, {g2});          // 5 group 2: joins group 0 here
  r.call("binary", {}, {x});          // 6 main writes x, which group 0 read: already joined
  r.call("binary", {}, {y});          // 7 main writes y, which group 1 reads: joins group 1
  r.filler(3);                        // 8-10
  r.call("binary", {g0, g1, g2}, {sum});  // 11 joins group 2
  r.call("binary", {z}, {w});         // 12
  r.call("host_read", {sum}, {});
  const SidePlan p = r.plan();
  EXPECT_EQ(p.fork_at, (std::vector<int>{1, 3, 5}));
  EXPECT_EQ(p.join_before, (std::vector<int>{5, 7, 11}));
  EXPECT_EQ(p.ready_after, (std::vector<int>{0, 2, 4}));
  EXPECT_EQ(p.extend_to[static_cast<size_t>(x)], 5);
  EXPECT_EQ(p.extend_to[static_cast<size_t>(y)], 7);
  EXPECT_EQ(p.extend_to[static_cast<size_t>(z)], 11);
  EXPECT_EQ(p.start_from[static_cast<size_t>(g2)], 5);
  // One in flight: every fork joins the group before it.
  const SidePlan one = r.plan({}, 1);
  EXPECT_EQ(one.join_before, (std::vector<int>{3, 5, 11}));
}

// Results read soon (also by a call that could go to the side stream), never read, or late.
TEST(CaptureSideStream, OnlyCallsWhoseResultsWait) {
  Record r;
  const int a = r.buffer(), s1 = r.buffer(), s2 = r.buffer(), soon = r.buffer(), out = r.buffer(),
            sum = r.buffer();
  r.call("fill", {}, {a});
  r.call("reduce", {a}, {s1});       // 1 read by 2 at once: main
  r.call("binary", {s1}, {s2});      // 2 read at 9: side
  r.call("binary", {a}, {soon});     // 3 read by 4: main
  r.call("binary", {soon}, {out});   // 4 never read again (an output): main
  r.filler(4);                       // 5-8
  r.call("binary", {s2}, {sum});     // 9
  r.call("host_read", {sum}, {});
  const SidePlan p = r.plan();
  EXPECT_EQ(p.group_of[1], -1);
  EXPECT_EQ(p.group_of[2], 0);
  EXPECT_EQ(p.group_of[3], -1);
  EXPECT_EQ(p.group_of[4], -1);
  EXPECT_EQ(p.side_calls, 1u);

  Record cpu;  // not on CUDA: none
  cpu.dev = Device::cpu();
  const int ca = cpu.buffer(), cg = cpu.buffer(), cs = cpu.buffer();
  cpu.call("fill", {}, {ca});
  cpu.call("gemm", {ca}, {cg});
  cpu.filler(5);
  cpu.call("binary", {cg}, {cs});
  cpu.call("host_read", {cs}, {});
  EXPECT_EQ(cpu.plan().side_calls, 0u);
}

// A replace()d set launches at its last node with what all its calls touch: a set whose first
// call (before the fork) writes what the group reads joins the group at the set's last node, where
// its kernel runs; a set whose results wait is a side call itself (blu-plan's bound dW epilogues).
TEST(CaptureSideStream, ReplacedSetsLaunchAtTheirLastNode) {
  Record r;
  const int a = r.buffer(), g1 = r.buffer(), g2 = r.buffer(), t = r.buffer(), sum = r.buffer();
  r.call("fill", {}, {a});        // 0
  r.call("gemm", {}, {a});        // 1 set 0 (writes a)
  r.call("gemm", {a}, {g1});      // 2 side: reads a
  r.call("binary", {}, {t});      // 3 main
  r.call("binary", {t}, {t});     // 4 set 0's last node: its launch writes a -> join before 4
  r.call("gemm", {t}, {g2});      // 5 set 1 alone: g2 read at 10, a side call
  r.filler(4);                    // 6-9
  r.call("binary", {g1, g2}, {sum});  // 10 joins set 1's group
  r.call("host_read", {sum}, {});
  std::vector<int> sets(12, -1);
  sets[1] = sets[4] = 0;
  sets[5] = 1;
  const SidePlan p = r.plan(sets);
  std::vector<int> want(12, -1);
  want[2] = 0;
  want[5] = 1;
  EXPECT_EQ(p.group_of, want);
  EXPECT_EQ(p.fork_at, (std::vector<int>{2, 5}));
  EXPECT_EQ(p.join_before, (std::vector<int>{4, 10}));
  EXPECT_EQ(p.extend_to[static_cast<size_t>(t)], 10);  // set 1 reads t: to its join

  // The set's first call alone reads what it writes soon after the launch: not a side call.
  Record q;
  const int x = q.buffer(), y = q.buffer(), z = q.buffer();
  q.call("fill", {}, {x});
  q.call("gemm", {x}, {y});  // 1 set 0
  q.call("binary", {x}, {x});  // 2 set 0's last node
  q.call("binary", {y}, {z});  // 3 reads y at once
  q.call("host_read", {z}, {});
  std::vector<int> qs(5, -1);
  qs[1] = qs[2] = 0;
  EXPECT_EQ(q.plan(qs).side_calls, 0u);
}

}  // namespace

// Note [Side chains]: a block's backward as the record holds it: the bias gradient's sum, read 3
// calls later by the gradient casts (a side call), goes to the side stream with the dW GEMM; the
// LayerNorm backward and the data-gradient chain stay on the main stream; the call feeding only the
// chained sum is not chained further (one link); a sum a main call also reads later stays.
struct BlockBackward {
  Record r;
  int dy, pre, w, x, dx, gw, gb, dln, seen, gw32, gb32, p2, p3, norm;
  explicit BlockBackward(bool main_reads_bias_grad) {
    dy = r.buffer(), pre = r.buffer(), w = r.buffer(), x = r.buffer(), dx = r.buffer(), gw = r.buffer();
    gb = r.buffer(), dln = r.buffer(), seen = r.buffer(), gw32 = r.buffer(), gb32 = r.buffer();
    p2 = r.buffer(), p3 = r.buffer(), norm = r.buffer();
    r.call("fill", {}, {dy});                         // 0 the gradient coming down
    r.call("binary", {dy}, {pre});                    // 1 feeds only the chained sum: main
    r.call("gemm", {dy, w}, {dx});                    // 2 dX: read by 5, 3 later: main
    r.call("gemm", {dy, x}, {gw});                    // 3 dW: read by 7, 4 later: side (gap)
    r.call("reduce", {pre}, {gb});                    // 4 bias sum: read by 7, 3 later: chained
    r.call("layer_norm_backward", {dx}, {dln});       // 5 main
    r.call("binary", {dln}, {seen});                  // 6 main
    r.call("copy_tensors_", {gw, gb}, {gw32, gb32});  // 7 casts: read at 12: side (gap)
    r.call("binary", {seen}, {p2});                   // 8 main
    r.call("binary", {p2}, {p3});                     // 9 main
    if (main_reads_bias_grad) {
      r.call("binary", {gb}, {p2});                   // 10 a main call reads the sum too
    } else {
      r.filler(1);                                    // 10
    }
    r.filler(1);                                      // 11
    r.call("global_norm", {gw32, gb32, p3}, {norm});  // 12
    r.call("host_read", {norm}, {});                  // 13
  }
};

TEST(CaptureSideStream, SideChainsTakeTheDirectProducersOfSideCalls) {
  const BlockBackward b(false);
  const SidePlan chained = b.r.plan({}, 1, true);
  std::vector<int> want(14, -1);
  want[3] = want[4] = 0;
  want[7] = 1;
  EXPECT_EQ(chained.group_of, want);
  EXPECT_EQ(chained.fork_at, (std::vector<int>{3, 7}));
  EXPECT_EQ(chained.join_before, (std::vector<int>{7, 12}));  // one in flight: the next fork joins
  const SidePlan gap = b.r.plan({}, 1, false);
  want[4] = -1;
  EXPECT_EQ(gap.group_of, want);
  const BlockBackward m(true);
  EXPECT_EQ(m.r.plan({}, 1, true).group_of[4], -1);
}

// Note [Cheap side calls first]: the chained bias sum (4) is issued before the dW GEMM (3) it shares
// no written buffer with; a group in record order already keeps no order of its own; a call that
// reads what the GEMM before it writes stays behind it.
TEST(CaptureSideStream, CheapSideCallsGoBeforeTheGemmsTheyDoNotConflictWith) {
  const BlockBackward b(false);
  const SidePlan p = blu::capture::side_stream_plan(b.r.g, {}, 1, true, true);
  ASSERT_EQ(p.issue_order.size(), 2u);
  EXPECT_EQ(p.issue_order[0], (std::vector<int>{4, 3}));
  EXPECT_TRUE(p.issue_order[1].empty());  // the casts alone
  EXPECT_EQ(p.group_of, b.r.plan({}, 1, true).group_of);  // the same groups, forks and joins
  EXPECT_EQ(p.join_before, b.r.plan({}, 1, true).join_before);
  EXPECT_TRUE(b.r.plan({}, 1, true).issue_order.empty() || b.r.plan({}, 1, true).issue_order[0].empty());

  Record r;
  const int dy = r.buffer(), x = r.buffer(), x2 = r.buffer(), gw = r.buffer(), gw2 = r.buffer(), gb = r.buffer(),
            gw32 = r.buffer(), norm = r.buffer();
  r.call("fill", {}, {dy});                         // 0
  r.call("gemm", {dy, x}, {gw});                    // 1 side (chained: only 2 reads gw)
  r.call("reduce", {gw}, {gw32});                   // 2 side, reads the GEMM's result: stays behind it
  r.call("gemm", {dy, x2}, {gw2});                  // 3 side
  r.call("reduce", {dy}, {gb});                     // 4 side: passes 3, not the cheap 2
  r.filler(4);                                      // 5-8
  r.call("global_norm", {gw32, gw2, gb}, {norm});   // 9
  r.call("host_read", {norm}, {});                  // 10
  const SidePlan q = side_stream_plan(r.g, {}, 1, true, true);
  ASSERT_EQ(q.fork_at, (std::vector<int>{1}));
  ASSERT_EQ(q.issue_order.size(), 1u);
  EXPECT_EQ(q.issue_order[0], (std::vector<int>{1, 2, 4, 3}));
}

// Note [Side gaps from a set's first node]: a data gradient read 3 nodes later by a set (the
// LayerNorm backward and its residual add as one launch, one node after) stays on the main stream,
// as it does when the two calls run as recorded; the old rule (the set's launch node) made it a
// side call joined at once.
TEST(CaptureSideStream, AConsumersSetCountsFromItsFirstNode) {
  const BlockBackward b(false);  // 2 dX GEMM, read by 5 (LayerNorm backward) and 6 (its add)
  std::vector<int> sets(14, -1);
  sets[5] = sets[6] = 0;
  const SidePlan fused = b.r.plan(sets, 1, false);
  const SidePlan plain = b.r.plan({}, 1, false);
  EXPECT_EQ(fused.group_of[2], -1);
  EXPECT_EQ(fused.group_of, plain.group_of);
  EXPECT_EQ(fused.join_before, plain.join_before);
  blu::test::ScopedEnv old("BLU_CAPTURE_SIDE_GAP_AT_LAUNCH", "1");
  EXPECT_EQ(b.r.plan(sets, 1, false).group_of[2], 0) << "the test lost its case";
}

// Note [Side chains], session 38: on by default for a step whose GEMMs take 16-bit operands (the
// bf16 qkv dW + bias set back on the side stream), off for f32 ones, BLU_CAPTURE_SIDE_CHAIN=1 / 0
// either way; side_stream_plan's chains = -1 takes that default.
TEST(CaptureSideStream, SideChainsDefaultFollowsTheGemmOperandType) {
  auto record = [](blu::DType t) {
    Graph g;
    const int a = blu::test::add_buffer(g, Device::cuda(0), 256), b = blu::test::add_buffer(g, Device::cuda(0), 256),
              d = blu::test::add_buffer(g, Device::cuda(0), 256);
    blu::capture::Node n;
    n.op = "gemm";
    n.device = Device::cuda(0);
    n.args.push_back(blu::test::tensor_arg("a", a, true, false, t, {8, 8}));
    n.args.push_back(blu::test::tensor_arg("b", b, true, false, t, {8, 8}));
    n.args.push_back(blu::test::tensor_arg("out", d, false, true, t, {8, 8}));
    g.nodes.push_back(n);
    return g;
  };
  const Graph bf16 = record(blu::DType::BF16), f32 = record(blu::DType::F32);
  {
    blu::test::ScopedEnv unset("BLU_CAPTURE_SIDE_CHAIN", "");
    if (std::getenv("BLU_CAPTURE_SIDE_CHAIN") == nullptr) {
      EXPECT_TRUE(blu::capture::side_chains_default(bf16));
      EXPECT_FALSE(blu::capture::side_chains_default(f32));
      EXPECT_FALSE(blu::capture::side_chains_default(Graph{}));
    }
  }
  {
    blu::test::ScopedEnv off("BLU_CAPTURE_SIDE_CHAIN", "0");
    EXPECT_FALSE(blu::capture::side_chains_default(bf16));
  }
  {
    blu::test::ScopedEnv on("BLU_CAPTURE_SIDE_CHAIN", "1");
    EXPECT_TRUE(blu::capture::side_chains_default(f32));
  }
}

// The plan of the streamed softmax / cross-entropy kernels (blublas/src/softmax/row_stream_plan.h,
// Note [Row streaming through a shared-memory ring]) on described devices, without a GPU: which
// shapes stream, the cluster the auto choice picks, the ring depth from the shared-memory limit,
// and the shapes that must fall back (unaligned rows, short rows, pre-Hopper, rings too small).
#include <gtest/gtest.h>

#include "../../blublas/src/softmax/row_stream_plan.h"  // internal (src is private)

namespace {

using blublas::DeviceInfo;
using blublas::fused::plan_row_stream;
using blublas::fused::RowStreamTuning;
using blublas::fused::stream_header_bytes;
using blublas::fused::StreamPlan;

DeviceInfo hopper() {
  DeviceInfo d;
  d.device = 0;
  d.sm_major = 9;
  d.sm_minor = 0;
  d.sm_count = 132;
  d.max_smem_per_block_optin = 232448;  // 227 KiB
  d.max_smem_per_sm = 233472;
  d.l2_bytes = 50 << 20;
  d.max_threads_per_sm = 2048;
  return d;
}

TEST(RowStreamPlan, Gpt2VocabAutoCluster) {
  const RowStreamTuning tu;  // 8 KiB chunks, 16 warps, auto cluster
  StreamPlan p;
  // f32 forward: a 201216-byte row is 25 chunks of the 28 slots: one CTA per row.
  ASSERT_TRUE(plan_row_stream(16384, 50304 * 4, 1, tu, hopper(), &p));
  EXPECT_EQ(p.args.ring_chunks, 28);
  EXPECT_EQ(p.args.chunks_per_row, 25);
  EXPECT_EQ(p.args.cluster, 1);
  EXPECT_LE(p.smem_bytes, 232448);
  EXPECT_EQ(p.smem_bytes, stream_header_bytes(28) + 28 * 8192);
  // bf16 forward: 13 chunks, two rows fit one CTA.
  ASSERT_TRUE(plan_row_stream(16384, 50304 * 2, 1, tu, hopper(), &p));
  EXPECT_EQ(p.args.cluster, 1);
  // Backward (y and dy): bf16 fits one CTA (26 + 2 slots); f32 (50) does not: the resident
  // kernels, unless a cluster is asked for.
  ASSERT_TRUE(plan_row_stream(16384, 50304 * 2, 2, tu, hopper(), &p));
  EXPECT_EQ(p.args.cluster, 1);
  EXPECT_FALSE(plan_row_stream(16384, 50304 * 4, 2, tu, hopper(), &p));
  RowStreamTuning c4;
  c4.cluster = 4;
  ASSERT_TRUE(plan_row_stream(16384, 50304 * 4, 2, c4, hopper(), &p));
  EXPECT_EQ(p.args.cluster, 4);
}

TEST(RowStreamPlan, ExplicitClusterMustFit) {
  RowStreamTuning tu;
  StreamPlan p;
  tu.cluster = 1;  // 25 chunks + 1 spare <= 28 slots: allowed
  ASSERT_TRUE(plan_row_stream(100, 50304 * 4, 1, tu, hopper(), &p));
  EXPECT_EQ(p.args.cluster, 1);
  EXPECT_FALSE(plan_row_stream(100, 50304 * 4, 2, tu, hopper(), &p));  // 50 chunks of y + dy
  tu.cluster = 3;
  EXPECT_FALSE(plan_row_stream(100, 50304 * 4, 1, tu, hopper(), &p));
  tu.cluster = 4;
  tu.chunk_bytes = 65536;  // 3 slots: too shallow a ring
  EXPECT_FALSE(plan_row_stream(100, 50304 * 4, 1, tu, hopper(), &p));
  tu.chunk_bytes = 4096;
  ASSERT_TRUE(plan_row_stream(100, 50304 * 4, 1, tu, hopper(), &p));
  EXPECT_EQ(p.args.ring_chunks, 56);
  EXPECT_EQ(p.args.chunks_per_row, 50);
}

TEST(RowStreamPlan, LongRowsNeedAnExplicitCluster) {
  StreamPlan p;
  // 560000 bytes = 69 chunks: auto keeps the resident kernels; 4 CTAs hold 18 each.
  EXPECT_FALSE(plan_row_stream(64, 140000 * 4, 1, RowStreamTuning{}, hopper(), &p));
  RowStreamTuning c4;
  c4.cluster = 4;
  ASSERT_TRUE(plan_row_stream(64, 140000 * 4, 1, c4, hopper(), &p));
  EXPECT_EQ(p.args.cluster, 4);
  EXPECT_EQ(p.args.chunks_per_row, 69);
}

TEST(RowStreamPlan, MisalignedRowsStreamAsWindows) {
  StreamPlan p;
  // 201028-byte rows: windows of up to 201056 bytes, still 25 chunks.
  ASSERT_TRUE(plan_row_stream(64, 50257 * 4, 1, RowStreamTuning{}, hopper(), &p));
  EXPECT_EQ(p.args.chunks_per_row, 25);
  EXPECT_EQ(p.args.cluster, 1);
  // A row of exactly 8 chunks gains a ninth when misaligned by 2 bytes.
  ASSERT_TRUE(plan_row_stream(64, 8 * 8192 + 2, 1, RowStreamTuning{}, hopper(), &p));
  EXPECT_EQ(p.args.chunks_per_row, 9);
  // The last row streams only when the tensor's end is 16-byte aligned.
  EXPECT_EQ(blublas::fused::streamed_rows(16384, 50257 * 4), 16384);
  EXPECT_EQ(blublas::fused::streamed_rows(5, 50257 * 4), 4);
  EXPECT_EQ(blublas::fused::streamed_rows(7, 50257 * 2), 6);
  EXPECT_EQ(blublas::fused::streamed_rows(8, 50257 * 2), 8);
  EXPECT_EQ(blublas::fused::streamed_rows(3, 50304 * 4), 3);
}

TEST(RowStreamPlan, FallsBack) {
  const RowStreamTuning tu;
  StreamPlan p;
  EXPECT_FALSE(plan_row_stream(64, 768 * 4, 1, tu, hopper(), &p));    // short row
  EXPECT_FALSE(plan_row_stream(64, 400000 * 4, 1, tu, hopper(), &p)); // 4 CTAs cannot hold it
  EXPECT_FALSE(plan_row_stream(0, 50304 * 4, 1, tu, hopper(), &p));   // no rows
  DeviceInfo ampere = hopper();
  ampere.sm_major = 8;
  EXPECT_FALSE(plan_row_stream(64, 50304 * 4, 1, tu, ampere, &p));
  RowStreamTuning off;
  off.mode = 0;
  EXPECT_FALSE(plan_row_stream(64, 50304 * 4, 1, off, hopper(), &p));
  RowStreamTuning bad;
  bad.consumer_warps = 10;
  EXPECT_FALSE(plan_row_stream(64, 50304 * 4, 1, bad, hopper(), &p));
  bad = RowStreamTuning{};
  bad.chunk_bytes = 8200;  // not a multiple of 16
  EXPECT_FALSE(plan_row_stream(64, 50304 * 4, 1, bad, hopper(), &p));
}

TEST(RowStreamPlan, SmallerSharedMemoryShrinksTheRing) {
  DeviceInfo d = hopper();
  d.max_smem_per_block_optin = 101376;  // 99 KiB (sm_86/89-like budget)
  StreamPlan p;
  const RowStreamTuning tu;
  ASSERT_TRUE(plan_row_stream(64, 16384 * 4, 1, tu, d, &p));  // 8 chunks, 12 slots
  EXPECT_EQ(p.args.ring_chunks, 12);
  EXPECT_LE(p.smem_bytes, d.max_smem_per_block_optin);
  EXPECT_EQ(p.args.cluster, 1);
  EXPECT_FALSE(plan_row_stream(64, 24576 * 4, 1, tu, d, &p));  // 12 chunks: no spare slot
}

}  // namespace

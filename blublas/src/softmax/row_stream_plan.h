// row_stream_plan.h (internal, host side): the plan of Note [Row streaming through a
// shared-memory ring] (softmax/row_stream.cuh): whether a row shape streams on a device, with
// which cluster size, chunk size and ring depth, and the kernel arguments that describe it. Pure
// host arithmetic on a DeviceInfo (tested on the CPU: tests/blublas/softmax_stream_plan_test.cpp).
#pragma once

#include <cstdint>
#include <cstdlib>
#include <string>

#include "blublas/device_info.h"
#include "row_stream_tuning.h"

namespace blublas::fused {

constexpr int kStreamMaxCluster = 4;
constexpr int kStreamMaxWarps = 16;

// Shared-memory layout: full[ring] and empty[ring] mbarriers, 2 exchange mbarriers (row parity),
// warp partials [2][kStreamMaxWarps] and cluster partials [2][kStreamMaxCluster] (float2), one
// float per slot (the chunk max of keep_exp), padded to 128 bytes; then the ring of `ring_chunks`
// slots of `chunk_bytes`.
constexpr int stream_header_bytes(int ring_chunks) {
  return (ring_chunks * 20 + 16 + 2 * kStreamMaxWarps * 8 + 2 * kStreamMaxCluster * 8 + 127) /
         128 * 128;
}

// Seconds a ring wait may take before the kernel traps (row_stream.cuh, mbar_wait).
constexpr uint32_t kRowStreamWatchdogDefaultS = 20;

// Kernel arguments common to the streamed kernels.
struct StreamArgs {
  int64_t rows = 0;
  int64_t row_bytes = 0;    // per input (rows are contiguous: row r starts at r * row_bytes)
  int chunk_bytes = 0;      // ring slot size
  int ring_chunks = 0;      // ring slots
  int chunks_per_row = 0;   // ceil(row_bytes / chunk_bytes), split over the cluster's CTAs
  int cluster = 1;          // CTAs per row
  int store_hint = 1;       // 1: st.global.cs
  int keep_exp = 0;         // see RowStreamTuning
  int reg_chunk = 0;        // see RowStreamTuning (set only with keep_exp and 8 KiB chunks)
  int copy_only = 0;        // diagnostic: see RowStreamTuning
  uint32_t watchdog_s = kRowStreamWatchdogDefaultS;  // a ring wait longer traps; 0: never (mbar_wait)
};

// BLUBLAS_ROW_STREAM_WATCHDOG_S (seconds, default 20, 0 = off), read once per process.
inline uint32_t row_stream_watchdog_s() {
  static const uint32_t s = [] {
    const char* v = std::getenv("BLUBLAS_ROW_STREAM_WATCHDOG_S");
    if (v == nullptr || *v == '\0') return kRowStreamWatchdogDefaultS;
    char* end = nullptr;
    const unsigned long x = std::strtoul(v, &end, 10);
    return end != nullptr && *end == '\0' && x <= 86400ul ? static_cast<uint32_t>(x) : kRowStreamWatchdogDefaultS;
  }();
  return s;
}

struct StreamPlan {
  StreamArgs args;
  int warps = 16;
  int smem_bytes = 0;
};

// Whether rows of `row_bytes` per input stream on this device with `tuning`, and how.
inline bool plan_row_stream(int64_t rows, int64_t row_bytes, int inputs,
                            const RowStreamTuning& tu, const DeviceInfo& info, StreamPlan* plan) {
  if (tu.mode == 0 || info.sm_major < 9 || rows < 1) return false;
  if (row_bytes < tu.min_row_bytes || row_bytes > (int64_t{1} << 30)) return false;
  const int cb = tu.chunk_bytes;
  if (cb < 1024 || cb % 16 != 0) return false;
  if (tu.consumer_warps != 8 && tu.consumer_warps != 12 && tu.consumer_warps != 16) return false;
  int nc = (info.max_smem_per_block_optin - stream_header_bytes(0)) / cb;
  while (nc > 0 && stream_header_bytes(nc) + static_cast<int64_t>(nc) * cb >
                       info.max_smem_per_block_optin) {
    --nc;
  }
  // A misaligned row's 16-byte aligned window spans up to 30 more bytes (see RowWindow).
  const int64_t window_bytes = row_bytes % 16 == 0 ? row_bytes : (row_bytes + 30) / 16 * 16;
  const int64_t cpr64 = (window_bytes + cb - 1) / cb;
  if (nc < 4 || cpr64 > (int64_t{1} << 20)) return false;
  const int cpr = static_cast<int>(cpr64);
  auto slice = [&](int cs) { return (cpr + cs - 1) / cs; };
  int cs = tu.cluster;
  if (cs == 0) {
    // One CTA per row whenever its row fits with two spare slots: measured on H200 (run 2,
    // 16384x50304) a cluster of 2 (exchange through DSMEM each row) was 13-40% slower than one
    // CTA with 3 spare slots, a cluster of 4 ~2x slower. Rows too long for one CTA (f32 softmax
    // backward: y and dy) stay on the resident kernels unless a cluster is asked for.
    if (inputs * slice(1) + 2 <= nc) cs = 1;
    if (cs == 0) return false;
  }
  if (cs != 1 && cs != 2 && cs != 4) return false;
  if (cs > cpr || inputs * slice(cs) + 1 > nc) return false;
  // Ring sequence numbers are 32-bit.
  if (static_cast<double>(rows) * slice(cs) * inputs >= 2147483647.0) return false;
  plan->args.rows = rows;
  plan->args.row_bytes = row_bytes;
  plan->args.chunk_bytes = cb;
  plan->args.ring_chunks = nc;
  plan->args.chunks_per_row = cpr;
  plan->args.cluster = cs;
  plan->args.store_hint = tu.store_hint;
  plan->args.copy_only = tu.copy_only;
  plan->args.keep_exp = tu.keep_exp;
  plan->args.watchdog_s = row_stream_watchdog_s();
  plan->args.reg_chunk = (tu.reg_chunk && tu.keep_exp && !tu.copy_only && cb == 8192) ? 1 : 0;
  plan->warps = tu.consumer_warps;
  plan->smem_bytes = stream_header_bytes(nc) + nc * cb;
  return true;
}

// Rows the streamed kernel takes: all but a last row whose window would end past the tensor
// (rows * row_bytes not a multiple of 16); that row goes to the resident kernels.
inline int64_t streamed_rows(int64_t rows, int64_t row_bytes) {
  return (rows * row_bytes) % 16 == 0 ? rows : rows - 1;
}

inline std::string describe_plan(const StreamPlan& p) {
  return "stream cluster=" + std::to_string(p.args.cluster) +
         " chunk=" + std::to_string(p.args.chunk_bytes) +
         " ring=" + std::to_string(p.args.ring_chunks) +
         " chunks/row=" + std::to_string(p.args.chunks_per_row) +
         " warps=" + std::to_string(p.warps) + (p.args.copy_only ? " COPY-ONLY" : "") +
         (p.args.keep_exp ? " keep-exp" : "") + (p.args.reg_chunk ? " reg-chunk" : "");
}

}  // namespace blublas::fused

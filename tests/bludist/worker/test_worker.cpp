// bludist_test_worker: the program the bludist tests start under blurun, one process per rank.
//   test_worker env                       print the launch environment
//   test_worker exit <rank> <code>        rendezvous, then <rank> exits with <code>, the others block
//   test_worker restart <fail_rank>       fails (status 5) on the first attempt, succeeds after
//   test_worker collectives <backend>     collectives vs hand-computed values (gloo | nccl)
//   test_worker parallel <backend>        tensor- and context-parallel checks vs the unsharded ops
//   test_worker ddp <backend> <out> <accum> [<skip_unused>]  DDP MLP; rank 0 writes the losses
//   test_worker leave_early <backend>     rank 1 leaves (_Exit(0), no teardown) right after rendezvous;
//                                         rank 0 all-reduces
//   test_worker leave_early_watchdog <returns|hangs>  the same on CPU ranks (Gloo), rank 0 then
//                                         blocked for ever under the NCCL watchdog's deadline timer
//                                         (a stand-in collective; its abort returns or hangs)
//   test_worker zero <backend> <out> <stage> <accum>  the same MLP with ZeroAdamW instead of DDP,
//                                         stage 1 or 2 (2: gradients reduce-scattered in 2 KiB
//                                         chunks), <accum> micro-steps per step
//   test_worker ddp_restart <out> <ckpt> <fail_rank> <fail_step>  DDP MLP with a checkpoint per step;
//                                         the first attempt's <fail_rank> crashes at <fail_step>
//   test_worker bench_allreduce <backend> fp32 all-reduce (avg) bandwidth, 1 MiB .. 1 GiB (rank 0 prints)
// Exits 0 when its checks pass, 1 with a message on stderr otherwise.
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <thread>

#include "bludist/env.h"
#include "watchdog_timer.h"  // bludist/src: the deadline half of the NCCL watchdog
#include "blutensor/cuda_stream.h"
#include "blutensor/error.h"
#include "blutensor/ops.h"
#include "support/mlp_ddp.h"
#include "support/parallel_checks.h"

using namespace bludist;

namespace {

Backend parse_backend(const std::string& s) { return s == "nccl" ? Backend::kNccl : Backend::kGloo; }

// Tensor and context parallelism against the unsharded ops on this backend's device
// (support/parallel_checks.h); prints "parallel ok" or the first mismatch.
int parallel_checks(Backend backend) {
  auto pg = init_process_group(backend);
  const blu::Device dev = pg->device();
  if (dev.is_cuda()) blu::cuda::set_device(dev.index);
  for (const std::string& r :
       {test::check_tp_mlp(*pg, dev), test::check_tp_mlp_overlapped(*pg, dev), test::check_vocab_parallel(*pg, dev),
        test::check_tp_attention_block(*pg, dev),
        test::check_ring_attention(*pg, dev, true, false), test::check_ring_attention(*pg, dev, true, true),
        test::check_ring_attention(*pg, dev, false, true)}) {
    if (!r.empty()) {
      std::fprintf(stderr, "MISMATCH %s\n", r.c_str());
      return 1;
    }
  }
  std::printf("parallel ok: %s\n", pg->describe().c_str());
  return 0;
}

double value(int rank, std::size_t i, int salt) {
  return std::sin(0.37 * static_cast<double>(i) + 1.3 * rank + 0.11 * salt) * 3.0 + 0.25 * (rank + 1);
}

#define CHECK_NEAR(a, b, tol, what)                                                                     \
  do {                                                                                                  \
    double a_ = (a), b_ = (b);                                                                          \
    if (!(std::fabs(a_ - b_) <= (tol) * (1 + std::fabs(b_)))) {                                          \
      std::fprintf(stderr, "MISMATCH %s: got %.9g want %.9g\n", std::string(what).c_str(), a_, b_);      \
      return 1;                                                                                         \
    }                                                                                                   \
  } while (0)
#define CHECK_TRUE(cond, what)                                                  \
  do {                                                                         \
    if (!(cond)) {                                                             \
      std::fprintf(stderr, "FAILED %s: %s\n", std::string(what).c_str(), #cond); \
      return 1;                                                                \
    }                                                                          \
  } while (0)

int collectives(Backend backend) {
  auto pg = init_process_group(backend);
  const int n = pg->size(), r = pg->rank();
  blu::Device dev = pg->device();
  auto opts = blu::TensorOptions(blu::kFloat32).device(dev);
  if (dev.is_cuda()) blu::cuda::set_device(dev.index);
  const int64_t count = 1237;
  // all_reduce sum and avg
  for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax}) {
    std::vector<float> h(count);
    for (int64_t i = 0; i < count; ++i) h[i] = static_cast<float>(value(r, i, int(op)));
    Tensor t = blu::from_vector(h).to(dev);
    pg->all_reduce(t, op);
    std::vector<double> got = t.to_double_vector();
    for (int64_t i = 0; i < count; ++i) {
      double want = op == ReduceOp::kMax ? -1e300 : 0.0;
      for (int q = 0; q < n; ++q) {
        double v = static_cast<float>(value(q, i, int(op)));
        want = op == ReduceOp::kMax ? std::max(want, v) : want + v;
      }
      if (op == ReduceOp::kAvg) want /= n;
      CHECK_NEAR(got[i], want, 1e-6 * n, std::string("all_reduce ") + reduce_op_name(op));
    }
  }
  // reduce_scatter, all_gather, broadcast
  const int64_t chunk = 331;
  std::vector<float> h(chunk * n);
  for (int64_t i = 0; i < chunk * n; ++i) h[i] = static_cast<float>(value(r, i, 9));
  Tensor in = blu::from_vector(h).to(dev), out = blu::full({chunk}, -7.0, opts);
  pg->reduce_scatter(out, in, ReduceOp::kSum);
  std::vector<double> rs = out.to_double_vector();
  for (int64_t i = 0; i < chunk; ++i) {
    double want = 0;
    for (int q = 0; q < n; ++q) want += static_cast<float>(value(q, r * chunk + i, 9));
    CHECK_NEAR(rs[i], want, 1e-6 * n, "reduce_scatter");
  }
  Tensor gathered = blu::full({chunk * n}, -7.0, opts);
  pg->all_gather(gathered, out);
  Tensor mine = blu::full({chunk}, 0.5 + r, opts);
  pg->all_gather(gathered, mine);
  std::vector<double> ag = gathered.to_double_vector();
  for (int q = 0; q < n; ++q)
    for (int64_t i = 0; i < chunk; ++i) CHECK_NEAR(ag[q * chunk + i], 0.5 + q, 0, "all_gather");
  Tensor b = blu::full({77}, 3.25 + r, opts);
  pg->broadcast(b, n - 1);
  for (double v : b.to_double_vector()) CHECK_NEAR(v, 3.25 + n - 1, 0, "broadcast");
  // grouped ring send/recv
  Tensor send = blu::full({101}, 10.0 + r, opts), recv = blu::full({101}, -1.0, opts);
  pg->group_start();
  pg->send(send, (r + 1) % n);
  pg->recv(recv, (r + n - 1) % n);
  pg->group_end();
  for (double v : recv.to_double_vector()) CHECK_NEAR(v, 10.0 + (r + n - 1) % n, 0, "ring send/recv");
  // async all_reduce on a non-default stream, waited on the device
  if (dev.is_cuda()) {
    blu::cuda::Stream s = blu::cuda::Stream::create(dev.index);
    blu::cuda::StreamGuard guard(s.get(), dev.index);
    Tensor a = blu::full({1 << 20}, 1.0 + r, opts);
    CommOptions o;
    o.async_op = true;
    Work w = pg->all_reduce(a, ReduceOp::kSum, o);
    w.wait();
    Tensor twice = a * 2.0;
    double want = 2.0 * (n * (n + 1) / 2.0);
    std::vector<double> tw = twice.to_double_vector();
    CHECK_NEAR(tw.front(), want, 0, "async all_reduce");
    CHECK_NEAR(tw.back(), want, 0, "async all_reduce");
  }
  pg->barrier();
  {  // bludist Note [Communication timing]: every collective above was timed; exposure within its time
    const bludist::CommTiming t = pg->take_comm_timing();
    CHECK_TRUE(t.ops > 0 && t.comm_ms > 0, "comm timing: the collectives were timed");
    CHECK_TRUE(t.exposed_ms >= 0 && t.exposed_ms <= t.comm_ms * (1 + 1e-6) + 1e-3, "comm timing: 0 <= exposed <= comm");
    CHECK_TRUE(t.device_timed == dev.is_cuda(), "comm timing: from CUDA events exactly on NCCL");
    std::printf("comm timing: %lld collectives, %.3f ms, %.3f ms exposed\n", static_cast<long long>(t.ops), t.comm_ms,
                t.exposed_ms);
  }
  std::printf("collectives ok: %s\n", pg->describe().c_str());
  return 0;
}

int ddp(Backend backend, const std::string& out, int accum, bool skip_unused, int zero_stage = 0) {
  auto pg = init_process_group(backend);
  test::MlpRunOptions o;
  o.zero1 = zero_stage > 0;
  o.zero_stage = zero_stage > 0 ? zero_stage : 1;
  o.accum = accum;
  o.skip_unused = skip_unused;
  o.device = pg->device();
  int64_t buckets = 0;
  std::vector<double> losses = test::train_mlp(pg, o, &buckets);
  std::printf("ddp: %zu steps, %lld bucket all-reduces\n", losses.size(), static_cast<long long>(buckets));
  if (pg->rank() == 0) {
    std::ofstream f(out);
    f.precision(17);
    for (double l : losses) f << l << "\n";
  }
  pg->barrier();
  return 0;
}

// All-reduce bandwidth through the ProcessGroup (what DDP and all_reduce_gradients pay): device
// time on the compute stream between CUDA events around `iters` back-to-back calls (host time
// for CPU groups). busbw = algbw * 2 (n - 1) / n, comparable with nccl-tests.
int bench_allreduce(Backend backend) {
  auto pg = init_process_group(backend);
  const bool cuda = pg->device().is_cuda();
  if (cuda) blu::cuda::set_device(pg->device().index);
  const int n = pg->size();
  if (pg->rank() == 0)
    std::printf("%-12s %10s %12s %12s\n", "bytes", "time_us", "algbw_GB/s", "busbw_GB/s");
  const int64_t max_mib = cuda ? 1024 : 64;
  for (int64_t mib = 1; mib <= max_mib; mib *= 4) {
    const int64_t count = mib * (1 << 20) / 4;
    Tensor t = blu::full({count}, 1.0, blu::TensorOptions().device(pg->device()));
    const int iters = mib >= 256 ? 10 : 20;
    for (int w = 0; w < 3; ++w) pg->all_reduce(t, ReduceOp::kAvg);
    pg->barrier();
    double seconds = 0;
#if BLU_WITH_CUDA  // a CPU-only build (Note [CPU-only build]) times Gloo groups only
    if (cuda) {
      cudaStream_t s = blu::cuda::current_stream(pg->device().index);
      cudaEvent_t e0, e1;
      cudaEventCreate(&e0);
      cudaEventCreate(&e1);
      cudaEventRecord(e0, s);
      for (int i = 0; i < iters; ++i) pg->all_reduce(t, ReduceOp::kAvg);
      cudaEventRecord(e1, s);
      cudaEventSynchronize(e1);
      float ms = 0;
      cudaEventElapsedTime(&ms, e0, e1);
      seconds = ms / 1e3 / iters;
      cudaEventDestroy(e0);
      cudaEventDestroy(e1);
    } else
#endif
    {
      auto t0 = std::chrono::steady_clock::now();
      for (int i = 0; i < iters; ++i) pg->all_reduce(t, ReduceOp::kAvg);
      seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / iters;
    }
    double bytes = static_cast<double>(count) * 4;
    double algbw = bytes / seconds / 1e9;
    if (pg->rank() == 0)
      std::printf("%-12.0f %10.1f %12.2f %12.2f\n", bytes, seconds * 1e6, algbw, algbw * 2.0 * (n - 1) / n);
  }
  pg->barrier();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  // Line-buffered stdout: a rank that the launcher or a watchdog ends still leaves its lines.
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  std::string mode = argc > 1 ? argv[1] : "";
  try {
    if (mode == "env") {
      for (const char* k : {"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
                            "NCCL_NVLS_ENABLE", "TORCH_SYMM_MEM_DISABLE_MULTICAST", "NVSHMEM_DISABLE_NVLS"}) {
        const char* v = std::getenv(k);
        std::printf("%s=%s ", k, v ? v : "(unset)");
      }
      std::printf("\n");
      return 0;
    }
    if (mode == "exit" && argc == 4) {
      auto pg = init_process_group(Backend::kGloo);
      pg->barrier();
      if (pg->rank() == std::atoi(argv[2])) return std::atoi(argv[3]);
      std::this_thread::sleep_for(std::chrono::seconds(600));  // the launcher must end us
      return 0;
    }
    if (mode == "restart" && argc == 3) {
      DistEnv e = DistEnv::from_environment();
      auto pg = init_process_group(Backend::kGloo);
      std::printf("attempt %d\n", e.restart_count);
      pg->barrier();
      if (e.restart_count == 0 && pg->rank() == std::atoi(argv[2])) return 5;
      if (e.restart_count == 0) std::this_thread::sleep_for(std::chrono::seconds(600));
      return 0;
    }
    if (mode == "collectives" && argc == 3) return collectives(parse_backend(argv[2]));
    if (mode == "parallel" && argc == 3) return parallel_checks(parse_backend(argv[2]));
    if (mode == "ddp" && argc >= 5)
      return ddp(parse_backend(argv[2]), argv[3], std::atoi(argv[4]), argc > 5 && std::atoi(argv[5]) != 0);
    if (mode == "zero" && argc == 6)
      return ddp(parse_backend(argv[2]), argv[3], std::atoi(argv[5]), false, std::atoi(argv[4]));
    if (mode == "ddp_restart" && argc == 6) {
      DistEnv e = DistEnv::from_environment();
      auto pg = init_process_group(Backend::kGloo);
      test::MlpRunOptions o;
      o.checkpoint = argv[3];
      if (e.restart_count == 0) {
        o.fail_rank = std::atoi(argv[4]);
        o.fail_at_step = std::atoi(argv[5]);
      }
      std::vector<double> losses = test::train_mlp(pg, o);
      if (pg->rank() == 0) {
        std::ofstream f(std::string(argv[2]) + "." + std::to_string(e.restart_count));
        f.precision(17);
        for (std::size_t i = 0; i < losses.size(); ++i)
          if (!std::isnan(losses[i])) f << i << " " << losses[i] << "\n";
      }
      pg->barrier();
      return 0;
    }
    if (mode == "bench_allreduce" && argc == 3) return bench_allreduce(parse_backend(argv[2]));
    if (mode == "leave_early" && argc == 3) {
      auto pg = init_process_group(parse_backend(argv[2]));
      pg->barrier();
      // No destructors: a clean return would tear the communicator down, and ncclCommDestroy
      // then waits on the peer's pending all-reduce until rank 1's own bounded destroy gives up
      // (2026-11-25, 2x H100: rank 1 exited 124 after 10 s and blurun stopped rank 0 before its
      // watchdog spoke). This test is about the rank left behind, as after a crash or a kill.
      if (pg->rank() == 1) std::_Exit(0);
      Tensor t = blu::ones({1000}, blu::TensorOptions().device(pg->device()));
      pg->all_reduce(t);
      std::fprintf(stderr, "leave_early: rank 0 issued its all_reduce; waiting on it\n");
      std::fflush(stderr);
      (void)t.to_double_vector();  // waits on CUDA (the watchdog must fire first)
      std::fprintf(stderr, "leave_early: all_reduce with a departed peer returned\n");
      return 1;
    }
    if (mode == "leave_early_watchdog" && argc == 3) {
      auto pg = init_process_group(Backend::kGloo);
      pg->barrier();
      if (pg->rank() == 1) std::_Exit(0);
      const bool hangs = std::string(argv[2]) == "hangs";
      detail::DeadlineTimer::Options o;
      o.timeout = pg->timeout();
      o.where = " on the " + pg->describe();
      o.action = "aborting the stand-in communicator and ";
      o.abort = [hangs] {
        while (hangs) std::this_thread::sleep_for(std::chrono::seconds(1));
      };
      o.trace = detail::watchdog_trace_from_env();
      detail::DeadlineTimer timer(o);
      timer.set_note("main thread blocked for ever");
      timer.begin("stand-in all_reduce of 1000 f32 (#1)", detail::DeadlineTimer::Kind::kCompletion);
      std::printf("leave_early_watchdog: rank 0 waits on a peer that left\n");
      std::this_thread::sleep_for(std::chrono::seconds(600));
      return 1;
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "test_worker %s: %s\n", mode.c_str(), e.what());
    return 1;
  }
  std::fprintf(stderr, "test_worker: bad arguments\n");
  return 2;
}

// GPU tests of the caching allocator with the real CUDA backend: memory is usable and reused,
// record_stream really defers reuse while another stream is busy, the out-of-memory error (from
// a limit and from the device), empty_cache returning memory to the driver, CUDA-graph capture
// into a private pool, and the process-wide instance with blu::cuda streams.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "blutensor/cuda_allocator.h"
#include "blutensor/cuda_stream.h"
#include "blutensor/error.h"
#include "common/gpu_test.h"

namespace {

using blu::cuda::CachingAllocator;
using blu::cuda::cuda_backend;

constexpr std::size_t MiB = 1024 * 1024;

__global__ void fill_kernel(float* p, int n, float v) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) p[i] = v + static_cast<float>(i);
}

// Spins for about `cycles` clock cycles, then reads p[0] (keeps the block "in use" on a stream).
__global__ void spin_kernel(const float* p, float* sink, long long cycles) {
  long long start = clock64();
  while (clock64() - start < cycles) {
  }
  if (threadIdx.x == 0) *sink = p[0];
}

TEST(AllocatorGpu, MemoryIsUsableAndReusedOnTheSameStream) {
  BLU_REQUIRE_GPU();
  CachingAllocator alloc(cuda_backend());
  blu::cuda::Stream s = blu::cuda::Stream::create(0);
  const int n = 1000;
  float* a = static_cast<float*>(alloc.allocate(n * sizeof(float), 0, s));
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(a) % 256, 0u);
  fill_kernel<<<(n + 255) / 256, 256, 0, s>>>(a, n, 3.0f);
  std::vector<float> host(n);
  BLU_CUDA_TEST_CHECK(cudaMemcpyAsync(host.data(), a, n * sizeof(float), cudaMemcpyDeviceToHost, s));
  BLU_CUDA_TEST_CHECK(cudaStreamSynchronize(s));
  for (int i = 0; i < n; ++i) ASSERT_EQ(host[i], 3.0f + i) << "at " << i;
  alloc.free(a);
  void* b = alloc.allocate(n * sizeof(float), 0, s);
  EXPECT_EQ(b, a);
  alloc.free(b);
  blu::cuda::MemoryStats st = alloc.stats(0);
  EXPECT_EQ(st.num_device_allocs, 1);
  EXPECT_EQ(st.allocated_bytes, 0);
  EXPECT_EQ(st.reserved_bytes, static_cast<std::int64_t>(2 * MiB));
  alloc.empty_cache();
  EXPECT_EQ(alloc.stats(0).reserved_bytes, 0);
}

TEST(AllocatorGpu, RecordStreamDefersReuseWhileOtherStreamIsBusy) {
  BLU_REQUIRE_GPU();
  CachingAllocator alloc(cuda_backend());
  blu::cuda::Stream s1 = blu::cuda::Stream::create(0);
  blu::cuda::Stream s2 = blu::cuda::Stream::create(0);
  float* sink = nullptr;
  BLU_CUDA_TEST_CHECK(cudaMalloc(&sink, sizeof(float)));
  float* a = static_cast<float*>(alloc.allocate(4096, 0, s1));
  fill_kernel<<<4, 256, 0, s1>>>(a, 1024, 1.0f);
  blu::cuda::stream_wait_stream(s2, s1);
  // s2 reads `a` for a long time (~0.5 s at 2 GHz).
  spin_kernel<<<1, 32, 0, s2>>>(a, sink, 1000LL * 1000 * 1000);
  BLU_CUDA_TEST_CHECK(cudaGetLastError());
  alloc.record_stream(a, s2);
  alloc.free(a);
  EXPECT_GT(alloc.stats(0).pending_free_bytes, 0);
  void* b = alloc.allocate(4096, 0, s1);
  EXPECT_NE(b, a) << "block reused while s2 still reads it";
  alloc.free(b);
  BLU_CUDA_TEST_CHECK(cudaStreamSynchronize(s2));
  void* c = alloc.allocate(4096, 0, s1);
  EXPECT_EQ(c, a) << "block not reused after s2 finished";
  EXPECT_EQ(alloc.stats(0).pending_free_bytes, 0);
  alloc.free(c);
  BLU_CUDA_TEST_CHECK(cudaDeviceSynchronize());
  BLU_CUDA_TEST_CHECK(cudaFree(sink));
  alloc.empty_cache();
}

TEST(AllocatorGpu, OutOfMemoryFromLimitAndFromDevice) {
  BLU_REQUIRE_GPU();
  CachingAllocator alloc(cuda_backend());
  alloc.set_memory_limit(0, 64 * MiB);
  void* keep = alloc.allocate(40 * MiB, 0, nullptr);
  try {
    alloc.allocate(40 * MiB, 0, nullptr);
    FAIL() << "no out-of-memory error under a 64 MiB limit";
  } catch (const blu::Error& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("CUDA out of memory"), std::string::npos) << m;
    EXPECT_NE(m.find("tried to allocate 40.00 MiB"), std::string::npos) << m;
    EXPECT_NE(m.find("limit on device 0: 64.00 MiB"), std::string::npos) << m;
    EXPECT_NE(m.find("free of"), std::string::npos) << m;  // device free/total printed
  }
  alloc.free(keep);
  alloc.set_memory_limit(0, 0);
  std::size_t free_b = 0, total_b = 0;
  BLU_CUDA_TEST_CHECK(cudaMemGetInfo(&free_b, &total_b));
  try {
    alloc.allocate(total_b * 2, 0, nullptr);
    FAIL() << "no out-of-memory error for twice the device memory";
  } catch (const blu::Error& e) {
    EXPECT_NE(std::string(e.what()).find("CUDA out of memory"), std::string::npos) << e.what();
  }
  // The failed cudaMalloc left no sticky error behind.
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  void* ok = alloc.allocate(MiB, 0, nullptr);
  EXPECT_NE(ok, nullptr);
  alloc.free(ok);
  EXPECT_EQ(alloc.stats(0).num_ooms, 2);
  alloc.empty_cache();
}

TEST(AllocatorGpu, EmptyCacheReturnsMemoryToTheDriver) {
  BLU_REQUIRE_GPU();
  // Other test processes share the GPU (ctest -j), so cudaMemGetInfo moves by up to a few hundred
  // MiB on its own: use a 4 GiB segment and margins of 1 GiB.
  constexpr std::size_t GiB = 1024 * MiB;
  CachingAllocator alloc(cuda_backend());
  std::size_t free1 = 0, free2 = 0, total = 0;
  void* p = alloc.allocate(4 * GiB, 0, nullptr);
  alloc.free(p);
  EXPECT_EQ(alloc.stats(0).reserved_bytes, static_cast<std::int64_t>(4 * GiB));
  BLU_CUDA_TEST_CHECK(cudaMemGetInfo(&free1, &total));
  alloc.empty_cache();
  BLU_CUDA_TEST_CHECK(cudaMemGetInfo(&free2, &total));
  EXPECT_EQ(alloc.stats(0).reserved_bytes, 0);
  EXPECT_GE(free2, free1 + 3 * GiB) << "empty_cache did not return the 4 GiB segment (free "
                                    << free1 << " -> " << free2 << " bytes)";
}

TEST(AllocatorGpu, GraphCaptureAllocatesFromPrivatePool) {
  BLU_REQUIRE_GPU();
  CachingAllocator alloc(cuda_backend());
  blu::cuda::Stream s = blu::cuda::Stream::create(0);
  const int n = 4096;
  // A cached block on s from before the capture must not be used inside it.
  void* before = alloc.allocate(n * sizeof(float), 0, s);
  alloc.free(before);

  cudaGraph_t graph = nullptr;
  BLU_CUDA_TEST_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  alloc.begin_allocate_to_pool(0, /*pool=*/42, s);
  float* in_graph = static_cast<float*>(alloc.allocate(n * sizeof(float), 0, s));
  fill_kernel<<<(n + 255) / 256, 256, 0, s>>>(in_graph, n, 7.0f);
  alloc.end_allocate_to_pool(0, 42);
  BLU_CUDA_TEST_CHECK(cudaStreamEndCapture(s, &graph));
  EXPECT_NE(static_cast<void*>(in_graph), before);
  cudaGraphExec_t exec = nullptr;
  BLU_CUDA_TEST_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  BLU_CUDA_TEST_CHECK(cudaGraphLaunch(exec, s));
  std::vector<float> host(n);
  BLU_CUDA_TEST_CHECK(cudaMemcpyAsync(host.data(), in_graph, n * sizeof(float),
                                      cudaMemcpyDeviceToHost, s));
  BLU_CUDA_TEST_CHECK(cudaStreamSynchronize(s));
  for (int i = 0; i < n; ++i) ASSERT_EQ(host[i], 7.0f + i) << "at " << i;
  // Freed (e.g. by the graph's owner dropping the tensor) it stays in the pool: outside
  // allocations do not get it while the graph lives.
  alloc.free(in_graph);
  std::vector<void*> outside;
  for (int i = 0; i < 8; ++i) {
    outside.push_back(alloc.allocate(n * sizeof(float), 0, s));
    EXPECT_NE(outside.back(), static_cast<void*>(in_graph));
  }
  for (void* p : outside) alloc.free(p);
  EXPECT_EQ(alloc.stats(0).private_pools, 1);
  BLU_CUDA_TEST_CHECK(cudaGraphExecDestroy(exec));
  BLU_CUDA_TEST_CHECK(cudaGraphDestroy(graph));
  alloc.release_pool(0, 42);
  EXPECT_EQ(alloc.stats(0).private_pools, 0);
  alloc.empty_cache();
  EXPECT_EQ(alloc.stats(0).reserved_bytes, 0);
}

TEST(AllocatorGpu, ProcessAllocatorWithCurrentStreams) {
  BLU_REQUIRE_GPU();
  EXPECT_GE(blu::cuda::device_count(), 1);
  EXPECT_TRUE(blu::cuda::is_available());
  EXPECT_EQ(blu::cuda::current_stream(0), nullptr);  // Note [Default stream]
  blu::cuda::Stream s = blu::cuda::Stream::create(0);
  {
    blu::cuda::StreamGuard guard(s, 0);
    EXPECT_EQ(blu::cuda::current_stream(0), s.get());
    EXPECT_EQ(blu::cuda::current_stream(), s.get());
    CachingAllocator& alloc = CachingAllocator::get();
    void* p = alloc.allocate(1000, 0, blu::cuda::current_stream(0));
    EXPECT_EQ(alloc.device_of(p), 0);
    EXPECT_EQ(alloc.block_size(p), 1024u);
    std::string snap = alloc.snapshot_json(0);
    EXPECT_NE(snap.find("\"state\":\"allocated\""), std::string::npos) << snap;
    alloc.free(p);
  }
  EXPECT_EQ(blu::cuda::current_stream(0), nullptr);
}

}  // namespace

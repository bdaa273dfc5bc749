// CPU tests of the caching allocator's bookkeeping, driven through a fake backend: size classes,
// best fit, splitting and coalescing, stream-ordered reuse and record_stream with fake events,
// private pools (with fake capture ids), statistics, the out-of-memory path and the snapshot.
#include <gtest/gtest.h>

#include <iterator>
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "blutensor/cuda_allocator.h"
#include "blutensor/error.h"

namespace {

using blu::cuda::AllocatorBackend;
using blu::cuda::CachingAllocator;
using blu::cuda::MemoryStats;

constexpr std::size_t KiB = 1024;
constexpr std::size_t MiB = 1024 * 1024;

// Device memory is a fake address space (never dereferenced); events complete when the test says.
class FakeBackend final : public AllocatorBackend {
 public:
  struct FakeEvent {
    cudaStream_t stream;
    bool done = false;
    bool recorded = false;
  };

  std::size_t capacity_bytes = 1024 * MiB;  // per device
  std::map<int, std::size_t> used;
  std::map<void*, std::size_t> live;  // segment -> bytes
  std::uintptr_t next_address = 0x10000000;
  int raw_allocs = 0, raw_frees = 0, event_syncs = 0, events_live = 0;
  std::vector<FakeEvent*> events;
  std::map<cudaStream_t, std::uint64_t> capturing;  // stream -> capture id

  ~FakeBackend() override {
    for (FakeEvent* e : events) delete e;
  }

  void* raw_alloc(std::size_t bytes, int device) override {
    if (used[device] + bytes > capacity_bytes) return nullptr;
    used[device] += bytes;
    void* p = reinterpret_cast<void*>(next_address);
    next_address += bytes + 4096;  // gaps: neighbours of different segments never touch
    live[p] = bytes;
    ++raw_allocs;
    return p;
  }
  void raw_free(void* ptr, int device) override {
    auto it = live.find(ptr);
    ASSERT_NE(it, live.end()) << "raw_free of an unknown segment";
    used[device] -= it->second;
    live.erase(it);
    ++raw_frees;
  }
  bool mem_info(int device, std::size_t* free_bytes, std::size_t* total_bytes) override {
    *total_bytes = capacity_bytes;
    *free_bytes = capacity_bytes - used[device];
    return true;
  }
  Event event_create(int) override {
    events.push_back(new FakeEvent{nullptr});
    ++events_live;
    return events.back();
  }
  void event_destroy(Event e, int) override {
    --events_live;
    static_cast<FakeEvent*>(e)->stream = reinterpret_cast<cudaStream_t>(0xdead);
  }
  void event_record(Event e, cudaStream_t s, int) override {
    auto* fe = static_cast<FakeEvent*>(e);
    fe->stream = s;
    fe->recorded = true;
  }
  bool event_query(Event e, int) override { return static_cast<FakeEvent*>(e)->done; }
  void event_synchronize(Event e, int) override {
    static_cast<FakeEvent*>(e)->done = true;
    ++event_syncs;
  }
  std::uint64_t capture_id(cudaStream_t s, int) override {
    auto it = capturing.find(s);
    return it == capturing.end() ? 0 : it->second;
  }

  // Completes every recorded event on stream s (the device "caught up" with it).
  void complete_stream(cudaStream_t s) {
    for (FakeEvent* e : events) {
      if (e->recorded && e->stream == s) e->done = true;
    }
  }
  int recorded_on(cudaStream_t s) const {
    int n = 0;
    for (FakeEvent* e : events) n += e->recorded && e->stream == s;
    return n;
  }
};

cudaStream_t stream(int i) { return reinterpret_cast<cudaStream_t>(static_cast<std::uintptr_t>(i)); }
char* cp(void* p) { return static_cast<char*>(p); }

class AllocatorTest : public ::testing::Test {
 protected:
  FakeBackend backend;
  CachingAllocator alloc{backend};
  cudaStream_t s0 = stream(0);
  cudaStream_t s1 = stream(0x111);
  cudaStream_t s2 = stream(0x222);
};

TEST_F(AllocatorTest, ZeroBytesAndNullFree) {
  EXPECT_EQ(alloc.allocate(0, 0, s0), nullptr);
  alloc.free(nullptr);
  EXPECT_EQ(backend.raw_allocs, 0);
}

TEST_F(AllocatorTest, RoundsTo512AndAlignsBlocks) {
  void* a = alloc.allocate(1, 0, s0);
  void* b = alloc.allocate(513, 0, s0);
  void* c = alloc.allocate(1000, 0, s0);
  EXPECT_EQ(alloc.block_size(a), 512u);
  EXPECT_EQ(alloc.block_size(b), 1024u);
  EXPECT_EQ(alloc.block_size(c), 1024u);
  // Small requests share one 2 MiB segment, consecutively.
  EXPECT_EQ(cp(b), cp(a) + 512);
  EXPECT_EQ(cp(c), cp(b) + 1024);
  MemoryStats s = alloc.stats(0);
  EXPECT_EQ(s.segments, 1);
  EXPECT_EQ(s.reserved_bytes, static_cast<std::int64_t>(2 * MiB));
  EXPECT_EQ(s.allocated_bytes, 512 + 1024 + 1024);
  EXPECT_EQ(s.requested_bytes, 1 + 513 + 1000);
  EXPECT_EQ(s.active_allocations, 3);
  for (void* p : {a, b, c}) alloc.free(p);
}

TEST_F(AllocatorTest, SmallAndLargePoolsUseSeparateSegments) {
  void* small = alloc.allocate(1 * MiB, 0, s0);       // largest small request
  void* mid = alloc.allocate(1 * MiB + 1, 0, s0);     // large pool, 20 MiB segment
  void* big = alloc.allocate(33 * MiB + 5, 0, s0);    // large pool, rounded to 2 MiB: 34 MiB
  EXPECT_EQ(backend.raw_allocs, 3);
  std::set<std::size_t> seg_sizes;
  for (auto& [p, bytes] : backend.live) seg_sizes.insert(bytes);
  EXPECT_EQ(seg_sizes, (std::set<std::size_t>{2 * MiB, 20 * MiB, 34 * MiB}));
  EXPECT_EQ(alloc.block_size(mid), 1 * MiB + 512);
  // The 34 MiB segment keeps the < 1 MiB slack inside the block (no useless split).
  EXPECT_EQ(alloc.block_size(big), 34 * MiB);
  // A second small request fits in the small segment's remaining 1 MiB.
  void* small2 = alloc.allocate(1 * MiB, 0, s0);
  EXPECT_EQ(backend.raw_allocs, 3);
  EXPECT_EQ(cp(small2), cp(small) + MiB);
  for (void* p : {small, mid, big, small2}) alloc.free(p);
}

TEST_F(AllocatorTest, LargeSplitOnlyWhenMoreThan1MiBRemains) {
  void* a = alloc.allocate(18 * MiB + 512, 0, s0);  // 20 MiB segment; 2 MiB - 512 remain: split
  EXPECT_EQ(alloc.block_size(a), 18 * MiB + 512);
  void* b = alloc.allocate(1 * MiB + 512, 0, s0);  // takes the remainder; < 1 MiB left: no split
  EXPECT_EQ(backend.raw_allocs, 1);
  EXPECT_EQ(cp(b), cp(a) + 18 * MiB + 512);
  EXPECT_EQ(alloc.block_size(b), 2 * MiB - 512);
  alloc.free(a);
  alloc.free(b);
  // 19.5 MiB request in the (now whole) 20 MiB segment: 0.5 MiB would remain: no split.
  void* c = alloc.allocate(19 * MiB + 512 * KiB, 0, s0);
  EXPECT_EQ(alloc.block_size(c), 20 * MiB);
  EXPECT_EQ(backend.raw_allocs, 1);
  alloc.free(c);
}

TEST_F(AllocatorTest, FreedBlockIsReusedOnSameStream) {
  void* a = alloc.allocate(4096, 0, s0);
  alloc.free(a);
  void* b = alloc.allocate(4096, 0, s0);
  EXPECT_EQ(a, b);
  EXPECT_EQ(backend.raw_allocs, 1);
  MemoryStats s = alloc.stats(0);
  EXPECT_EQ(s.num_allocations, 2);
  EXPECT_EQ(s.num_frees, 1);
  alloc.free(b);
}

TEST_F(AllocatorTest, BestFitPicksSmallestFittingBlock) {
  // Carve one small segment into blocks separated by live guards, then free the candidates.
  void* p8k = alloc.allocate(8 * KiB, 0, s0);
  void* g1 = alloc.allocate(512, 0, s0);
  void* p3k = alloc.allocate(3 * KiB, 0, s0);
  void* g2 = alloc.allocate(512, 0, s0);
  void* p5k = alloc.allocate(5 * KiB, 0, s0);
  void* g3 = alloc.allocate(512, 0, s0);
  alloc.free(p8k);
  alloc.free(p3k);
  alloc.free(p5k);
  // 4 KiB: the 5 KiB block is the best fit (3 KiB too small, 8 KiB and the tail larger).
  void* q = alloc.allocate(4 * KiB, 0, s0);
  EXPECT_EQ(q, p5k);
  // 3 KiB: exact fit.
  void* r = alloc.allocate(3 * KiB, 0, s0);
  EXPECT_EQ(r, p3k);
  // 6 KiB: the 8 KiB block, split; the 2 KiB tail is then the best fit for 2 KiB.
  void* t = alloc.allocate(6 * KiB, 0, s0);
  EXPECT_EQ(t, p8k);
  void* u = alloc.allocate(2 * KiB, 0, s0);
  EXPECT_EQ(cp(u), cp(p8k) + 6 * KiB);
  // The 1 KiB hole after 5KiB's 4 KiB: next 512 B request takes the smallest hole.
  void* w = alloc.allocate(512, 0, s0);
  EXPECT_EQ(cp(w), cp(p5k) + 4 * KiB);
  EXPECT_EQ(backend.raw_allocs, 1);
  for (void* p : {g1, g2, g3, q, r, t, u, w}) alloc.free(p);
  EXPECT_EQ(alloc.stats(0).allocated_bytes, 0);
}

TEST_F(AllocatorTest, FreeCoalescesNeighboursBackToOneBlock) {
  std::vector<void*> ps;
  for (int i = 0; i < 6; ++i) ps.push_back(alloc.allocate(64 * KiB, 0, s0));
  // Free in an order that exercises merge with prev, with next, and with both.
  for (int i : {1, 3, 2, 0, 5, 4}) alloc.free(ps[i]);
  MemoryStats s = alloc.stats(0);
  EXPECT_EQ(s.allocated_bytes, 0);
  EXPECT_EQ(s.largest_free_block_bytes, static_cast<std::int64_t>(2 * MiB));
  EXPECT_EQ(s.cached_free_bytes, static_cast<std::int64_t>(2 * MiB));
  EXPECT_DOUBLE_EQ(s.fragmentation, 0.0);
  // The snapshot shows one segment with a single free block.
  std::string snap = alloc.snapshot_json(0);
  EXPECT_NE(snap.find("\"state\":\"free\""), std::string::npos) << snap;
  EXPECT_EQ(snap.find("\"state\":\"allocated\""), std::string::npos) << snap;
  // The whole segment can be taken again by one 1 MiB + 1 MiB pair in place.
  void* a = alloc.allocate(1 * MiB, 0, s0);
  EXPECT_EQ(a, ps[0]);
  alloc.free(a);
}

TEST_F(AllocatorTest, FragmentationStatistic) {
  std::vector<void*> ps;
  for (int i = 0; i < 4; ++i) ps.push_back(alloc.allocate(512 * KiB, 0, s0));  // fills 2 MiB
  alloc.free(ps[0]);
  alloc.free(ps[2]);
  MemoryStats s = alloc.stats(0);
  // Free: two separate 512 KiB blocks; largest 512 KiB of 1 MiB free.
  EXPECT_EQ(s.largest_free_block_bytes, static_cast<std::int64_t>(512 * KiB));
  EXPECT_DOUBLE_EQ(s.fragmentation, 0.5);
  alloc.free(ps[1]);
  s = alloc.stats(0);
  EXPECT_EQ(s.largest_free_block_bytes, static_cast<std::int64_t>(1536 * KiB));
  EXPECT_DOUBLE_EQ(s.fragmentation, 0.0);
  alloc.free(ps[3]);
}

TEST_F(AllocatorTest, BlocksAreNotSharedAcrossStreams) {
  void* a = alloc.allocate(4096, 0, s1);
  alloc.free(a);
  void* b = alloc.allocate(4096, 0, s2);
  EXPECT_NE(a, b);
  EXPECT_EQ(backend.raw_allocs, 2);  // s2 got its own segment
  void* c = alloc.allocate(4096, 0, s1);
  EXPECT_EQ(a, c);
  alloc.free(b);
  alloc.free(c);
}

TEST_F(AllocatorTest, RecordStreamDefersReuseUntilEventsComplete) {
  void* a = alloc.allocate(4096, 0, s1);
  alloc.record_stream(a, s2);
  alloc.record_stream(a, s2);  // duplicates are recorded once
  alloc.record_stream(a, s1);  // the allocation stream itself is ignored
  alloc.free(a);
  EXPECT_EQ(backend.recorded_on(s2), 1);
  EXPECT_EQ(backend.recorded_on(s1), 0);
  MemoryStats s = alloc.stats(0);
  EXPECT_EQ(s.pending_free_bytes, 4096);
  EXPECT_EQ(s.allocated_bytes, 0);
  // Not reusable yet: the same-stream request gets another block.
  void* b = alloc.allocate(4096, 0, s1);
  EXPECT_NE(a, b);
  alloc.free(b);
  // Once s2 catches up, the next allocation polls the event and reuses the block.
  backend.complete_stream(s2);
  void* c = alloc.allocate(4096, 0, s1);
  EXPECT_EQ(alloc.stats(0).pending_free_bytes, 0);
  EXPECT_EQ(backend.events_live, 0);
  // Both blocks are free and merged; best fit returns the lowest address first.
  EXPECT_EQ(c, a);
  alloc.free(c);
}

TEST_F(AllocatorTest, RecordStreamOnManyStreamsWaitsForAll) {
  cudaStream_t s3 = stream(0x333);
  void* a = alloc.allocate(100 * KiB, 0, s1);
  alloc.record_stream(a, s2);
  alloc.record_stream(a, s3);
  alloc.free(a);
  backend.complete_stream(s2);
  void* b = alloc.allocate(100 * KiB, 0, s1);
  EXPECT_NE(a, b);  // s3 still pending
  backend.complete_stream(s3);
  void* c = alloc.allocate(100 * KiB, 0, s1);
  EXPECT_EQ(a, c);
  alloc.free(b);
  alloc.free(c);
}

TEST_F(AllocatorTest, EmptyCacheReleasesWholeFreeSegmentsOnly) {
  void* a = alloc.allocate(4096, 0, s0);       // small segment, stays live
  void* b = alloc.allocate(30 * MiB, 0, s0);   // large segment, freed
  void* c = alloc.allocate(4096, 0, s1);       // another small segment, pending on an event
  alloc.record_stream(c, s2);
  alloc.free(b);
  alloc.free(c);
  EXPECT_EQ(alloc.stats(0).segments, 3);
  alloc.empty_cache();
  MemoryStats s = alloc.stats(0);
  EXPECT_EQ(backend.event_syncs, 1);  // empty_cache waited for the pending event
  EXPECT_EQ(s.segments, 1);
  EXPECT_EQ(s.reserved_bytes, static_cast<std::int64_t>(2 * MiB));
  EXPECT_EQ(s.num_device_frees, 2);
  EXPECT_EQ(backend.live.size(), 1u);
  alloc.free(a);
  alloc.empty_cache(0);
  EXPECT_EQ(alloc.stats(0).reserved_bytes, 0);
  EXPECT_TRUE(backend.live.empty());
}

TEST_F(AllocatorTest, PeakStatsAndReset) {
  void* a = alloc.allocate(10 * MiB, 0, s0);
  void* b = alloc.allocate(10 * MiB, 0, s0);
  alloc.free(a);
  MemoryStats s = alloc.stats(0);
  EXPECT_EQ(s.peak_allocated_bytes, static_cast<std::int64_t>(20 * MiB));
  EXPECT_EQ(s.allocated_bytes, static_cast<std::int64_t>(10 * MiB));
  EXPECT_EQ(s.peak_requested_bytes, static_cast<std::int64_t>(20 * MiB));
  EXPECT_EQ(s.peak_reserved_bytes, s.reserved_bytes);
  alloc.reset_peak(0);
  s = alloc.stats(0);
  EXPECT_EQ(s.peak_allocated_bytes, static_cast<std::int64_t>(10 * MiB));
  alloc.free(b);
}

TEST_F(AllocatorTest, DevicesAreIndependent) {
  void* a = alloc.allocate(4096, 0, s0);
  void* b = alloc.allocate(4096, 1, s0);
  EXPECT_EQ(alloc.device_of(a), 0);
  EXPECT_EQ(alloc.device_of(b), 1);
  EXPECT_EQ(alloc.stats(0).allocated_bytes, 4096);
  EXPECT_EQ(alloc.stats(1).allocated_bytes, 4096);
  EXPECT_EQ(alloc.stats(5).reserved_bytes, 0);  // never used
  alloc.free(a);
  alloc.free(b);
  EXPECT_THROW(alloc.allocate(16, -1, s0), blu::Error);
  EXPECT_THROW(alloc.allocate(16, 1000, s0), blu::Error);
}

TEST_F(AllocatorTest, InvalidAndDoubleFreeThrow) {
  void* a = alloc.allocate(4096, 0, s0);
  alloc.free(a);
  try {
    alloc.free(a);
    FAIL() << "double free did not throw";
  } catch (const blu::Error& e) {
    EXPECT_NE(std::string(e.what()).find("not allocated by this allocator or was already freed"),
              std::string::npos)
        << e.what();
  }
  int local = 0;
  EXPECT_THROW(alloc.free(&local), blu::Error);
  EXPECT_THROW(alloc.record_stream(&local, s1), blu::Error);
}

TEST_F(AllocatorTest, OutOfMemoryRetriesAfterReleasingCache) {
  backend.capacity_bytes = 64 * MiB;
  void* a = alloc.allocate(40 * MiB, 0, s1);  // 40 MiB segment on s1
  alloc.free(a);                               // cached, but only for s1
  // s2 needs 40 MiB: the device has 24 MiB left; the retry releases s1's cached segment.
  void* b = alloc.allocate(40 * MiB, 0, s2);
  MemoryStats s = alloc.stats(0);
  EXPECT_EQ(s.num_alloc_retries, 1);
  EXPECT_EQ(s.num_device_frees, 1);
  EXPECT_EQ(s.reserved_bytes, static_cast<std::int64_t>(40 * MiB));
  alloc.free(b);
}

TEST_F(AllocatorTest, OutOfMemoryRetryWaitsForPendingEvents) {
  backend.capacity_bytes = 40 * MiB;
  void* a = alloc.allocate(40 * MiB, 0, s1);
  alloc.record_stream(a, s2);
  alloc.free(a);  // pending on s2
  void* b = alloc.allocate(40 * MiB, 0, s1);  // needs the pending block: retry waits, reuses
  EXPECT_EQ(a, b);
  EXPECT_EQ(backend.event_syncs, 1);
  EXPECT_EQ(alloc.stats(0).num_alloc_retries, 1);
  alloc.free(b);
}

TEST_F(AllocatorTest, OutOfMemoryErrorNamesRequestAndStats) {
  backend.capacity_bytes = 64 * MiB;
  void* keep = alloc.allocate(50 * MiB, 0, s0);
  try {
    alloc.allocate(30 * MiB + 123, 0, s0);
    FAIL() << "expected out of memory";
  } catch (const blu::Error& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("CUDA out of memory"), std::string::npos) << m;
    EXPECT_NE(m.find("tried to allocate 30.00 MiB (31457403 bytes"), std::string::npos) << m;
    EXPECT_NE(m.find("on device 0"), std::string::npos) << m;
    EXPECT_NE(m.find("14.00 MiB free of 64.00 MiB total"), std::string::npos) << m;
    EXPECT_NE(m.find("allocated: 50.00 MiB"), std::string::npos) << m;
    EXPECT_NE(m.find("reserved: 50.00 MiB"), std::string::npos) << m;
    EXPECT_NE(m.find("fragmentation"), std::string::npos) << m;
  }
  MemoryStats s = alloc.stats(0);
  EXPECT_EQ(s.num_ooms, 1);
  EXPECT_EQ(s.num_alloc_retries, 1);
  EXPECT_EQ(s.allocated_bytes, static_cast<std::int64_t>(50 * MiB));  // state intact
  alloc.free(keep);
  void* again = alloc.allocate(30 * MiB, 0, s0);  // works after the free
  alloc.free(again);
}

TEST_F(AllocatorTest, MemoryLimitActsLikeAFullDevice) {
  alloc.set_memory_limit(0, 8 * MiB);
  EXPECT_THROW(alloc.allocate(2 * MiB + 1, 0, s0), blu::Error);  // 20 MiB segment > limit
  EXPECT_EQ(backend.raw_allocs, 0);
  alloc.set_memory_limit(0, 0);
  void* a = alloc.allocate(2 * MiB + 1, 0, s0);
  alloc.free(a);
}

TEST_F(AllocatorTest, MemoryLimitMessage) {
  alloc.set_memory_limit(0, 8 * MiB);
  void* small = alloc.allocate(4096, 0, s0);  // 2 MiB small segment fits the limit
  try {
    alloc.allocate(12 * MiB, 0, s0);
    FAIL();
  } catch (const blu::Error& e) {
    EXPECT_NE(std::string(e.what()).find("limit on device 0: 8.00 MiB"), std::string::npos)
        << e.what();
  }
  alloc.free(small);
}

TEST_F(AllocatorTest, PrivatePoolIsolatesCaptureAllocations) {
  backend.capturing[s1] = 77;  // s1 is capturing graph sequence 77
  void* before = alloc.allocate(4096, 0, s1);
  alloc.free(before);  // cached in the global pool for s1
  alloc.begin_allocate_to_pool(0, /*pool=*/5, s1);
  void* in_pool = alloc.allocate(4096, 0, s1);
  EXPECT_NE(in_pool, before);  // global cache not used for the capture
  // Another stream joined to the same capture (fork) also allocates from the pool.
  backend.capturing[s2] = 77;
  void* fork = alloc.allocate(4096, 0, s2);
  alloc.free(fork);
  void* reuse = alloc.allocate(4096, 0, s2);
  EXPECT_EQ(reuse, fork);  // inside the pool, usual stream rules
  alloc.end_allocate_to_pool(0, 5);
  backend.capturing.clear();
  alloc.free(in_pool);
  alloc.free(reuse);
  // Outside the capture, allocations never get the pool's blocks.
  void* outside = alloc.allocate(4096, 0, s1);
  EXPECT_EQ(outside, before);
  void* outside2 = alloc.allocate(4096, 0, s1);
  EXPECT_NE(outside2, in_pool);
  EXPECT_EQ(alloc.stats(0).private_pools, 1);
  // empty_cache leaves the live pool's segments alone.
  std::size_t live_before = backend.live.size();
  alloc.free(outside);
  alloc.free(outside2);
  alloc.empty_cache();
  EXPECT_EQ(backend.live.size(), live_before - 1);  // only the global small segment went
  // Releasing the pool returns its (now fully free) segments.
  alloc.release_pool(0, 5);
  EXPECT_TRUE(backend.live.empty());
  MemoryStats s = alloc.stats(0);
  EXPECT_EQ(s.private_pools, 0);
  EXPECT_EQ(s.reserved_bytes, 0);
}

TEST_F(AllocatorTest, ReleasedPoolFreesSegmentsWhenLastBlockIsFreed) {
  alloc.begin_allocate_to_pool(0, 9, s1);  // no capture: routes by stream identity
  void* a = alloc.allocate(3 * MiB, 0, s1);
  alloc.end_allocate_to_pool(0, 9);
  alloc.release_pool(0, 9);
  EXPECT_EQ(alloc.stats(0).private_pools, 1);  // still holds a live block
  EXPECT_EQ(backend.live.size(), 1u);
  alloc.free(a);
  EXPECT_TRUE(backend.live.empty());
  EXPECT_EQ(alloc.stats(0).private_pools, 0);
}

TEST_F(AllocatorTest, SharedPoolNeedsEveryRelease) {
  alloc.begin_allocate_to_pool(0, 3, s1);
  void* a = alloc.allocate(4096, 0, s1);
  alloc.end_allocate_to_pool(0, 3);
  alloc.begin_allocate_to_pool(0, 3, s1);  // a second graph shares the pool
  void* b = alloc.allocate(4096, 0, s1);
  alloc.end_allocate_to_pool(0, 3);
  alloc.free(a);
  alloc.free(b);
  alloc.release_pool(0, 3);
  EXPECT_EQ(backend.live.size(), 1u);  // the second graph still holds it
  alloc.release_pool(0, 3);
  EXPECT_TRUE(backend.live.empty());
  EXPECT_THROW(alloc.release_pool(0, 3), blu::Error);
}

TEST_F(AllocatorTest, PoolApiMisuseThrows) {
  EXPECT_THROW(alloc.begin_allocate_to_pool(0, 0, s1), blu::Error);  // id 0 reserved
  EXPECT_THROW(alloc.end_allocate_to_pool(0, 4), blu::Error);        // never begun
  alloc.begin_allocate_to_pool(0, 4, s1);
  EXPECT_THROW(alloc.release_pool(0, 4), blu::Error);  // still allocating to it
  alloc.end_allocate_to_pool(0, 4);
  alloc.release_pool(0, 4);
}

TEST_F(AllocatorTest, EventsAreDeferredDuringCapture) {
  void* a = alloc.allocate(4096, 0, s0);
  alloc.record_stream(a, s2);
  backend.capturing[s1] = 12;
  alloc.begin_allocate_to_pool(0, 1, s1);
  alloc.free(a);  // during capture: no event recorded yet
  EXPECT_EQ(backend.recorded_on(s2), 0);
  EXPECT_THROW(alloc.empty_cache(), blu::Error);  // cudaFree is illegal during capture
  // An OOM during capture throws at once (no retry that would cudaFree).
  backend.capacity_bytes = 4 * MiB;
  try {
    alloc.allocate(100 * MiB, 0, s1);
    FAIL();
  } catch (const blu::Error& e) {
    EXPECT_NE(std::string(e.what()).find("capture is underway"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("private pool 1"), std::string::npos) << e.what();
  }
  alloc.end_allocate_to_pool(0, 1);
  backend.capturing.clear();
  EXPECT_EQ(backend.recorded_on(s2), 1);  // recorded when the capture ended
  backend.complete_stream(s2);
  void* b = alloc.allocate(4096, 0, s0);
  EXPECT_EQ(a, b);
  alloc.free(b);
  alloc.release_pool(0, 1);
}

TEST_F(AllocatorTest, SnapshotDescribesSegmentsAndBlocks) {
  void* a = alloc.allocate(1000, 0, s0);
  void* b = alloc.allocate(3 * MiB, 0, s1);
  void* c = alloc.allocate(2048, 0, s0);
  alloc.record_stream(c, s2);
  alloc.free(c);
  std::string j = alloc.snapshot_json(0);
  EXPECT_EQ(j.rfind("{\"device\":0,\"stats\":{", 0), 0u) << j;
  EXPECT_NE(j.find("\"pool\":\"small\""), std::string::npos) << j;
  EXPECT_NE(j.find("\"pool\":\"large\""), std::string::npos) << j;
  EXPECT_NE(j.find("\"bytes\":2097152"), std::string::npos) << j;
  EXPECT_NE(j.find("\"bytes\":20971520"), std::string::npos) << j;
  EXPECT_NE(j.find("\"requested_bytes\":1000,\"state\":\"allocated\""), std::string::npos) << j;
  EXPECT_NE(j.find("\"state\":\"pending_free\""), std::string::npos) << j;
  EXPECT_NE(j.find("\"stream\":\"0x111\""), std::string::npos) << j;
  // Balanced braces and brackets (a cheap well-formedness check).
  int braces = 0, brackets = 0;
  for (char ch : j) {
    braces += ch == '{' ? 1 : ch == '}' ? -1 : 0;
    brackets += ch == '[' ? 1 : ch == ']' ? -1 : 0;
    ASSERT_GE(braces, 0);
    ASSERT_GE(brackets, 0);
  }
  EXPECT_EQ(braces, 0);
  EXPECT_EQ(brackets, 0);
  alloc.free(a);
  alloc.free(b);
  backend.complete_stream(s2);
}

TEST_F(AllocatorTest, RandomizedStressKeepsInvariants) {
  // Deterministic LCG; random sizes across both pools and three streams, random frees. After
  // every step: allocated == sum of live block sizes; blocks never overlap.
  backend.capacity_bytes = std::size_t{1} << 40;
  std::uint64_t state = 12345;
  auto next = [&]() {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    return state >> 33;
  };
  cudaStream_t streams[3] = {s0, s1, s2};
  std::map<char*, std::size_t> live;  // ptr -> block size
  std::int64_t expected_alloc = 0;
  for (int step = 0; step < 3000; ++step) {
    bool do_alloc = live.empty() || next() % 100 < 55;
    if (do_alloc) {
      std::size_t bytes = next() % 4 == 0 ? 1 + next() % (24 * MiB) : 1 + next() % (256 * KiB);
      cudaStream_t st = streams[next() % 3];
      char* p = cp(alloc.allocate(bytes, 0, st));
      std::size_t sz = alloc.block_size(p);
      ASSERT_GE(sz, bytes);
      ASSERT_EQ(sz % 512, 0u);
      auto it = live.lower_bound(p);
      if (it != live.end()) {
        ASSERT_LE(p + sz, it->first) << "overlap at step " << step;
      }
      if (it != live.begin()) {
        auto pr = std::prev(it);
        ASSERT_LE(pr->first + pr->second, p) << "overlap at step " << step;
      }
      live[p] = sz;
      expected_alloc += static_cast<std::int64_t>(sz);
    } else {
      auto it = live.begin();
      std::advance(it, static_cast<long>(next() % live.size()));
      if (next() % 5 == 0) alloc.record_stream(it->first, streams[next() % 3]);
      expected_alloc -= static_cast<std::int64_t>(it->second);
      alloc.free(it->first);
      live.erase(it);
    }
    if (step % 97 == 0) {
      for (cudaStream_t st : streams) backend.complete_stream(st);
    }
    ASSERT_EQ(alloc.stats(0).allocated_bytes, expected_alloc) << "step " << step;
  }
  for (auto& [p, sz] : live) alloc.free(p);
  for (cudaStream_t st : streams) backend.complete_stream(st);
  alloc.empty_cache();
  MemoryStats s = alloc.stats(0);
  EXPECT_EQ(s.allocated_bytes, 0);
  EXPECT_EQ(s.reserved_bytes, 0);
  EXPECT_EQ(s.segments, 0);
  EXPECT_TRUE(backend.live.empty());
  EXPECT_EQ(backend.events_live, 0);
}

}  // namespace

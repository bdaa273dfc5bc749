// The caching allocator's core: pools, best fit, splitting, coalescing, stream-ordered reuse,
// record_stream events, private (graph) pools, statistics, snapshots and the out-of-memory path.
// It reaches the device only through AllocatorBackend, so all of this is tested with a fake
// backend on the CPU. PyTorch's CUDACachingAllocator was read for ideas; this is a fresh design.
#include <algorithm>
#include <array>
#include <cstdio>
#include <map>
#include <mutex>
#include <set>
#include <sstream>
#include <unordered_map>
#include <vector>

#include "allocator/format_bytes.h"
#include "blutensor/cuda_allocator.h"
#include "blutensor/error.h"

namespace blu::cuda {

// Note [Size classes]
// Every request is rounded up to kRoundBytes (512 B) so that all blocks stay 512-byte aligned
// inside 256-byte aligned segments and small odd sizes share blocks. Requests up to 1 MiB go to
// the small pool, whose segments are 2 MiB; a small block is split when at least 512 B remain.
// Larger requests go to the large pool: under 10 MiB they get a 20 MiB segment (so several
// mid-sized tensors share one cudaMalloc), above that the request rounded to 2 MiB. A large block
// is split only when more than 1 MiB would remain: smaller remainders would be useless to the
// large pool and would fragment it, so the request keeps the slack (counted as allocated).
// Small and large pools never exchange memory: a long-lived small tensor cannot pin a huge
// segment, which is the main source of fragmentation in training loops.
//
// Note [Best fit, splitting, coalescing]
// Each pool keeps its free blocks in a set ordered by (stream, size, address). The lookup is
// lower_bound(stream, size): the smallest free block of that stream that fits, lowest address on
// ties (deterministic). The block is split; the tail goes back to the set. Blocks of a segment
// form an address-ordered doubly linked list; a freed block absorbs free neighbours, so a segment
// whose blocks are all free is again one block and can be released by empty_cache. The first
// block object of a segment is never deleted (merges keep the lower-address object), so it names
// the segment for the snapshot.
//
// Note [Events and capture]
// free() of a block used on other streams records one event per such stream and parks the block
// (state kPending) until all of them have completed; pending events are polled at the start of
// every allocate(). While any CUDA-graph capture is underway (in any thread: global capture mode
// forbids cudaEventQuery in every thread), events are neither polled nor recorded: free() defers
// the block (its events are recorded when the last capture ends), and the out-of-memory retry,
// which would cudaFree, is skipped.
//
// Note [Private pools]
// A graph replays its kernels on the very addresses it saw at capture, long after the capture.
// So memory handed out during capture must not be given to anyone else while the graph lives:
// begin_allocate_to_pool routes the capture's allocations into a private pool (its own small and
// large block sets and segments). Inside the pool, reuse follows the usual stream rules, which is
// safe because the replay repeats the capture's order. Blocks of a private pool, once freed, go
// back to that pool, never to the global pools, and empty_cache leaves the pool alone. When the
// last reference is dropped (release_pool), the pool's whole free segments are returned to the
// device, the others when their last block is freed. Tensors created before the capture and used
// by the graph (static inputs) must be kept alive by the caller, as in every graph API.
//
// Note [Out-of-memory retry]
// When the device (or set_memory_limit) refuses a new segment, the allocator waits for all
// pending events, tries the cache again, then releases every whole free segment of the global
// pools and of released private pools (cudaFree synchronises the device) and asks once more.
// Only then does it throw, with the request and the stats in the message.
//
// Note [Locking]
// One mutex guards everything. Allocation is a few set operations; contention only matters with
// many threads on many devices in one process, which blutrain does not do (one process per GPU).

namespace {

constexpr int kMaxDevices = 64;

enum class BlockState { kFree, kAllocated, kPending };

struct PrivatePool;
struct BlockPool;

struct Block {
  char* ptr = nullptr;
  std::size_t size = 0;
  std::size_t requested = 0;  // when allocated
  int device = 0;
  cudaStream_t stream = nullptr;
  BlockPool* pool = nullptr;
  BlockState state = BlockState::kFree;
  Block* prev = nullptr;  // neighbours in the segment, by address
  Block* next = nullptr;
  int pending_events = 0;
  std::vector<cudaStream_t> stream_uses;  // from record_stream
  bool deferred = false;                  // freed during capture, events not recorded yet
};

struct BlockLess {
  bool operator()(const Block* a, const Block* b) const {
    auto sa = reinterpret_cast<std::uintptr_t>(a->stream);
    auto sb = reinterpret_cast<std::uintptr_t>(b->stream);
    if (sa != sb) return sa < sb;
    if (a->size != b->size) return a->size < b->size;
    return a->ptr < b->ptr;
  }
};

struct BlockPool {
  bool is_small = false;
  PrivatePool* owner = nullptr;  // nullptr: a global pool
  std::set<Block*, BlockLess> free_blocks;
};

struct PrivatePool {
  MemPoolId id = 0;
  int refs = 0;
  std::int64_t segments = 0;
  BlockPool small{true, nullptr, {}};
  BlockPool large{false, nullptr, {}};
};

struct Segment {
  Block* head = nullptr;
  std::size_t bytes = 0;
};

struct Route {
  MemPoolId pool = 0;
  cudaStream_t stream = nullptr;
  std::uint64_t capture_id = 0;  // 0: route by stream identity
};

struct PendingEvent {
  AllocatorBackend::Event event;
  Block* block;
};

struct DeviceState {
  BlockPool small{true, nullptr, {}};
  BlockPool large{false, nullptr, {}};
  std::map<MemPoolId, std::unique_ptr<PrivatePool>> private_pools;
  std::vector<Route> routes;
  std::map<char*, Segment> segments;  // by base address
  std::vector<PendingEvent> pending;
  std::vector<Block*> deferred;
  MemoryStats stats;
  std::size_t memory_limit = 0;
};

std::size_t round_size(std::size_t bytes) {
  constexpr std::size_t r = CachingAllocator::kRoundBytes;
  return bytes < r ? r : (bytes + r - 1) / r * r;
}

std::size_t segment_size_for(std::size_t size) {
  using CA = CachingAllocator;
  if (size <= CA::kSmallRequestMaxBytes) return CA::kSmallSegmentBytes;
  if (size < CA::kMidRequestMaxBytes) return CA::kLargeSegmentMinBytes;
  constexpr std::size_t r = CA::kLargeSegmentRoundBytes;
  return (size + r - 1) / r * r;
}

bool should_split(const Block* block, std::size_t size) {
  std::size_t remaining = block->size - size;
  if (block->pool->is_small) return remaining >= CachingAllocator::kRoundBytes;
  return remaining > CachingAllocator::kSmallRequestMaxBytes;
}

std::string ptr_str(const void* p) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "0x%llx",
                static_cast<unsigned long long>(reinterpret_cast<std::uintptr_t>(p)));
  return buf;
}

void update_peaks(MemoryStats& s) {
  s.peak_allocated_bytes = std::max(s.peak_allocated_bytes, s.allocated_bytes);
  s.peak_reserved_bytes = std::max(s.peak_reserved_bytes, s.reserved_bytes);
  s.peak_requested_bytes = std::max(s.peak_requested_bytes, s.requested_bytes);
}

}  // namespace

struct CachingAllocator::Impl {
  explicit Impl(AllocatorBackend& b) : backend(b) {}

  AllocatorBackend& backend;
  mutable std::mutex mutex;
  std::array<std::unique_ptr<DeviceState>, kMaxDevices> devices;
  std::unordered_map<const void*, Block*> allocated;  // every device
  int captures_underway = 0;                          // global: see Note [Events and capture]

  DeviceState& dev(int device) {
    BLU_CHECK(device >= 0 && device < kMaxDevices, "CachingAllocator: invalid device ", device);
    if (!devices[device]) devices[device] = std::make_unique<DeviceState>();
    return *devices[device];
  }
  const DeviceState* dev_or_null(int device) const {
    BLU_CHECK(device >= 0 && device < kMaxDevices, "CachingAllocator: invalid device ", device);
    return devices[device].get();
  }

  // ---- pool selection ------------------------------------------------------------------------

  PrivatePool* route_for(DeviceState& d, int device, cudaStream_t stream) {
    if (d.routes.empty()) return nullptr;
    bool have_cap = false;
    std::uint64_t cap = 0;
    for (auto it = d.routes.rbegin(); it != d.routes.rend(); ++it) {
      bool match;
      if (it->capture_id == 0) {
        match = it->stream == stream;
      } else {
        if (!have_cap) {
          cap = backend.capture_id(stream, device);
          have_cap = true;
        }
        match = cap == it->capture_id;
      }
      if (match) return d.private_pools.at(it->pool).get();
    }
    return nullptr;
  }

  // ---- events --------------------------------------------------------------------------------

  void insert_events(DeviceState& d, Block* block) {
    for (cudaStream_t s : block->stream_uses) {
      AllocatorBackend::Event e = backend.event_create(block->device);
      backend.event_record(e, s, block->device);
      d.pending.push_back({e, block});
      ++block->pending_events;
    }
    block->stream_uses.clear();
  }

  // Polls (or, if `wait`, waits for) the pending events of a device; completed blocks are freed.
  void process_events(DeviceState& d, bool wait) {
    if (captures_underway > 0) return;
    std::vector<PendingEvent> still;
    std::vector<PendingEvent> pending;
    pending.swap(d.pending);
    for (const PendingEvent& p : pending) {
      int device = p.block->device;
      if (wait) backend.event_synchronize(p.event, device);
      if (wait || backend.event_query(p.event, device)) {
        backend.event_destroy(p.event, device);
        if (--p.block->pending_events == 0) {
          d.stats.pending_free_bytes -= static_cast<std::int64_t>(p.block->size);
          free_block(d, p.block);
        }
      } else {
        still.push_back(p);
      }
    }
    // free_block cannot add pending events, so `d.pending` is still empty here.
    d.pending = std::move(still);
  }

  void insert_deferred_events() {
    for (auto& dp : devices) {
      if (!dp) continue;
      std::vector<Block*> deferred;
      deferred.swap(dp->deferred);
      for (Block* b : deferred) {
        b->deferred = false;
        insert_events(*dp, b);
      }
    }
  }

  // ---- blocks --------------------------------------------------------------------------------

  // Puts a no-longer-used block into its pool's free set, merging with free neighbours; releases
  // the segment at once if it belongs to a released private pool and is now entirely free.
  void free_block(DeviceState& d, Block* block) {
    BlockPool& pool = *block->pool;
    block->state = BlockState::kFree;
    block->requested = 0;
    if (Block* p = block->prev; p != nullptr && p->state == BlockState::kFree) {
      pool.free_blocks.erase(p);
      p->size += block->size;
      p->next = block->next;
      if (p->next) p->next->prev = p;
      delete block;
      block = p;
    }
    if (Block* n = block->next; n != nullptr && n->state == BlockState::kFree) {
      pool.free_blocks.erase(n);
      block->size += n->size;
      block->next = n->next;
      if (block->next) block->next->prev = block;
      delete n;
    }
    pool.free_blocks.insert(block);
    PrivatePool* owner = pool.owner;
    if (owner != nullptr && owner->refs == 0 && captures_underway == 0 &&
        block->prev == nullptr && block->next == nullptr) {
      release_segment(d, block);
      maybe_erase_pool(d, owner);
    }
  }

  // Returns a whole free segment (a block without neighbours) to the device.
  void release_segment(DeviceState& d, Block* block) {
    BlockPool& pool = *block->pool;
    pool.free_blocks.erase(block);
    auto it = d.segments.find(block->ptr);
    std::size_t bytes = it->second.bytes;
    d.segments.erase(it);
    backend.raw_free(block->ptr, block->device);
    d.stats.reserved_bytes -= static_cast<std::int64_t>(bytes);
    d.stats.segments -= 1;
    d.stats.num_device_frees += 1;
    if (pool.owner) pool.owner->segments -= 1;
    delete block;
  }

  void maybe_erase_pool(DeviceState& d, PrivatePool* pool) {
    if (pool->refs == 0 && pool->segments == 0) {
      d.private_pools.erase(pool->id);
      d.stats.private_pools -= 1;
    }
  }

  // Releases the whole free segments of the global pools and of released private pools.
  void release_cached_segments(DeviceState& d) {
    auto release_pool_blocks = [&](BlockPool& pool) {
      std::vector<Block*> whole;
      for (Block* b : pool.free_blocks) {
        if (b->prev == nullptr && b->next == nullptr) whole.push_back(b);
      }
      for (Block* b : whole) release_segment(d, b);
    };
    release_pool_blocks(d.small);
    release_pool_blocks(d.large);
    std::vector<PrivatePool*> released;
    for (auto& [id, pp] : d.private_pools) {
      if (pp->refs == 0) released.push_back(pp.get());
    }
    for (PrivatePool* pp : released) {
      release_pool_blocks(pp->small);
      release_pool_blocks(pp->large);
      maybe_erase_pool(d, pp);
    }
  }

  Block* find_free(BlockPool& pool, cudaStream_t stream, std::size_t size) {
    Block key;
    key.stream = stream;
    key.size = size;
    key.ptr = nullptr;
    auto it = pool.free_blocks.lower_bound(&key);
    if (it == pool.free_blocks.end() || (*it)->stream != stream) return nullptr;
    Block* b = *it;
    pool.free_blocks.erase(it);
    return b;
  }

  Block* new_segment(DeviceState& d, BlockPool& pool, int device, cudaStream_t stream,
                     std::size_t size) {
    std::size_t bytes = segment_size_for(size);
    if (d.memory_limit != 0 &&
        static_cast<std::size_t>(d.stats.reserved_bytes) + bytes > d.memory_limit) {
      return nullptr;
    }
    void* p = backend.raw_alloc(bytes, device);
    if (p == nullptr) return nullptr;
    auto* b = new Block;
    b->ptr = static_cast<char*>(p);
    b->size = bytes;
    b->device = device;
    b->stream = stream;
    b->pool = &pool;
    d.segments[b->ptr] = Segment{b, bytes};
    d.stats.reserved_bytes += static_cast<std::int64_t>(bytes);
    d.stats.segments += 1;
    d.stats.num_device_allocs += 1;
    if (pool.owner) pool.owner->segments += 1;
    update_peaks(d.stats);
    return b;
  }

  [[noreturn]] void throw_oom(DeviceState& d, int device, cudaStream_t stream, std::size_t bytes,
                              std::size_t size, const PrivatePool* pp, bool retried) {
    d.stats.num_ooms += 1;
    std::ostringstream os;
    os << "CUDA out of memory: tried to allocate " << format_bytes(bytes) << " (" << bytes
       << " bytes, block " << size << " bytes, new segment " << segment_size_for(size)
       << " bytes) on device " << device << ", stream " << ptr_str(stream);
    if (pp) os << ", private pool " << pp->id;
    os << ".\n";
    std::size_t free_b = 0, total_b = 0;
    if (backend.mem_info(device, &free_b, &total_b)) {
      os << "Device " << device << ": " << format_bytes(free_b) << " free of "
         << format_bytes(total_b) << " total.\n";
    }
    if (d.memory_limit != 0) {
      os << "Allocator limit on device " << device << ": " << format_bytes(d.memory_limit)
         << " (set_memory_limit).\n";
    }
    os << (retried ? "After waiting for pending frees and releasing cached segments, the "
                     "allocator holds:\n"
                   : "No retry was possible (a CUDA graph capture is underway). The allocator "
                     "holds:\n");
    os << stats_locked(device).to_string();
    os << "Free tensors you no longer need, reduce the batch size, or use a smaller model.";
    BLU_THROW(os.str());
  }

  // ---- the public operations, lock held ------------------------------------------------------

  void* allocate(std::size_t bytes, int device, cudaStream_t stream) {
    if (bytes == 0) return nullptr;
    DeviceState& d = dev(device);
    if (captures_underway == 0) {
      if (!d.deferred.empty()) insert_deferred_events();
      process_events(d, /*wait=*/false);
    }
    std::size_t size = round_size(bytes);
    PrivatePool* pp = route_for(d, device, stream);
    bool small = size <= kSmallRequestMaxBytes;
    BlockPool& pool = pp ? (small ? pp->small : pp->large) : (small ? d.small : d.large);

    Block* block = find_free(pool, stream, size);
    if (block == nullptr) block = new_segment(d, pool, device, stream, size);
    if (block == nullptr) {
      if (captures_underway > 0) throw_oom(d, device, stream, bytes, size, pp, false);
      d.stats.num_alloc_retries += 1;
      process_events(d, /*wait=*/true);
      block = find_free(pool, stream, size);
      if (block == nullptr) {
        release_cached_segments(d);
        block = new_segment(d, pool, device, stream, size);
      }
      if (block == nullptr) throw_oom(d, device, stream, bytes, size, pp, true);
    }

    if (should_split(block, size)) {
      auto* rest = new Block;
      rest->ptr = block->ptr + size;
      rest->size = block->size - size;
      rest->device = device;
      rest->stream = stream;
      rest->pool = &pool;
      rest->prev = block;
      rest->next = block->next;
      if (rest->next) rest->next->prev = rest;
      block->next = rest;
      block->size = size;
      pool.free_blocks.insert(rest);
    }
    block->state = BlockState::kAllocated;
    block->requested = bytes;
    allocated[block->ptr] = block;

    MemoryStats& s = d.stats;
    s.allocated_bytes += static_cast<std::int64_t>(block->size);
    s.requested_bytes += static_cast<std::int64_t>(bytes);
    s.active_allocations += 1;
    s.num_allocations += 1;
    update_peaks(s);
    return block->ptr;
  }

  Block* lookup(const void* ptr, const char* op) const {
    auto it = allocated.find(ptr);
    BLU_CHECK(it != allocated.end(), "CachingAllocator::", op, ": pointer ", ptr_str(ptr),
              " was not allocated by this allocator or was already freed");
    return it->second;
  }

  void free(void* ptr) {
    if (ptr == nullptr) return;
    Block* block = lookup(ptr, "free");
    allocated.erase(block->ptr);
    DeviceState& d = dev(block->device);
    MemoryStats& s = d.stats;
    s.allocated_bytes -= static_cast<std::int64_t>(block->size);
    s.requested_bytes -= static_cast<std::int64_t>(block->requested);
    s.active_allocations -= 1;
    s.num_frees += 1;
    if (!block->stream_uses.empty()) {
      block->state = BlockState::kPending;
      s.pending_free_bytes += static_cast<std::int64_t>(block->size);
      if (captures_underway > 0) {
        block->deferred = true;
        d.deferred.push_back(block);
      } else {
        insert_events(d, block);
      }
      return;
    }
    free_block(d, block);
  }

  void record_stream(void* ptr, cudaStream_t stream) {
    Block* block = lookup(ptr, "record_stream");
    if (stream == block->stream) return;
    auto& uses = block->stream_uses;
    if (std::find(uses.begin(), uses.end(), stream) == uses.end()) uses.push_back(stream);
  }

  void empty_cache(int device) {
    BLU_CHECK(captures_underway == 0,
              "CachingAllocator::empty_cache: not allowed while a CUDA graph capture is underway");
    DeviceState& d = dev(device);
    if (!d.deferred.empty()) insert_deferred_events();
    process_events(d, /*wait=*/true);
    release_cached_segments(d);
  }

  MemoryStats stats_locked(int device) const {
    const DeviceState* d = dev_or_null(device);
    if (d == nullptr) return MemoryStats{};
    MemoryStats s = d->stats;
    std::int64_t cached = 0, largest = 0;
    auto scan = [&](const BlockPool& pool) {
      for (const Block* b : pool.free_blocks) {
        cached += static_cast<std::int64_t>(b->size);
        largest = std::max(largest, static_cast<std::int64_t>(b->size));
      }
    };
    scan(d->small);
    scan(d->large);
    for (const auto& [id, pp] : d->private_pools) {
      scan(pp->small);
      scan(pp->large);
    }
    s.cached_free_bytes = cached;
    s.largest_free_block_bytes = largest;
    std::int64_t free_reserved = s.reserved_bytes - s.allocated_bytes;
    s.fragmentation = free_reserved > 0
                          ? 1.0 - static_cast<double>(largest) / static_cast<double>(free_reserved)
                          : 0.0;
    return s;
  }

  std::string snapshot(int device) const {
    std::ostringstream os;
    os << "{\"device\":" << device << ",\"stats\":" << stats_locked(device).to_json()
       << ",\"segments\":[";
    const DeviceState* d = dev_or_null(device);
    bool first_seg = true;
    if (d != nullptr) {
      for (const auto& [base, seg] : d->segments) {
        const Block* head = seg.head;
        const BlockPool* pool = head->pool;
        if (!first_seg) os << ",";
        first_seg = false;
        os << "{\"address\":\"" << ptr_str(base) << "\",\"bytes\":" << seg.bytes
           << ",\"stream\":\"" << ptr_str(head->stream) << "\",\"pool\":\""
           << (pool->is_small ? "small" : "large")
           << "\",\"private_pool\":" << (pool->owner ? pool->owner->id : 0) << ",\"blocks\":[";
        bool first_block = true;
        for (const Block* b = head; b != nullptr; b = b->next) {
          if (!first_block) os << ",";
          first_block = false;
          const char* state = b->state == BlockState::kAllocated ? "allocated"
                              : b->state == BlockState::kPending ? "pending_free"
                                                                 : "free";
          os << "{\"address\":\"" << ptr_str(b->ptr) << "\",\"offset\":" << (b->ptr - base)
             << ",\"bytes\":" << b->size << ",\"requested_bytes\":" << b->requested
             << ",\"state\":\"" << state << "\"}";
        }
        os << "]}";
      }
    }
    os << "]}";
    return os.str();
  }

  void begin_pool(int device, MemPoolId id, cudaStream_t stream) {
    BLU_CHECK(id != 0, "CachingAllocator::begin_allocate_to_pool: pool id 0 is reserved");
    DeviceState& d = dev(device);
    auto& slot = d.private_pools[id];
    if (!slot) {
      slot = std::make_unique<PrivatePool>();
      slot->id = id;
      slot->small.owner = slot.get();
      slot->large.owner = slot.get();
      d.stats.private_pools += 1;
    }
    slot->refs += 1;
    std::uint64_t cap = backend.capture_id(stream, device);
    d.routes.push_back(Route{id, stream, cap});
    if (cap != 0) captures_underway += 1;
  }

  void end_pool(int device, MemPoolId id) {
    DeviceState& d = dev(device);
    for (auto it = d.routes.rbegin(); it != d.routes.rend(); ++it) {
      if (it->pool != id) continue;
      bool captured = it->capture_id != 0;
      d.routes.erase(std::next(it).base());
      if (captured && --captures_underway == 0) insert_deferred_events();
      return;
    }
    BLU_THROW("CachingAllocator::end_allocate_to_pool: no allocation to pool ", id,
              " is in progress on device ", device);
  }

  void release_pool(int device, MemPoolId id) {
    DeviceState& d = dev(device);
    auto it = d.private_pools.find(id);
    BLU_CHECK(it != d.private_pools.end() && it->second->refs > 0,
              "CachingAllocator::release_pool: pool ", id, " does not exist on device ", device);
    for (const Route& r : d.routes) {
      BLU_CHECK(r.pool != id, "CachingAllocator::release_pool: pool ", id,
                " is still being allocated to (call end_allocate_to_pool first)");
    }
    PrivatePool* pp = it->second.get();
    pp->refs -= 1;
    if (pp->refs > 0) return;
    if (captures_underway == 0) {
      for (BlockPool* pool : {&pp->small, &pp->large}) {
        std::vector<Block*> whole;
        for (Block* b : pool->free_blocks) {
          if (b->prev == nullptr && b->next == nullptr) whole.push_back(b);
        }
        for (Block* b : whole) release_segment(d, b);
      }
    }
    maybe_erase_pool(d, pp);
  }
};

CachingAllocator::CachingAllocator(AllocatorBackend& backend)
    : impl_(std::make_unique<Impl>(backend)) {}

CachingAllocator::~CachingAllocator() {
  // Whole free segments go back to the device (an allocator made for a test or a tool leaves no
  // cached memory behind); segments holding live blocks belong to their owners and go away with
  // the process. The process-wide instance is never destroyed.
  if (impl_->captures_underway == 0) {
    try {
      for (auto& d : impl_->devices) {
        if (d) impl_->release_cached_segments(*d);
      }
    } catch (...) {  // a destructor must not throw (e.g. the CUDA context is already gone)
    }
  }
  std::set<Block*> all;
  for (auto& d : impl_->devices) {
    if (!d) continue;
    for (auto& [base, seg] : d->segments) {
      for (Block* b = seg.head; b != nullptr; b = b->next) all.insert(b);
    }
  }
  for (Block* b : all) delete b;
}

CachingAllocator& CachingAllocator::get() {
  static CachingAllocator* instance = new CachingAllocator(cuda_backend());
  return *instance;
}

void* CachingAllocator::allocate(std::size_t bytes, int device, cudaStream_t stream) {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  return impl_->allocate(bytes, device, stream);
}

void CachingAllocator::free(void* ptr) {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  impl_->free(ptr);
}

void CachingAllocator::record_stream(void* ptr, cudaStream_t stream) {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  impl_->record_stream(ptr, stream);
}

void CachingAllocator::empty_cache() {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  for (int i = 0; i < kMaxDevices; ++i) {
    if (impl_->devices[i]) impl_->empty_cache(i);
  }
}

void CachingAllocator::empty_cache(int device) {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  impl_->empty_cache(device);
}

MemoryStats CachingAllocator::stats(int device) const {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  return impl_->stats_locked(device);
}

void CachingAllocator::reset_peak(int device) {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  MemoryStats& s = impl_->dev(device).stats;
  s.peak_allocated_bytes = s.allocated_bytes;
  s.peak_reserved_bytes = s.reserved_bytes;
  s.peak_requested_bytes = s.requested_bytes;
}

std::string CachingAllocator::snapshot_json(int device) const {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  return impl_->snapshot(device);
}

void CachingAllocator::set_memory_limit(int device, std::size_t bytes) {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  impl_->dev(device).memory_limit = bytes;
}

void CachingAllocator::begin_allocate_to_pool(int device, MemPoolId pool, cudaStream_t stream) {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  impl_->begin_pool(device, pool, stream);
}

void CachingAllocator::end_allocate_to_pool(int device, MemPoolId pool) {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  impl_->end_pool(device, pool);
}

void CachingAllocator::release_pool(int device, MemPoolId pool) {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  impl_->release_pool(device, pool);
}

std::size_t CachingAllocator::block_size(const void* ptr) const {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  return impl_->lookup(ptr, "block_size")->size;
}

int CachingAllocator::device_of(const void* ptr) const {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  return impl_->lookup(ptr, "device_of")->device;
}

}  // namespace blu::cuda

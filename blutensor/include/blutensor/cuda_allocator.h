// blutensor/cuda_allocator.h: the CUDA caching allocator (blu::cuda::CachingAllocator).
//
// Device memory is taken from the driver in segments and carved into blocks that are cached on
// free and reused by later allocations on the same stream, so steady-state training does no
// cudaMalloc/cudaFree at all. The design choice that matters: the bookkeeping (pools, best fit,
// splitting, coalescing, streams, events, stats) talks to the device only through the small
// AllocatorBackend interface below, so all of it is tested on the CPU with a fake backend
// (tests/blutensor/allocator_test.cpp); the real backend is a thin layer over the CUDA runtime.
// The design notes are in blutensor/src/allocator/caching_allocator.cpp.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

namespace blu::cuda {

// Note [Stream-ordered reuse]
// A block belongs to the stream it was allocated on. When freed, it is reused only by later
// allocations on that same stream: stream order guarantees the kernels that used it before the
// free have run before the kernels of the next user. If the block was also used on other streams
// (declared with record_stream), free() records an event on each of them and the block stays out
// of the cache until all those events have completed (polled on allocation, never waited for,
// except by empty_cache and the out-of-memory retry).

// What the allocator core needs from a device. The CUDA implementation is cuda_backend();
// tests provide a fake. Events are opaque handles owned by the backend.
class AllocatorBackend {
 public:
  using Event = void*;
  virtual ~AllocatorBackend() = default;

  // Device memory. raw_alloc returns nullptr when the device is out of memory (never throws for
  // OOM; other failures may throw blu::Error).
  virtual void* raw_alloc(std::size_t bytes, int device) = 0;
  virtual void raw_free(void* ptr, int device) = 0;
  // Free and total bytes of the device, for the out-of-memory message (false: unknown).
  virtual bool mem_info(int device, std::size_t* free_bytes, std::size_t* total_bytes) = 0;

  virtual Event event_create(int device) = 0;
  virtual void event_destroy(Event event, int device) = 0;
  virtual void event_record(Event event, cudaStream_t stream, int device) = 0;
  virtual bool event_query(Event event, int device) = 0;        // true: completed
  virtual void event_synchronize(Event event, int device) = 0;  // host waits

  // 0 when `stream` is not capturing a CUDA graph, else its capture sequence id.
  virtual std::uint64_t capture_id(cudaStream_t stream, int device) = 0;
};

// The CUDA runtime backend (a process-wide singleton).
AllocatorBackend& cuda_backend();

// Allocator statistics of one device. Bytes are of blocks as handed out (rounded up to 512 B)
// except requested_bytes (what callers asked for).
struct MemoryStats {
  std::int64_t allocated_bytes = 0;        // in blocks currently handed out
  std::int64_t requested_bytes = 0;        // sum of the requested sizes of those blocks
  std::int64_t reserved_bytes = 0;         // in segments taken from the device
  std::int64_t peak_allocated_bytes = 0;   // since construction or reset_peak
  std::int64_t peak_reserved_bytes = 0;
  std::int64_t peak_requested_bytes = 0;
  std::int64_t cached_free_bytes = 0;      // in free blocks ready for reuse
  std::int64_t pending_free_bytes = 0;     // freed, waiting for record_stream events
  std::int64_t largest_free_block_bytes = 0;
  std::int64_t segments = 0;               // current segments (device allocations held)
  std::int64_t active_allocations = 0;     // blocks currently handed out
  std::int64_t num_allocations = 0;        // cumulative allocate() calls that returned memory
  std::int64_t num_frees = 0;              // cumulative free() calls
  std::int64_t num_device_allocs = 0;      // cumulative raw_alloc calls that succeeded
  std::int64_t num_device_frees = 0;       // cumulative raw_free calls
  std::int64_t num_alloc_retries = 0;      // allocations that needed the free-cache-and-retry path
  std::int64_t num_ooms = 0;               // allocations that threw out-of-memory
  std::int64_t private_pools = 0;          // live private (graph) pools
  // 1 - largest_free_block / (reserved - allocated); 0 when nothing is free.
  double fragmentation = 0.0;

  std::string to_string() const;  // multi-line, human readable (used in the OOM message)
  std::string to_json() const;    // one JSON object
};

// Identifies a private memory pool (Note [Private pools] in caching_allocator.cpp). Any nonzero
// value the caller picks (a graph's id, a counter); 0 is reserved.
using MemPoolId = std::uint64_t;

class CachingAllocator {
 public:
  // The process-wide allocator over cuda_backend(). Never destroyed (tensors freed from static
  // destructors must still find it).
  static CachingAllocator& get();

  // An allocator over `backend` (tests: a fake; `backend` must outlive the allocator).
  explicit CachingAllocator(AllocatorBackend& backend);
  ~CachingAllocator();
  CachingAllocator(const CachingAllocator&) = delete;
  CachingAllocator& operator=(const CachingAllocator&) = delete;

  // A block of at least `bytes` for use on `stream` of `device` (256-byte aligned). bytes == 0
  // returns nullptr. Throws blu::Error "CUDA out of memory ..." (with the request, the stats and
  // the device's free/total) after one retry that releases the cached segments.
  void* allocate(std::size_t bytes, int device, cudaStream_t stream);
  // Returns a block to the cache (nullptr: no-op). Throws blu::Error for a pointer this allocator
  // did not hand out (a double free included).
  void free(void* ptr);
  // Declares that `ptr` is used on `stream` too (besides its allocation stream), so that free()
  // defers its reuse until that stream's work issued so far has completed.
  void record_stream(void* ptr, cudaStream_t stream);

  // Releases every fully free cached segment of every device (waits for pending events first).
  void empty_cache();
  void empty_cache(int device);

  MemoryStats stats(int device) const;
  void reset_peak(int device);
  // JSON: {"device":d,"stats":{...},"segments":[{"address":..,"bytes":..,"stream":..,"pool":..,
  //        "blocks":[{"address":..,"bytes":..,"requested_bytes":..,"state":..}, ...]}, ...]}
  std::string snapshot_json(int device) const;

  // Caps the bytes reserved on `device` (0: no cap beyond the device's memory). An allocation
  // that would exceed it fails as out of memory (after the usual retry).
  void set_memory_limit(int device, std::size_t bytes);

  // Private pools for CUDA-graph capture (Note [Private pools]). Between begin and end,
  // allocations on `stream` of `device` — or, if `stream` is capturing, on any stream of the same
  // capture sequence — come from pool `pool` (created on first use, shared if begun again).
  // Blocks of a private pool are never handed to allocations outside it while the pool lives.
  void begin_allocate_to_pool(int device, MemPoolId pool, cudaStream_t stream);
  void end_allocate_to_pool(int device, MemPoolId pool);
  // Each begin_allocate_to_pool adds one reference to the pool (a graph captured into it holds
  // it); release_pool drops one. At zero the pool's free segments go back to the device at once
  // and the others as their blocks are freed; its blocks are never reused again.
  void release_pool(int device, MemPoolId pool);

  // The size of the block behind `ptr` (rounded), its device; throws for an unknown pointer.
  std::size_t block_size(const void* ptr) const;
  int device_of(const void* ptr) const;

  // Size classes (public for tests and docs).
  static constexpr std::size_t kRoundBytes = 512;                 // every block is a multiple
  static constexpr std::size_t kSmallRequestMaxBytes = 1u << 20;  // <= 1 MiB: small pool
  static constexpr std::size_t kSmallSegmentBytes = 2u << 20;     // small pool segment
  static constexpr std::size_t kLargeSegmentMinBytes = 20u << 20; // large requests < 10 MiB
  static constexpr std::size_t kLargeSegmentRoundBytes = 2u << 20;
  static constexpr std::size_t kMidRequestMaxBytes = 10u << 20;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace blu::cuda

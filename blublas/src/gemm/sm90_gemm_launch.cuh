// sm90_gemm_launch.cuh (internal): launch_sm90_gemm<Cfg>, the host half of one kernel config:
// builds the two TMA tensor maps (cuTensorMapEncodeTiled through common/tma_loader), fills the
// kernel parameters, opts in to the dynamic shared memory and launches the persistent grid.
// Included only by the per-config instantiation files.
#pragma once

#include <cuda.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <type_traits>

#include "blublas/check.h"
#include "common/tma_loader.h"
#include "gemm/epilogue.cuh"
#include "gemm/sm90_gemm_kernel.cuh"
#include "gemm/sm90_gemm_launch.h"

namespace blublas::gemm_detail::sm90 {

template <class Cfg>
CUtensorMapDataType tensor_map_dtype() {
  if constexpr (std::is_same_v<typename Cfg::In, InBf16>) return CU_TENSOR_MAP_DATA_TYPE_BFLOAT16;
  if constexpr (std::is_same_v<typename Cfg::In, InF16>) return CU_TENSOR_MAP_DATA_TYPE_FLOAT16;
  if constexpr (Cfg::kFp8) return CU_TENSOR_MAP_DATA_TYPE_UINT8;  // bytes: wgmma knows the format
  return CU_TENSOR_MAP_DATA_TYPE_FLOAT32;  // tf32: wgmma reads the top 19 bits
}

// Map of one operand. k_major: dims {K, rows}; else {rows, K}. Box: K-major {BK, tile_rows}
// (one box), MN-major {64, BK} (tile_rows / 64 boxes). rank 3 adds the batch dimension.
template <class Cfg>
Status make_operand_map(CUtensorMap* map, const void* ptr, int64_t ld, int64_t stride, bool k_major,
                        int rows, int k, int batch, int tile_rows, bool* rank3) {
  const uint64_t es = Cfg::kElemBytes;
  *rank3 = batch > 1 && stride != 0;
  uint64_t dims[3];
  uint64_t strides[2] = {static_cast<uint64_t>(ld) * es, static_cast<uint64_t>(stride) * es};
  uint32_t box[3];
  if (k_major) {
    dims[0] = static_cast<uint64_t>(k);
    dims[1] = static_cast<uint64_t>(rows);
    box[0] = Cfg::BK;
    box[1] = static_cast<uint32_t>(tile_rows);
  } else {
    dims[0] = static_cast<uint64_t>(rows);
    dims[1] = static_cast<uint64_t>(k);
    box[0] = 64;
    box[1] = Cfg::BK;
  }
  dims[2] = static_cast<uint64_t>(batch);
  box[2] = 1;
  return blublas::detail::encode_tensor_map_tiled(map, tensor_map_dtype<Cfg>(), *rank3 ? 3 : 2, ptr,
                                                  dims, strides, box, CU_TENSOR_MAP_SWIZZLE_128B);
}

// The TMA-store epilogue (Note [sm90 TMA-store epilogue]) takes D (and aux, and C when beta != 0
// without GELU) with no split-K, rows of N elements a multiple of 16 bytes, base pointers 16-byte
// aligned and row / batch strides multiples of 16 bytes.
inline bool tma_store_ok(const GemmProblem& p, int splits, bool c_through_tma, bool loads_ok) {
  // C (beta != 0) and kGeluGrad's aux are read through TMA loads (Note [sm90 C through TMA] in
  // sm90_gemm_kernel.cuh) when c_through_tma, one of them at a time, C not next to GELU's aux pass.
  const bool gelu = p.epilogue == Epilogue::kBiasGelu || p.epilogue == Epilogue::kGelu;
  const bool gelu_grad = p.epilogue == Epilogue::kGeluGrad;
  if (splits > 1) return false;
  // loads_ok: the tile compiles the staged loads (not the 3-consumer 192x192 one).
  // The staged GELU-gradient pass multiplies acc itself: alpha 1 only (Note [sm90 GELU epilogue]).
  if (gelu_grad && (!c_through_tma || !loads_ok || p.beta != 0.0f || p.alpha != 1.0f || p.aux == nullptr)) {
    return false;
  }
  if (p.beta != 0.0f && (gelu || !c_through_tma || !loads_ok)) return false;
  const int64_t es = static_cast<int64_t>(dtype_size(p.cd_type));
  // TMA clips stores at 16-byte granularity along the row (Note [sm90 TMA-store epilogue]).
  if ((static_cast<int64_t>(p.n) * es) % 16 != 0) return false;
  auto ok = [&](const void* ptr, int64_t ld, int64_t stride) {
    return reinterpret_cast<std::uintptr_t>(ptr) % 16 == 0 && (ld * es) % 16 == 0 &&
           (p.batch == 1 || (stride * es) % 16 == 0);
  };
  if (!ok(p.d, p.ldd, p.stride_d)) return false;
  if (p.beta != 0.0f && !ok(p.c, p.ldc, p.stride_c)) return false;
  if ((gelu || gelu_grad) && p.aux != nullptr && !ok(p.aux, p.ld_aux, p.stride_aux)) return false;
  return true;
}

// Box: 64 rows x 128 bytes (64 16-bit or 32 f32 columns), 128B swizzle like the staging tile.
inline Status make_output_map(CUtensorMap* map, const GemmProblem& p, void* ptr, int64_t ld,
                              int64_t stride) {
  const bool rank3 = p.batch > 1;
  const uint64_t es = dtype_size(p.cd_type);
  uint64_t dims[3] = {static_cast<uint64_t>(p.n), static_cast<uint64_t>(p.m),
                      static_cast<uint64_t>(p.batch)};
  uint64_t strides[2] = {static_cast<uint64_t>(ld) * es, static_cast<uint64_t>(stride) * es};
  uint32_t box[3] = {static_cast<uint32_t>(128 / es), 64, 1};
  const CUtensorMapDataType dtype = p.cd_type == Dtype::kBF16   ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16
                                    : p.cd_type == Dtype::kF16 ? CU_TENSOR_MAP_DATA_TYPE_FLOAT16
                                                               : CU_TENSOR_MAP_DATA_TYPE_FLOAT32;
  return blublas::detail::encode_tensor_map_tiled(map, dtype, rank3 ? 3 : 2, ptr, dims, strides,
                                                  box, CU_TENSOR_MAP_SWIZZLE_128B);
}

// Note [sm90 launch attributes]
// Each kernel's dynamic shared-memory limit is set the first time
// it launches on a device: the attributes belong to the function, so later launches need not
// repeat the driver calls (~1-2 us of host time each). In session 29 (H200) an interleaved A/B of
// one problem (Note [Interleaved tile A/B]) showed ~10 us more per call for a GEMM kernel that
// followed a different kernel than for one that followed itself (qkvo fwd 8192x1024x1024: 0.66
// vs 0.88 of cuBLAS for the same plan), which real steps pay on every GEMM. Asking for the largest
// shared-memory carveout (so consecutive GEMM kernels share one L1 / shared split) was measured
// against the driver's choice in the same session: no difference, so it is not set; the cause was
// the epilogue's instruction fetch (Note [sm90 plain epilogue] in sm90_gemm_kernel.cuh).

template <class Cfg>
Status launch_sm90_gemm(const LaunchArgs& args, cudaStream_t stream) {
  const GemmProblem& p = *args.p;
  BLUBLAS_CHECK(args.a_k_major == Cfg::kAKMajor && args.b_k_major == Cfg::kBKMajor,
                StatusCode::kInvalidArgument, "sm90 gemm: launcher/operand major mismatch");
  BLUBLAS_CHECK(Cfg::kSmemBytes <= args.max_smem_optin, StatusCode::kNotSupported,
                "sm90 gemm: tile needs ", Cfg::kSmemBytes, " bytes of shared memory, device allows ",
                args.max_smem_optin);
  alignas(64) CUtensorMap map_a;
  alignas(64) CUtensorMap map_b;
  bool a_rank3 = false, b_rank3 = false;
  BLUBLAS_RETURN_IF_ERROR(make_operand_map<Cfg>(&map_a, args.a, args.lda, args.stride_a,
                                                Cfg::kAKMajor, p.m, p.k, p.batch, Cfg::BM,
                                                &a_rank3));
  // With a cluster each CTA loads 1/kCluster of the B tile (Note [sm90 cluster multicast]).
  BLUBLAS_RETURN_IF_ERROR(make_operand_map<Cfg>(&map_b, args.b, args.ldb, args.stride_b,
                                                Cfg::kBKMajor, p.n, p.k, p.batch,
                                                Cfg::BN / Cfg::kCluster, &b_rank3));
  KernelParams kp;
  kp.m = p.m;
  kp.n = p.n;
  kp.k = p.k;
  kp.batch = p.batch;
  const int tile_rows = (p.m + Cfg::BM - 1) / Cfg::BM;
  kp.tiles_m = (tile_rows + Cfg::kCluster - 1) / Cfg::kCluster;  // groups of kCluster tile rows
  kp.tiles_n = (p.n + Cfg::BN - 1) / Cfg::BN;
  kp.group_m = args.group_m < 1 ? 1 : args.group_m;
  kp.kblocks = (p.k + Cfg::BK - 1) / Cfg::BK;
  kp.splits = args.splits < 1 ? 1 : (args.splits > kp.kblocks ? kp.kblocks : args.splits);
  const int64_t units = static_cast<int64_t>(kp.tiles_m) * kp.tiles_n * p.batch * kp.splits;
  BLUBLAS_CHECK(units < (int64_t{1} << 31), StatusCode::kNotSupported, "sm90 gemm: ", units,
                " work units exceed the int range");
  kp.num_units = static_cast<int>(units);
  kp.a_rank3 = a_rank3 ? 1 : 0;
  kp.b_rank3 = b_rank3 ? 1 : 0;
  kp.out_type = p.cd_type == Dtype::kBF16 ? 1 : (p.cd_type == Dtype::kF16 ? 2 : 0);
  kp.epi = make_epilogue_args(p);
  kp.scale_a = p.scale_a;
  kp.scale_b = p.scale_b;
  if (kp.splits > 1) {
    BLUBLAS_CHECK(args.partial != nullptr, StatusCode::kInvalidArgument,
                  "sm90 gemm: split-K without a partial buffer");
    kp.partial = args.partial;
    kp.partial_ld = args.partial_ld;
    kp.partial_split_stride = args.partial_ld * p.m * p.batch;
  }
  alignas(64) CUtensorMap map_d = map_a;  // placeholders unless the TMA-store epilogue runs
  alignas(64) CUtensorMap map_aux = map_a;
  alignas(64) CUtensorMap map_c = map_a;
  // Note [sm90 epilogue output types]: the kernel has the TMA-store epilogue for some D types only.
  if (kEnableTmaStoreEpilogue && !args.generic_epilogue && Cfg::fast_out_type(kp.out_type) &&
      tma_store_ok(p, kp.splits, args.c_through_tma, Cfg::kConsumers < 3)) {
    BLUBLAS_RETURN_IF_ERROR(make_output_map(&map_d, p, p.d, p.ldd, p.stride_d));
    if (kp.epi.aux != nullptr) {
      BLUBLAS_RETURN_IF_ERROR(make_output_map(&map_aux, p, p.aux, p.ld_aux, p.stride_aux));
    }
    if (kp.epi.c != nullptr) {  // the same box and swizzle as D's (Note [sm90 C through TMA])
      BLUBLAS_RETURN_IF_ERROR(make_output_map(&map_c, p, const_cast<void*>(p.c), p.ldc, p.stride_c));
    }
    kp.fast_epi = 1;
    kp.d_rank3 = p.batch > 1 ? 1 : 0;
    // Note [sm90 epilogue loads ahead]: C / aux loaded at the unit's start, where the tile has
    // room for the second staging tile and the device allows the larger launch.
    const bool loads = kp.epi.c != nullptr || p.epilogue == Epilogue::kGeluGrad;
    const bool second_tile = Cfg::kEpiAhead && args.epi_ahead && Cfg::kSmemBytesAhead <= args.max_smem_optin;
    kp.epi_ahead = second_tile && loads ? 1 : 0;
    // Note [sm90 GELU epilogue]: the same second tile holds GELU's aux while D is staged.
    const bool gelu = p.epilogue == Epilogue::kBiasGelu || p.epilogue == Epilogue::kGelu;
    kp.aux_buffer = second_tile && gelu && kp.epi.aux != nullptr ? 1 : 0;
    // Note [sm90 epilogue bias prefetch]: pair loads of the bias need it aligned to a pair.
    kp.bias_pairs = reinterpret_cast<std::uintptr_t>(kp.epi.bias) % (2 * dtype_size(p.cd_type)) == 0 ? 1 : 0;
  }
  BLUBLAS_CHECK(args.bgrad == nullptr || Cfg::kFusedBiasGrad, StatusCode::kNotSupported,
                "sm90 gemm: a fused bias gradient for a kernel without it");
  kp.bgrad = Cfg::kFusedBiasGrad ? args.bgrad : nullptr;
  int grid_cap = args.grid < 1 ? 1 : args.grid;
  const bool stream_k = args.sk_ctas > 0;
  if (stream_k) {  // Note [sm90 stream-K]
    BLUBLAS_CHECK(Cfg::kStreamK && kp.splits == 1 && args.sk_partial != nullptr &&
                      args.sk_flags != nullptr,
                  StatusCode::kInvalidArgument,
                  "sm90 gemm: stream-K needs a cooperative 16-bit tile without a cluster, one split and its workspace");
    kp.sk_gran = kp.kblocks % 2 == 0 ? 2 : 1;
    const int64_t sk_units = units * kp.kblocks / kp.sk_gran;
    // Every partition CTA needs at least one iteration (a finisher waits on each after it).
    kp.sk_ctas = static_cast<int>(std::min<int64_t>(args.sk_ctas, sk_units));
    BLUBLAS_CHECK(units * kp.kblocks * kp.sk_ctas < (int64_t{1} << 31), StatusCode::kInvalidArgument,
                  "sm90 gemm: stream-K with ", units * kp.kblocks, " k-iterations on ", kp.sk_ctas,
                  " CTAs exceeds its 32-bit arithmetic");
    kp.sk_units = static_cast<int>(sk_units);
    grid_cap = std::min(grid_cap, kp.sk_ctas);
    kp.sk_partial = args.sk_partial;
    kp.sk_flags = args.sk_flags;
    BLUBLAS_CUDA_CHECK(cudaMemsetAsync(args.sk_flags, 0, sizeof(uint32_t) * 3 * static_cast<size_t>(kp.sk_ctas), stream));
  }
  auto kernel = sm90_gemm_kernel<Cfg>;
  const int smem_bytes = kp.epi_ahead || kp.aux_buffer ? Cfg::kSmemBytesAhead : Cfg::kSmemBytes;
  // The kernel's limit is one value whatever this launch needs: launches of the same kernel
  // from other host threads (or other graph nodes) may need the larger size, and lowering the
  // limit under them would fail their launch.
  const int smem_limit =
      Cfg::kEpiAhead && Cfg::kSmemBytesAhead <= args.max_smem_optin ? Cfg::kSmemBytesAhead : Cfg::kSmemBytes;
  // Note [sm90 launch attributes]: set once per kernel and device, not before every launch.
  static std::atomic<uint64_t> attrs_set{0};
  int device = 0;
  BLUBLAS_CUDA_CHECK(cudaGetDevice(&device));
  const uint64_t device_bit = device < 64 ? uint64_t{1} << device : 0;
  if (device_bit == 0 || (attrs_set.load(std::memory_order_acquire) & device_bit) == 0) {
    BLUBLAS_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem_limit));
    attrs_set.fetch_or(device_bit, std::memory_order_release);
  }
  if constexpr (Cfg::kCluster == 1) {
    const int grid = stream_k ? grid_cap : static_cast<int>(std::min<int64_t>(units, grid_cap));
    kernel<<<grid, Cfg::kThreads, smem_bytes, stream>>>(map_a, map_b, map_d, map_aux, map_c, kp);
    BLUBLAS_KERNEL_LAUNCH_CHECK("sm90_gemm_kernel");
  } else {
    cudaLaunchConfig_t cfg = {};
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeClusterDimension;
    attr[0].val.clusterDim.x = Cfg::kCluster;
    attr[0].val.clusterDim.y = 1;
    attr[0].val.clusterDim.z = 1;
    cfg.blockDim = dim3(Cfg::kThreads);
    cfg.dynamicSmemBytes = smem_bytes;
    cfg.stream = stream;
    cfg.attrs = attr;
    cfg.numAttrs = 1;
    // How many clusters fit at once (GPCs may not split evenly into pairs): a persistent grid
    // larger than that would run a second, nearly empty wave. Queried once per kernel.
    static std::atomic<int> max_clusters{0};  // every thread would compute the same value
    if (max_clusters.load(std::memory_order_relaxed) == 0) {
      cfg.gridDim = dim3(Cfg::kCluster * 2);
      int n = 0;
      BLUBLAS_CUDA_CHECK(cudaOccupancyMaxActiveClusters(&n, kernel, &cfg));
      BLUBLAS_CHECK(n >= 1, StatusCode::kNotSupported, "sm90 gemm: no cluster of ", Cfg::kCluster,
                    " CTAs with ", Cfg::kSmemBytes, " bytes of shared memory fits this device");
      max_clusters.store(n, std::memory_order_relaxed);
    }
    const int64_t want = std::min<int64_t>(units, std::max(1, args.grid / Cfg::kCluster));
    const int clusters =
        static_cast<int>(std::min<int64_t>(want, max_clusters.load(std::memory_order_relaxed)));
    cfg.gridDim = dim3(Cfg::kCluster * clusters);
    BLUBLAS_CUDA_CHECK(cudaLaunchKernelEx(&cfg, kernel, map_a, map_b, map_d, map_aux, map_c, kp));
  }
  return Status::success();
}

// The four operand-major variants of one (type, tile, schedule) config, for the per-file
// registration.
template <class In, int BM, int BN, int kStages, int kConsumers, int kCluster = 1,
          bool kPingPong = false>
LaunchFn pick_launcher(bool a_k_major, bool b_k_major) {
  auto fn = [](auto a_k, auto b_k) -> LaunchFn {
    return &launch_sm90_gemm<KernelConfig<In, BM, BN, kStages, kConsumers, decltype(a_k)::value,
                                          decltype(b_k)::value, kCluster, kPingPong>>;
  };
  using T = std::true_type;
  using F = std::false_type;
  if constexpr (std::is_same_v<In, InTf32> || kIsFp8In<In>) {
    return a_k_major && b_k_major ? fn(T{}, T{}) : nullptr;
  } else {
    if (a_k_major && b_k_major) return fn(T{}, T{});
    if (a_k_major && !b_k_major) return fn(T{}, F{});
    if (!a_k_major && b_k_major) return fn(F{}, T{});
    return fn(F{}, F{});
  }
}

}  // namespace blublas::gemm_detail::sm90

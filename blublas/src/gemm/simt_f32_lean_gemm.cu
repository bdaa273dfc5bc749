// simt_f32_lean_gemm.cu: the "lean" strict fp32 GEMM on CUDA cores (FFMA only: no TF32 and no
// tensor-core instruction), a family of tile configurations of one kernel template whose main loop
// holds nothing but the outer products, the fragment reads, one float4 global load per operand
// slab quarter and its shared-memory store: no bounds checks. Chosen by simt_f32_gemm.cu (Note
// [SIMT fp32 variant choice]); BLUBLAS_SIMT_VARIANT=l88|l816|l168|l88n64|l816w|l168w forces one,
// and l88 / l88n64 with 16-deep slabs (l88k16, l88n64k16: simt_f32_lean_k16_gemm.cu; Note [Deep
// slabs]).
// The kernel template itself is in simt_f32_lean_kernel.cuh.
//
// Note [SIMT fp32 lean kernel]
// Tiles. The CTA tile BM x BN is cut into warp tiles (LM*TM) x (LN*TN); the 32 lanes form an
// LM x LN grid and each lane owns TM x TN accumulators as 4 x 4 blocks (as in Note [SIMT fp32 warp
// tiling]), so per k step a lane issues TM/4 + TN/4 LDS.128, each one shared-memory wavefront
// (LM, LN <= 8 distinct float4 per read, the rest broadcast). Both operands sit in shared memory
// k-outer (as[k][m], bs[k][n], rows padded by 4 floats); a k-contiguous operand is transposed at
// the store (a float4 along k becomes 4 STS.32; pairs of lanes cover one row's 32 bytes, and the
// padding puts the two halves of a warp in different banks: conflict-free).
// Why it is lean. The legacy and warp kernels carry the bounds logic into the main loop (~40 address
// and guard instructions per 8-deep slab for the legacy kernel; the warp kernel's guarded fallback
// keeps registers live). Here the bounds are settled before the loop:
//  - Rows (M of A, N of B) are clamped, not guarded: a row past the operand's end loads row
//    n_rows - 1 (k-major operand) or the aligned float4 that holds the last element (m/n-major
//    operand; needs n_rows % 4 == 0 there, so the float4 never leaves the allocation). Output
//    (i, j) depends on row i of A and column j of B only, and rows/columns >= M/N are never
//    stored, so the clamped values are never seen.
//  - K is cut into whole BK-deep slabs (BK = 8, or 16: Note [Deep slabs]) plus one tail slab
//    (K % BK != 0). Whole slabs take one unguarded LDG.128 per float4; the tail slab, once per CTA
//    after the loop, uses guarded scalar loads with zeros past K in both operands (0 * 0 adds +0:
//    the sums are unchanged and finite).
// The main loop per 8-deep slab per thread: TM*TN*8 FFMA, (TM+TN)/4*8 LDS.128, 2 LDG.128 per 256
// threads' worth of slab (l88: 1 per operand), 4 STS.32 per float4 of a k-major operand (1 STS.128
// otherwise), one barrier, pointer increments and the loop branch.
// Pipelining: the next slab is loaded into registers at the top of the slab, stored to the other
// shared buffer and the barrier taken before the last k step's FFMAs; fragments are double
// buffered in registers (step kk+1 read while step kk's FFMAs issue): Note [Early barrier] in
// simt_f32_warp_gemm.cu, same argument for the single barrier per slab.
// Configurations (BM x BN, threads, per lane, CTAs per SM by __launch_bounds__):
//   l88    128 x 128, 256 threads, 8 x 8  (lanes 4 x 8, warp tiles 32 x 64), 2 per SM (<= 128 regs)
//   l816   128 x 128, 128 threads, 8 x 16 (lanes 8 x 4, warp tiles 64 x 64), 2 per SM (<= 255 regs)
//   l168   128 x 128, 128 threads, 16 x 8 (lanes 4 x 8, warp tiles 64 x 64), 2 per SM (<= 255 regs)
//   l88n64 128 x  64, 128 threads, 8 x 8  (lanes 8 x 4, warp tiles 64 x 32), 4 per SM (<= 128 regs)
// l88 runs 16 warps per SM (4 per scheduler) with 64 FFMA per 4 LDS.128; l816 8 warps per SM with
// 128 FFMA per 6 LDS.128; l88n64 16 warps in 4 CTAs (barriers of 4 warps instead of 8).
// ptxas (CUDA 13, sm_90a): l88 124-128 registers, l88n64 125-128, l816 / l168 228-231, no spills.
// On sm_80 l88 spills 8-16 bytes outside the main loop (tail slab), l88n64 a few inside it.
// SASS main loop body (two slabs = 16 k, sm_90a, CUDA 13; counted in the cubin between markers at
// the body's ends, loop counter and branch not included): l88 NT (kk) 1114 instructions = 1024
// FFMA, 64 LDS.128, 16 STS.32, 4 LDG.128, 2 BAR, 4 others (91.9% FFMA; TN/mn 91.9%, 4 STS.128 and
// 16 others); l88n64 kk 90.9%; l816 / l168 kk 2194 = 2048 FFMA + 96 LDS + 32 STS + 8 LDG + 2 BAR
// + 8 (93.3%); l816w / l168w 93.9-94.1%. (The older estimate, "~30 others", counted the loop
// control.)
//
// Note [Deep slabs]
// LeanTile<..., BK, KC>: BK is the slab depth (k per shared-memory buffer: one barrier per slab),
// KC the register staging depth (k of the next slab held in registers at once); 8 / 8 is the kernel
// above. The k16 variants (simt_f32_lean_k16_gemm.cu) take BK = 16, KC = 8: the next slab comes
// in two 8-deep chunks, chunk 0 loaded by the caller at the top of the slab, stored to the other
// buffer at k step 8 where chunk 1 is loaded, chunk 1 stored before step 15's FFMAs, then the
// barrier. So the registers and the load-to-store distance (8 k steps) are those of BK = 8, and
// each chunk keeps the 8-deep lane mapping (conflict-free transposed stores; a 16-deep row of 4
// lanes would make them 2-way). Correct because the other buffer is free from the previous slab's
// barrier on (every read of it precedes that barrier), so its chunks may be stored anywhere in the
// current slab.
// The tail slab (K % 16 != 0, split-K ranges too: k_split is a multiple of 8 only) is loaded
// chunk by chunk with the guarded loads; a chunk wholly past K is all zeros.
// What it buys (predicted, unmeasured): half the barriers and half the slab starts whose first
// FFMAs wait on LDS (ncu on l88 fc fwd: barrier 6.8%, short_scoreboard 5.2% of stall samples), and
// half the loop control; the instruction mix barely moves (the loop is already 92% FFMA; LDS, STS,
// LDG and pointer increments per 8 k stay): l88k16 kk 2226 instructions per 32 k = 2048 FFMA, 128
// LDS, 32 STS, 8 LDG, 2 BAR, 8 others (92.0% vs 91.9%; kn / mk 92.3%, mn 92.5%); l816k16 / l168k16
// 93.3-93.8%, l816wk16 / l168wk16 93.9-94.2%, l88n64k16 91.3-91.8%.
// Shared memory 2 x 16 x (BM + 4 + BN + 4) floats: 33792 bytes at 128 x 128, 25600 at 128 x 64,
// 50176 for the wide tiles: over the 48 KiB of a static allocation, so those take dynamic shared
// memory (LeanTile::kDynSmem; the limit raised at each launch, as the attention kernels do).
// ptxas (CUDA 13) registers, spill bytes stores/loads, per majors kk / kn / mk / mn:
//              sm_90a                       sm_80
//   l88k16     127 / 127 / 123 / 128, none  125 / 128 / 128 / 128, none (l88 spills there)
//   l816k16    237 / 243 / 243 / 235, none  228 / 240 / 240 / 230, none
//   l168k16    228 / 231 / 232 / 223, none  231 / 240 / 241 / 232, none
//   l88n64k16  128 / 128 / 127 / 128, none  128, spills 8/12, 16/24, 16/24, 36/52
//                                            (l88n64 spills 8/20 .. 24/40 there)
//   l816wk16   227 / 247 / 243 / 239, none  218 / 225 / 220 / 223, none
//   l168wk16   227 / 255 / 220 / 255, none  254 / 234 / 248 / 236, none
// .text per kernel (sm_90a): l88k16 279-280 KB (l88 234-235), l816k16 540-542 KB (l816 452-453),
// l168wk16 547-548 KB (l168w 460-462); the epilogue, not the loop, is most of it.
// Not kept: KC = 16 (the whole next slab in registers): l88 spills 16-32 bytes on sm_90a at its
// 128-register cap; l816 / l168 fit on sm_90a (235-255 registers) but spill 32-48 bytes on sm_80.
// The default variants' SASS is unchanged by the BK / KC parameters: .text sizes, registers and
// spills of all 24 existing kernels equal before / after on sm_90a and sm_80, the bytes too except
// l88 mk on sm_90a (259 of 14680 instruction words differ after the main loop: same opcodes, a
// different register assignment; it comes and goes with unrelated edits of the translation unit,
// e.g. moving the kernel into its header). An `extern __shared__` inside the kernel body, even
// unused, changed the register allocation of others (hence lean_dyn_smem at namespace scope).
#include "gemm/simt_f32_lean_kernel.cuh"

namespace blublas::gemm_detail {
namespace {

//                        BM   BN TM  TN LM LN blocks/SM
using Lean88 = LeanTile<128, 128, 8, 8, 4, 8, 2>;     // 256 thr, warp tiles 32 x 64
using Lean816 = LeanTile<128, 128, 8, 16, 8, 4, 2>;   // 128 thr, warp tiles 64 x 64
using Lean168 = LeanTile<128, 128, 16, 8, 4, 8, 2>;   // 128 thr, warp tiles 64 x 64
using Lean88n64 = LeanTile<128, 64, 8, 8, 8, 4, 4>;   // 128 thr, warp tiles 64 x 32
// Note [SIMT fp32 wide tiles]: cuBLAS's fastest fp32 kernels on the GPT-2 step (H100, session 4
// profile: cutlass_80_simt_sgemm_128x256_8x4 / 256x128_8x4, ~52 TFLOP/s against our 128 x 128
// lean kernels' 42-47) use 256-thread CTAs of 128 x 256 with 8 x 16 per thread, one CTA per SM.
// The same shape in this template: 43 FLOP per staged byte instead of 32 (fewer L2 reads per
// FFMA), 128 FFMA per 6 LDS.128, 8 warps per SM. ptxas (CUDA 13, sm_90a): 221-231 registers, no
// spills, 25088 bytes of shared memory. Measured (2026-11-25 sweep, Note [SIMT fp32 variant
// choice]): 256 x 128 is the default for dW (both operands m/n-major, +2% over l816); with a
// k-major operand both wide tiles lose 10-45% (2 warps per scheduler cannot hide those loads).
using Lean816w = LeanTile<128, 256, 8, 16, 8, 4, 1>;  // 256 thr, warp tiles 64 x 64, 2 x 4 warps
using Lean168w = LeanTile<256, 128, 16, 8, 4, 8, 1>;  // 256 thr, warp tiles 64 x 64, 4 x 2 warps
}  // namespace

bool simt_f32_lean_ok(const GemmProblem& p, bool vec) {
  return vec && p.m > 0 && p.n > 0 && (p.a_k_major || p.m % 4 == 0) &&
         (p.b_k_major || p.n % 4 == 0);
}

Status simt_f32_lean_launch(const GemmProblem& p, SimtLeanVariant v, const SplitArgs& split,
                            int splits, bool vec, cudaStream_t stream) {
  BLUBLAS_CHECK(simt_f32_lean_ok(p, vec), StatusCode::kNotSupported,
                "simt f32 lean kernel: needs 16-byte aligned A, B, lds and batch strides, and M "
                "(N) a multiple of 4 for an m- (n-) contiguous A (B); M=", p.m, " N=", p.n);
  switch (v) {
    case SimtLeanVariant::k88: return launch_lean_majors<Lean88>(p, split, splits, stream);
    case SimtLeanVariant::k816: return launch_lean_majors<Lean816>(p, split, splits, stream);
    case SimtLeanVariant::k168: return launch_lean_majors<Lean168>(p, split, splits, stream);
    case SimtLeanVariant::k88n64: return launch_lean_majors<Lean88n64>(p, split, splits, stream);
    case SimtLeanVariant::k816w: return launch_lean_majors<Lean816w>(p, split, splits, stream);
    case SimtLeanVariant::k168w: return launch_lean_majors<Lean168w>(p, split, splits, stream);
    case SimtLeanVariant::k88k16:
    case SimtLeanVariant::k88n64k16: return simt_f32_lean_k16_launch(p, v, split, splits, stream);
  }
  return Status(StatusCode::kInvalidArgument, "simt f32 lean kernel: unknown variant");
}

}  // namespace blublas::gemm_detail

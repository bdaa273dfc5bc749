// gemm_property_test.cpp: the CPU half of the GEMM property test (the GPU half is
// gemm_property_gpu_test.cu). Without a device it checks, on the same seeded random problems:
//  - the generator: every problem is valid (blublas accepts it up to the device query), its
//    buffers hold every element it addresses, and it covers what the GPU run claims to cover;
//  - argument checks: each problem broken in one field is refused with kInvalidArgument (or
//    kNotSupported) naming that field, before any CUDA call;
//  - normalization (gemm_problem.h): the normalized row-major problem addresses exactly the
//    elements of op(A), op(B), C, D and aux the desc describes, for every op pair and layout (the
//    T,T row-major mapping of issue 11 included), and carries the epilogue over correctly;
//  - heuristics: kAuto's path order per device, the sm_90a plan (tile, split-K, grid), the SIMT
//    split-K plan and the sm_80 tile, on described H100 / H200 / Ampere / Ada devices;
//  - tile math: the sm_90a kernel's work-unit numbering (sm90_work_units.h) covers every
//    (batch, tile, split) once and the splits of a tile partition its k-blocks; the misaligned-
//    operand repack's packed layout.
#include <blublas/device_info.h>
#include <blublas/gemm.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "../../blublas/src/gemm/gemm_problem.h"  // internal (src is private)
#include "../../blublas/src/gemm/heuristics.h"
#include "../../blublas/src/gemm/operand_repack.h"
#include "../../blublas/src/gemm/sm90_heuristics.h"
#include "../../blublas/src/gemm/sm90_work_units.h"
#include "support/gemm_random_problem.h"
#include "common/scoped_env.h"

namespace {

using blu::test::MatrixPlace;
using blu::test::RandomGemm;
using blublas::ComputeMode;
using blublas::DeviceInfo;
using blublas::Dtype;
using blublas::Epilogue;
using blublas::GemmDesc;
using blublas::GemmPath;
using blublas::Layout;
using blublas::Op;
using blublas::Status;
using blublas::StatusCode;
namespace gd = blublas::gemm_detail;
namespace sm90 = blublas::gemm_detail::sm90;

constexpr uint64_t kSeed = 11;   // the GPU run's default seed
constexpr int kProblems = 6000;  // and its default count

// Fake, distinct, 4 KiB-aligned buffer bases: no test here launches anything.
RandomGemm bound_problem(uint64_t seed, int index) {
  RandomGemm g = blu::test::random_gemm(seed, index);
  auto base = [](uintptr_t slot) {
    return reinterpret_cast<char*>(uintptr_t{1} << 40) + (slot << 32);
  };
  blu::test::bind_buffers(&g, base(1), base(2), base(3), base(4), base(5), base(6),
                          reinterpret_cast<float*>(base(7)));
  return g;
}

DeviceInfo device(int major, int minor, int sms) {
  DeviceInfo d;
  d.device = 0;
  d.sm_major = major;
  d.sm_minor = minor;
  d.sm_count = sms;
  d.max_smem_per_block_optin = major == 9 ? 232448 : (minor == 0 ? 166912 : 101376);
  d.max_smem_per_sm = d.max_smem_per_block_optin + 1024;
  d.l2_bytes = 50 << 20;
  d.max_threads_per_sm = 2048;
  return d;
}

// fn(problem, its normalized form, device) for each of the kProblems bound problems on each device.
template <typename F>
void for_each_bound_problem(std::initializer_list<DeviceInfo> devs, F&& fn) {
  for (int i = 0; i < kProblems; ++i) {
    const RandomGemm g = bound_problem(kSeed, i);
    gd::GemmProblem p;
    ASSERT_TRUE(gd::normalize(g.desc, &p).ok());
    for (const DeviceInfo& dev : devs) {
      SCOPED_TRACE(g.describe());
      fn(g, p, dev);
    }
  }
}

// The sm_90a heuristic reads these; the tests below want the heuristic's own choice.
void clear_sm90_env() {
  for (const char* v : {"BLUBLAS_SM90_TILE", "BLUBLAS_SM90_SPLITS", "BLUBLAS_SM90_GROUP_M",
                        "BLUBLAS_SM90_PINGPONG", "BLUBLAS_SM90_GENERIC_EPILOGUE"}) {
    unsetenv(v);
  }
}

// ---- the generator
// -------------------------------------------------------------------------------
TEST(GemmProperty, GeneratorIsDeterministic) {
  for (int i = 0; i < 200; ++i) {
    EXPECT_EQ(blu::test::random_gemm(kSeed, i).describe(),
              blu::test::random_gemm(kSeed, i).describe());
  }
  EXPECT_NE(blu::test::random_gemm(kSeed, 0).describe(),
            blu::test::random_gemm(kSeed + 1, 0).describe());
}

// Every element a problem addresses lies inside its buffer; lds and strides are what validate()
// asks for (inputs may be broadcast with stride 0, outputs never overlap).
void expect_place_ok(const MatrixPlace& p, int batch, const std::string& what) {
  const int64_t inner = p.col_major ? p.rows : p.cols, outer = p.col_major ? p.cols : p.rows;
  EXPECT_GE(p.ld, inner) << what;
  EXPECT_GE(p.offset, 0) << what;
  const int last = batch - 1;
  EXPECT_LT(p.index(last, p.rows - 1, p.cols - 1), p.elems) << what;
  EXPECT_LT(p.index(0, p.rows - 1, p.cols - 1), p.elems) << what;
  if (batch > 1) {
    EXPECT_GE(p.stride, 0) << what;
    if (p.stride > 0) {
      EXPECT_GE(p.stride, (outer - 1) * p.ld + inner) << what;
    }
  }
}

TEST(GemmProperty, GeneratedProblemsAreValid) {
  const bool have_gpu = blublas::device_count() > 0;
  for (int i = 0; i < kProblems; ++i) {
    const RandomGemm g = bound_problem(kSeed, i);
    SCOPED_TRACE(g.describe());
    const GemmDesc& d = g.desc;
    expect_place_ok(g.a, d.batch, "a");
    expect_place_ok(g.b, d.batch, "b");
    expect_place_ok(g.d, d.batch, "d");
    if (d.beta != 0.0f && !g.c_aliases_d) expect_place_ok(g.c, d.batch, "c");
    if (g.aux_written || g.aux_read) expect_place_ok(g.aux, d.batch, "aux");
    if (d.batch > 1) {
      EXPECT_GT(g.d.stride, 0);
    }
    EXPECT_TRUE(d.ab_type != Dtype::kF32 || d.cd_type == Dtype::kF32);
    std::size_t ws = 0;
    const Status st = blublas::gemm_workspace_size(d, &ws);
    if (have_gpu) {
      EXPECT_TRUE(st.ok()) << st.to_string();
    } else {  // validated, then the device query fails (Note [Validate before CUDA])
      EXPECT_EQ(st.code(), StatusCode::kCudaError) << st.to_string();
    }
    if (::testing::Test::HasFailure()) break;
  }
}

TEST(GemmProperty, GeneratorCoversTheCorners) {
  std::map<std::string, int> n;
  for (int i = 0; i < kProblems; ++i) {
    const RandomGemm g = blu::test::random_gemm(kSeed, i);
    const GemmDesc& d = g.desc;
    const int64_t es_ab = static_cast<int64_t>(blublas::dtype_size(d.ab_type));
    ++n[std::string("precision ") + blu::test::gemm_precision_name(d.ab_type, d.compute)];
    ++n[std::string("ab ") + blublas::dtype_name(d.ab_type) + " cd " +
        blublas::dtype_name(d.cd_type)];
    ++n[std::string("ops ") + (d.op_a == Op::kT ? "T" : "N") + (d.op_b == Op::kT ? "T" : "N") +
        (d.layout == Layout::kColMajor ? " col" : " row")];
    ++n["epilogue " + std::to_string(static_cast<int>(d.epilogue))];
    if (d.k == 1) ++n["K=1"];
    if (d.k == 2) ++n["K=2"];
    if (d.k >= 1000) ++n["deep K"];
    if (std::max(d.m, d.n) >= 1000) ++n["wide"];
    if (d.m % 64 != 0 && d.n % 64 != 0) ++n["M, N off every tile"];
    if (d.m == 1 || d.n == 1) ++n["M or N = 1"];
    if (d.batch > 1) ++n["batch"];
    if (d.batch > 1 && (g.a.stride == 0 || g.b.stride == 0)) ++n["broadcast operand"];
    if (d.beta != 0.0f) ++n["beta"];
    if (g.c_aliases_d) ++n["D aliases C"];
    if ((d.lda * es_ab) % 16 != 0 || (d.ldb * es_ab) % 16 != 0) ++n["operand ld off 16 bytes"];
    if (g.a.offset != 0 || g.b.offset != 0 || g.d.offset != 0) ++n["base off alignment"];
    if (g.input_scale < 1.0f) ++n["tiny inputs"];
    if (g.workspace_offset != 0) ++n["workspace offset"];
    if (!g.sm90_tile.empty()) ++n["sm90 tile " + g.sm90_tile];
    if (g.sm90_splits > 1) ++n["sm90 forced split-K"];
    if (g.sm80_splits > 1) ++n["sm80 forced split-K"];
    if (d.ab_type == Dtype::kF16 && d.cd_type == Dtype::kF16 && d.op_a == Op::kT &&
        d.op_b == Op::kT && d.layout == Layout::kRowMajor && d.k <= 2) {
      ++n["issue 11 family"];
    }
  }
  const std::vector<std::pair<std::string, int>> want = {{"precision fp32", 300},
                                                         {"precision tf32", 300},
                                                         {"precision bf16", 1000},
                                                         {"precision f16", 1000},
                                                         {"ab bf16 cd f16", 150},
                                                         {"ab f16 cd bf16", 150},
                                                         {"ab bf16 cd f32", 250},
                                                         {"ab f16 cd f32", 250},
                                                         {"K=1", 300},
                                                         {"K=2", 300},
                                                         {"deep K", 150},
                                                         {"wide", 200},
                                                         {"M, N off every tile", 3000},
                                                         {"M or N = 1", 150},
                                                         {"batch", 1000},
                                                         {"broadcast operand", 30},
                                                         {"beta", 2000},
                                                         {"D aliases C", 800},
                                                         {"operand ld off 16 bytes", 1500},
                                                         {"base off alignment", 800},
                                                         {"tiny inputs", 300},
                                                         {"workspace offset", 800},
                                                         {"sm90 forced split-K", 1000},
                                                         {"sm80 forced split-K", 1000},
                                                         {"issue 11 family", 10}};
  for (const auto& [what, at_least] : want) EXPECT_GE(n[what], at_least) << what;
  for (const char* ops : {"NN", "NT", "TN", "TT"}) {
    for (const char* l : {" row", " col"})
      EXPECT_GE((n[std::string("ops ") + ops + l]), 500) << ops << l;
  }
  for (int e = 0; e <= static_cast<int>(Epilogue::kGeluGrad); ++e) {
    EXPECT_GE(n["epilogue " + std::to_string(e)], 150) << "epilogue " << e;
  }
  for (const char* t : {"128x128_1c", "128x256_2c", "128x128_2c", "128x256_2c_cl2", "64x256_pp"}) {
    EXPECT_GE(n[std::string("sm90 tile ") + t], 400) << t;
  }
}

// ---- argument checks ---------------------------------------------------------------------------
struct Broken {
  StatusCode code;
  std::string needle;
};

// Breaks one field of a valid problem (mutation `which`), or returns false when that mutation
// does not apply to it.
bool break_one(int which, GemmDesc* d, const RandomGemm& g, Broken* b) {
  auto min_ld = [&](const MatrixPlace& p) { return p.col_major ? p.rows : p.cols; };
  b->code = StatusCode::kInvalidArgument;
  switch (which) {
    case 0:
      if (min_ld(g.a) < 2) return false;
      d->lda = min_ld(g.a) - 1;
      b->needle = "lda=" + std::to_string(d->lda);
      return true;
    case 1:
      if (min_ld(g.b) < 2) return false;
      d->ldb = min_ld(g.b) - 1;
      b->needle = "ldb=" + std::to_string(d->ldb);
      return true;
    case 2:
      if (min_ld(g.d) < 2 || g.c_aliases_d) return false;
      d->ldd = min_ld(g.d) - 1;
      b->needle = "ldd=" + std::to_string(d->ldd);
      return true;
    case 3:
      if (d->beta == 0.0f || g.c_aliases_d || min_ld(g.c) < 2) return false;
      d->ldc = min_ld(g.c) - 1;
      b->needle = "ldc=" + std::to_string(d->ldc);
      return true;
    case 4: {
      if (d->batch == 1) return false;
      const int64_t inner = min_ld(g.d), outer = g.d.col_major ? g.d.cols : g.d.rows;
      d->stride_d = (outer - 1) * d->ldd + inner - 1;
      if (g.c_aliases_d) d->stride_c = d->stride_d;
      b->needle = "stride_d=" + std::to_string(d->stride_d);
      return true;
    }
    case 5:
      d->a = nullptr;
      b->needle = "a is null";
      return true;
    case 6:
      d->b = nullptr;
      b->needle = "b is null";
      return true;
    case 7:
      if (g.c_aliases_d) return false;
      d->d = nullptr;
      b->needle = "d is null";
      return true;
    case 8:
      if (d->beta == 0.0f) return false;
      d->c = nullptr;
      b->needle = "c is null";
      return true;
    case 9:
      d->m = 0;
      b->needle = "M=0";
      return true;
    case 10:
      d->k = -1;
      b->needle = "K=-1";
      return true;
    case 11:
      if (d->beta == 0.0f) return false;
      d->c = d->d;
      d->ldc = d->ldd + 8;
      b->needle = "c aliases d";
      return true;
    case 12:
      if (d->ab_type == Dtype::kF32) return false;
      d->compute = ComputeMode::kTF32;
      b->needle = "compute=tf32";
      return true;
    case 13:
      if (d->ab_type != Dtype::kF32) return false;
      d->cd_type = Dtype::kBF16;
      b->code = StatusCode::kNotSupported;
      b->needle = "cd=bf16";
      return true;
    case 14:
      if (d->epilogue != Epilogue::kBias && d->epilogue != Epilogue::kBiasGelu) return false;
      d->bias = nullptr;
      b->needle = "needs bias";
      return true;
    case 15:
      if (!g.aux_written && !g.aux_read) return false;
      d->aux = d->d;
      d->ld_aux = d->ldd;
      d->stride_aux = d->stride_d;
      b->needle = "aux must not alias d";
      return true;
    case 16:
      if (d->batch == 1) return false;
      d->stride_a = -1;
      b->needle = "stride_a=-1";
      return true;
    case 17:
      if (d->epilogue != Epilogue::kBiasGradA && d->epilogue != Epilogue::kBiasGradB) return false;
      d->bias_grad = nullptr;
      b->needle = "needs bias_grad";
      return true;
    case 18:
      d->n = -5;
      b->needle = "N=-5";
      return true;
  }
  return false;
}

TEST(GemmProperty, BrokenProblemsAreRefusedByName) {
  int tried = 0;
  std::set<int> kinds;
  for (int i = 0; i < 3000; ++i) {
    const RandomGemm g = bound_problem(kSeed, i);
    for (int which = i % 19, n = 0; n < 19; ++n, which = (which + 1) % 19) {
      GemmDesc d = g.desc;
      Broken b;
      if (!break_one(which, &d, g, &b)) continue;
      ++tried;
      kinds.insert(which);
      std::size_t ws = 0;
      const Status st = blublas::gemm_workspace_size(d, &ws);
      EXPECT_EQ(st.code(), b.code)
          << "mutation " << which << " of " << g.describe() << ": " << st.to_string();
      EXPECT_NE(st.message().find(b.needle), std::string::npos)
          << "mutation " << which << ": message lacks '" << b.needle << "': " << st.message();
      EXPECT_NE(st.message().find("gemm(M="), std::string::npos) << st.message();
      break;  // one mutation per problem
    }
    if (::testing::Test::HasFailure()) break;
  }
  EXPECT_GE(tried, 2900);
  EXPECT_EQ(kinds.size(), 19u) << "every mutation applied at least once";
}

// ---- normalization ------------------------------------------------------------------------------
// Byte address of stored element (r, c) of batch b for a desc matrix.
uintptr_t desc_addr(const void* base, int64_t ld, int64_t stride, int batch_index, bool col_major,
                    int64_t r, int64_t c, std::size_t es) {
  return reinterpret_cast<uintptr_t>(base) +
         es * static_cast<uintptr_t>(batch_index * stride + (col_major ? c * ld + r : r * ld + c));
}

TEST(GemmProperty, NormalizedProblemAddressesTheSameElements) {
  uint64_t rng = 12345;
  auto next = [&](int n) {
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    return static_cast<int>((rng >> 33) % static_cast<uint64_t>(n));
  };
  for (int i = 0; i < kProblems; ++i) {
    const RandomGemm g = bound_problem(kSeed, i);
    const GemmDesc& d = g.desc;
    SCOPED_TRACE(g.describe());
    gd::GemmProblem p;
    ASSERT_TRUE(gd::normalize(d, &p).ok());
    const bool cm = d.layout == Layout::kColMajor;
    const std::size_t es = blublas::dtype_size(d.ab_type), eo = blublas::dtype_size(d.cd_type);
    // Sizes, epilogue, per-batch strides (0 for one matrix), C only when read.
    EXPECT_EQ(p.m, cm ? d.n : d.m);
    EXPECT_EQ(p.n, cm ? d.m : d.n);
    EXPECT_EQ(p.k, d.k);
    EXPECT_EQ(p.bias_per_col, !cm);
    EXPECT_EQ(p.c, d.beta != 0.0f ? d.c : nullptr);
    if (d.batch == 1) {
      EXPECT_TRUE(p.stride_a == 0 && p.stride_b == 0 && p.stride_d == 0 && p.stride_c == 0);
    }
    EXPECT_EQ(p.compute, d.ab_type == Dtype::kF32 && d.compute == ComputeMode::kDefault
                             ? ComputeMode::kStrictF32
                             : d.compute);
    Epilogue want_epi = d.epilogue;
    if (cm && d.epilogue == Epilogue::kBiasGradA) want_epi = Epilogue::kBiasGradB;
    if (cm && d.epilogue == Epilogue::kBiasGradB) want_epi = Epilogue::kBiasGradA;
    EXPECT_EQ(p.epilogue, want_epi);
    for (int s = 0; s < 24; ++s) {
      const int b = next(d.batch), r = next(p.m), c = next(p.n), k = next(d.k);
      // The normalized problem's elements (gemm_problem.h).
      const uintptr_t pa = reinterpret_cast<uintptr_t>(p.a) +
                           es * static_cast<uintptr_t>(
                                    b * p.stride_a + (p.a_k_major ? r * p.lda + k : k * p.lda + r));
      const uintptr_t pb = reinterpret_cast<uintptr_t>(p.b) +
                           es * static_cast<uintptr_t>(
                                    b * p.stride_b + (p.b_k_major ? c * p.ldb + k : k * p.ldb + c));
      const uintptr_t pd = reinterpret_cast<uintptr_t>(p.d) +
                           eo * static_cast<uintptr_t>(b * p.stride_d + r * p.ldd + c);
      // The desc's: D(i, j) = sum_k op(A)(i, k) op(B)(k, j), row-major D(i, j) = D'(r, c),
      // col-major D(i, j) = D'(j, i) with A' = op(B)^T and B' = op(A)^T.
      const int i_ = cm ? c : r, j_ = cm ? r : c;
      auto op_a = [&](int ii, int kk) {  // A stored M x K (N) or K x M (T)
        return d.op_a == Op::kN ? desc_addr(d.a, d.lda, d.stride_a, b, cm, ii, kk, es)
                                : desc_addr(d.a, d.lda, d.stride_a, b, cm, kk, ii, es);
      };
      auto op_b = [&](int kk, int jj) {  // B stored K x N (N) or N x K (T)
        return d.op_b == Op::kN ? desc_addr(d.b, d.ldb, d.stride_b, b, cm, kk, jj, es)
                                : desc_addr(d.b, d.ldb, d.stride_b, b, cm, jj, kk, es);
      };
      // (For batch 1, b is 0: the desc's strides, even negative ones, play no part.)
      EXPECT_EQ(pa, cm ? op_b(k, r) : op_a(r, k)) << "A'(" << r << ", " << k << ") batch " << b;
      EXPECT_EQ(pb, cm ? op_a(c, k) : op_b(k, c)) << "B'(" << k << ", " << c << ") batch " << b;
      EXPECT_EQ(pd, desc_addr(d.d, d.ldd, d.stride_d, b, cm, i_, j_, eo))
          << "D'(" << r << ", " << c << ")";
      if (p.c != nullptr) {
        const uintptr_t pc = reinterpret_cast<uintptr_t>(p.c) +
                             eo * static_cast<uintptr_t>(b * p.stride_c + r * p.ldc + c);
        EXPECT_EQ(pc, desc_addr(d.c, d.ldc, d.stride_c, b, cm, i_, j_, eo))
            << "C'(" << r << ", " << c << ")";
      }
      if (p.aux != nullptr) {
        const uintptr_t px = reinterpret_cast<uintptr_t>(p.aux) +
                             eo * static_cast<uintptr_t>(b * p.stride_aux + r * p.ld_aux + c);
        EXPECT_EQ(px, desc_addr(d.aux, d.ld_aux, d.stride_aux, b, cm, i_, j_, eo))
            << "aux'(" << r << ", " << c << ")";
      }
    }
    if (::testing::Test::HasFailure()) break;
  }
}

// ---- heuristics
// -------------------------------------------------------------------------------------
TEST(GemmProperty, AutoPathOrderPerDevice) {
  struct Want {
    DeviceInfo dev;
    std::vector<GemmPath> tensor_core;  // 16-bit and tf32
  };
  const Want devices[] = {
      {device(9, 0, 132), {GemmPath::kSm90Wgmma, GemmPath::kSm80Mma, GemmPath::kSimt}},
      {device(8, 0, 108), {GemmPath::kSm80Mma, GemmPath::kSimt}},
      {device(8, 9, 142), {GemmPath::kSm80Mma, GemmPath::kSimt}},
      {device(7, 5, 40), {GemmPath::kSimt}},
  };
  for (int i = 0; i < 400; ++i) {
    const RandomGemm g = bound_problem(kSeed, i);
    gd::GemmProblem p;
    ASSERT_TRUE(gd::normalize(g.desc, &p).ok());
    const bool strict = p.ab_type == Dtype::kF32 && p.compute != ComputeMode::kTF32;
    for (const Want& w : devices) {
      GemmPath order[3];
      int n = 0;
      gd::auto_path_order(p, w.dev, order, &n);
      const std::vector<GemmPath> got(order, order + n);
      const std::vector<GemmPath> want =
          strict ? std::vector<GemmPath>{GemmPath::kSimt} : w.tensor_core;
      EXPECT_EQ(got, want) << g.describe() << " on sm_" << w.dev.sm_version();
    }
  }
}

int ceil_div(int64_t a, int64_t b) {
  return static_cast<int>((a + b - 1) / b);
}

TEST(GemmProperty, Sm90PlanInvariants) {
  clear_sm90_env();
  const DeviceInfo devs[] = {device(9, 0, 132), device(9, 0, 114), device(9, 0, 78)};
  const std::set<sm90::Sm90Tile> heuristic_tiles = {
      sm90::Sm90Tile::k128x256_2c, sm90::Sm90Tile::k64x256_pp, sm90::Sm90Tile::k128x128_2c,
      sm90::Sm90Tile::k192x192_3c};
  int split_plans = 0;
  for (int i = 0; i < kProblems; ++i) {
    const RandomGemm g = bound_problem(kSeed, i);
    gd::GemmProblem p;
    ASSERT_TRUE(gd::normalize(g.desc, &p).ok());
    if (p.ab_type == Dtype::kF32 && p.compute != ComputeMode::kTF32) continue;  // SIMT only
    for (const DeviceInfo& dev : devs) {
      SCOPED_TRACE(g.describe() + " on " + std::to_string(dev.sm_count) + " SMs");
      const sm90::Sm90Plan plan = sm90::choose_plan(p, dev, sm90::Sm90Override{});
      const int kblocks = ceil_div(p.k, sm90::sm90_tile_k(plan.tile, p.ab_type));
      EXPECT_EQ(heuristic_tiles.count(plan.tile), 1u) << sm90::sm90_tile_name(plan.tile);
      EXPECT_GE(plan.splits, 1);
      EXPECT_LE(plan.splits, kblocks);
      if (plan.splits > 1) {
        EXPECT_GE(kblocks / plan.splits, 4) << "a split of under 4 k-blocks";
      }
      if (plan.tile == sm90::Sm90Tile::k64x256_pp) {
        EXPECT_LE(kblocks, 24) << "ping-pong past short K";
      }
      const int64_t units = static_cast<int64_t>(ceil_div(p.m, sm90::sm90_tile_m(plan.tile))) *
                            ceil_div(p.n, sm90::sm90_tile_n(plan.tile)) * p.batch * plan.splits;
      EXPECT_FALSE(plan.stream_k) << "kAuto takes stream-K only when asked (Note [sm90 stream-K])";
      EXPECT_EQ(plan.grid, std::max<int64_t>(1, std::min<int64_t>(units, dev.sm_count)));
      // Note [Tile groups for a large B]: 8 tile rows, or 2048 rows' worth over a 16 MiB B walked
      // in 16+ column tiles.
      const bool large_b = static_cast<double>(p.n) * p.k * blublas::dtype_size(p.ab_type) > 16.0 * 1024 * 1024 &&
                           ceil_div(p.n, sm90::sm90_tile_n(plan.tile)) >= 16;
      EXPECT_EQ(plan.group_m, large_b ? std::max(8, 2048 / sm90::sm90_tile_m(plan.tile)) : 8);
      const sm90::Sm90Plan again = sm90::choose_plan(p, dev, sm90::Sm90Override{});
      EXPECT_TRUE(again.tile == plan.tile && again.splits == plan.splits &&
                  again.grid == plan.grid);
      split_plans += plan.splits > 1;
      // Forced choices are honoured (splits clipped to the k-blocks).
      sm90::Sm90Override force;
      force.tile = i % static_cast<int>(sm90::Sm90Tile::kCount);
      force.splits = 1 + i % 5;
      const sm90::Sm90Plan forced = sm90::choose_plan(p, dev, force);
      if (sm90::sm90_tile_compiled(static_cast<sm90::Sm90Tile>(force.tile), p.ab_type)) {
        EXPECT_EQ(static_cast<int>(forced.tile), force.tile);
        EXPECT_EQ(forced.splits,
                  std::min(force.splits, ceil_div(p.k, sm90::sm90_tile_k(forced.tile, p.ab_type))));
      } else {  // no kernel for these inputs: the force is ignored, the tile kAuto's
        sm90::Sm90Override only_splits;
        only_splits.splits = force.splits;
        const sm90::Sm90Plan fallback = sm90::choose_plan(p, dev, only_splits);
        EXPECT_EQ(forced.tile, fallback.tile) << sm90::sm90_tile_name(forced.tile);
        EXPECT_TRUE(sm90::sm90_tile_compiled(forced.tile, p.ab_type));
      }
      if (::testing::Test::HasFailure()) return;
    }
  }
  EXPECT_GT(split_plans, 50) << "the deep-K problems should take split-K somewhere";
  // The GPT-2 fc forward (K = 768, thousands of tiles) is where kAuto takes the ping-pong tile.
  gd::GemmProblem fc;
  fc.m = 16384;
  fc.n = 3072;
  fc.k = 768;
  fc.ab_type = Dtype::kBF16;
  fc.cd_type = Dtype::kBF16;
  fc.compute = ComputeMode::kDefault;
  EXPECT_EQ(sm90::choose_plan(fc, devs[0], sm90::Sm90Override{}).tile, sm90::Sm90Tile::k64x256_pp);
  // Its weight gradient (3072 x 768, K = 16384) takes the 192x192 tile in 2 splits: 128 units, one
  // even wave on 132 SMs (Note [sm90 192x192 tile]); not for FP8, which has no such kernel.
  gd::GemmProblem fc_dw = fc;
  fc_dw.m = 3072;
  fc_dw.n = 768;
  fc_dw.k = 16384;
  const sm90::Sm90Plan dw_plan = sm90::choose_plan(fc_dw, devs[0], sm90::Sm90Override{});
  EXPECT_EQ(dw_plan.tile, sm90::Sm90Tile::k192x192_3c);
  EXPECT_EQ(dw_plan.splits, 2);
  // The d48 (C = 1600) weight gradients (session 32's interleaved table): qkv dW on 192x192_3c,
  // fc dW on 128x256_2c, not the 128x128_2c tile the old guesses gave them (0.75 of cuBLAS).
  gd::GemmProblem d48_dw = fc_dw;
  d48_dw.m = 4800;
  d48_dw.n = 1600;
  EXPECT_EQ(sm90::choose_plan(d48_dw, devs[0], sm90::Sm90Override{}).tile, sm90::Sm90Tile::k192x192_3c);
  d48_dw.m = 6400;
  EXPECT_EQ(sm90::choose_plan(d48_dw, devs[0], sm90::Sm90Override{}).tile, sm90::Sm90Tile::k128x256_2c);
  fc_dw.ab_type = fc_dw.b_type = Dtype::kE4M3;
  EXPECT_NE(sm90::choose_plan(fc_dw, devs[0], sm90::Sm90Override{}).tile, sm90::Sm90Tile::k192x192_3c);
  // A forced cluster tile gets split-K from the model too (units counted in pairs): attn_proj dW
  // (768 x 768, K = 16384) is 3 x 3 pairs of 128x256 tiles, one split would leave 114 SMs idle.
  gd::GemmProblem attn_dw = fc;
  attn_dw.m = attn_dw.n = 768;
  attn_dw.k = 16384;
  sm90::Sm90Override cl2;
  cl2.tile = static_cast<int>(sm90::Sm90Tile::k128x256_2c_cl2);
  const sm90::Sm90Plan cl2_plan = sm90::choose_plan(attn_dw, devs[0], cl2);
  EXPECT_EQ(cl2_plan.tile, sm90::Sm90Tile::k128x256_2c_cl2);
  EXPECT_GE(cl2_plan.splits, 7) << "9 pair units x splits should fill 66 SM pairs";
  EXPECT_NE(sm90::choose_plan(attn_dw, devs[0], sm90::Sm90Override{}).tile,
            sm90::Sm90Tile::k128x256_2c_cl2) << "kAuto never takes the cluster tile";
  // The issue's problems: K <= 2 is one k-block, never split.
  for (int which = 0; which < 2; ++which) {
    gd::GemmProblem p;
    ASSERT_TRUE(gd::normalize(blu::test::issue11_gemm(which).desc, &p).ok());
    EXPECT_FALSE(p.a_k_major) << "T,T row-major: A' is M-major";
    EXPECT_TRUE(p.b_k_major) << "T,T row-major: B' is K-major";
    EXPECT_EQ(sm90::choose_plan(p, devs[0], sm90::Sm90Override{}).splits, 1);
  }
}

// FP8 (Note [FP8 GEMM]): wgmma on sm_90, mma.sync on sm_89 (Note [sm89 FP8 mma.sync]), nothing
// below; both operands K-major.
TEST(GemmProperty, Fp8PathsByArch) {
  gd::GemmProblem p;
  p.m = 64;
  p.n = 96;
  p.k = 128;
  p.ab_type = p.b_type = Dtype::kE4M3;
  p.cd_type = Dtype::kBF16;
  p.a_k_major = p.b_k_major = true;
  p.a = reinterpret_cast<const void*>(std::uintptr_t{1} << 20);
  p.b = reinterpret_cast<const void*>(std::uintptr_t{1} << 21);
  p.lda = p.ldb = 128;
  EXPECT_EQ(gd::preferred_path(p, device(9, 0, 132)), blublas::GemmPath::kSm90Wgmma);
  EXPECT_EQ(gd::preferred_path(p, device(8, 9, 128)), blublas::GemmPath::kSm80Mma);
  EXPECT_TRUE(gd::sm80_gemm_supports(p, device(8, 9, 128)).ok());
  EXPECT_TRUE(gd::sm80_gemm_supports(p, device(9, 0, 132)).ok());  // the forced mma.sync path on Hopper
  const blublas::Status ampere = gd::sm80_gemm_supports(p, device(8, 6, 84));
  EXPECT_EQ(ampere.code(), blublas::StatusCode::kUnsupportedArch);
  EXPECT_NE(ampere.message().find("sm_89"), std::string::npos) << ampere.message();
  p.b_k_major = false;
  const blublas::Status nmajor = gd::sm80_gemm_supports(p, device(8, 9, 128));
  EXPECT_EQ(nmajor.code(), blublas::StatusCode::kNotSupported);
  EXPECT_NE(nmajor.message().find("K-major"), std::string::npos) << nmajor.message();
}

TEST(GemmProperty, Sm90TileShapes) {
  using T = sm90::Sm90Tile;
  const std::tuple<T, int, int> shapes[] = {{T::k128x128_1c, 128, 128},
                                            {T::k128x256_2c, 128, 256},
                                            {T::k128x128_2c, 128, 128},
                                            {T::k128x256_2c_cl2, 128, 256},
                                            {T::k64x256_pp, 64, 256},
                                            {T::k192x192_3c, 192, 192}};
  for (const auto& [t, bm, bn] : shapes) {
    EXPECT_EQ(sm90::sm90_tile_m(t), bm) << sm90::sm90_tile_name(t);
    EXPECT_EQ(sm90::sm90_tile_n(t), bn) << sm90::sm90_tile_name(t);
    // One 128-byte swizzle row of K per stage.
    EXPECT_EQ(sm90::sm90_tile_k(t, Dtype::kBF16), 64);
    EXPECT_EQ(sm90::sm90_tile_k(t, Dtype::kF16), 64);
    EXPECT_EQ(sm90::sm90_tile_k(t, Dtype::kF32), 32);
  }
}

TEST(GemmProperty, SimtAndSm80Plans) {
  if (std::getenv("BLUBLAS_SIMT_SPLIT_MAX") != nullptr) GTEST_SKIP() << "split-K capped by the environment";
  int splits_seen = 0;
  for_each_bound_problem({device(9, 0, 132), device(8, 0, 108)},
                         [&](const RandomGemm&, const gd::GemmProblem& p, const DeviceInfo& dev) {
    const gd::SimtPlan s = gd::choose_simt_plan(p, dev);
    if (p.ab_type != Dtype::kF32) {
      EXPECT_EQ(s.kernel, gd::SimtKernel::kGeneric);
    }
    EXPECT_GE(s.splits, 1);
    if (s.splits > 1) {
      splits_seen++;
      EXPECT_EQ(s.k_split % 8, 0);
      EXPECT_GE(s.k_split, 512);
      EXPECT_GE(static_cast<int64_t>(s.splits) * s.k_split, p.k) << "K not covered";
      EXPECT_LT(static_cast<int64_t>(s.splits - 1) * s.k_split, p.k) << "an empty split";
      EXPECT_LE(static_cast<int64_t>(s.splits) * p.batch, 65535);
    }
    // sm_80 tiles: a larger problem never takes a smaller tile.
    gd::GemmProblem bigger = p;
    bigger.m = p.m * 2;
    EXPECT_LE(static_cast<int>(gd::choose_sm80_tile(bigger, dev)),
              static_cast<int>(gd::choose_sm80_tile(p, dev)));
  });
  EXPECT_GT(splits_seen, 10) << "deep-K strict fp32 problems should take SIMT split-K";
}

// Note [sm80 split-K]: every plan covers K with no empty split and at least 8 slices per split;
// the weight-gradient shapes (few tiles, deep K) split, the forwards (thousands of tiles) do not,
// and BLUBLAS_SM80_SPLITS forces a count (clamped to the slices).
TEST(GemmProperty, Sm80SplitKPlans) {
  if (std::getenv("BLUBLAS_SM80_SPLITS") != nullptr) GTEST_SKIP() << "split-K forced by the environment";
  int splits_seen = 0;
  for_each_bound_problem({device(9, 0, 132), device(8, 9, 142), device(8, 0, 108)},
                         [&](const RandomGemm&, const gd::GemmProblem& p, const DeviceInfo& dev) {
    const gd::Sm80Plan plan = gd::choose_sm80_plan(p, dev);
    const int64_t bk = 64 / static_cast<int64_t>(blublas::dtype_size(p.ab_type));
    const int64_t slices = (p.k + bk - 1) / bk;
    ASSERT_GE(plan.splits, 1);
    if (plan.splits == 1) {
      EXPECT_EQ(gd::sm80_partial_bytes(p, plan), 0u);
      return;
    }
    splits_seen++;
    EXPECT_LE(plan.splits, 8);
    EXPECT_GE(plan.kt_per_split, 8);
    EXPECT_GE(static_cast<int64_t>(plan.splits) * plan.kt_per_split, slices) << "K not covered";
    EXPECT_LT(static_cast<int64_t>(plan.splits - 1) * plan.kt_per_split, slices) << "an empty split";
    EXPECT_EQ(gd::sm80_partial_bytes(p, plan),
              static_cast<std::size_t>(plan.splits) * p.batch * p.m * gd::sm80_partial_ld(p) * 4);
    EXPECT_EQ(gd::sm80_partial_ld(p) % 4, 0);
    EXPECT_GE(gd::sm80_partial_ld(p), p.n);
  });
  EXPECT_GT(splits_seen, 10) << "deep-K problems with few tiles should take sm80 split-K";

  // GPT-2 124M (M = B*T = 16384, C = 768) in bf16 on an H100: dW splits, the forwards do not.
  const DeviceInfo h100 = device(9, 0, 132);
  auto bf16 = [](int m, int n, int k) {
    gd::GemmProblem p;
    p.m = m, p.n = n, p.k = k;
    p.ab_type = p.b_type = p.cd_type = Dtype::kBF16;
    return p;
  };
  EXPECT_GT(gd::choose_sm80_plan(bf16(3072, 768, 16384), h100).splits, 1) << "fc dW";
  EXPECT_GT(gd::choose_sm80_plan(bf16(768, 768, 16384), h100).splits, 1) << "attn_proj dW";
  EXPECT_EQ(gd::choose_sm80_plan(bf16(16384, 2304, 768), h100).splits, 1) << "qkv fwd";
  EXPECT_EQ(gd::choose_sm80_plan(bf16(16384, 768, 3072), h100).splits, 1) << "fc dX";
  {
    blu::test::ScopedEnv forced("BLUBLAS_SM80_SPLITS", "3");
    const gd::Sm80Plan f = gd::choose_sm80_plan(bf16(16384, 2304, 768), h100);
    EXPECT_EQ(f.splits, 3);
    EXPECT_EQ(f.kt_per_split, 8);  // 24 slices of 32
    EXPECT_EQ(gd::choose_sm80_plan(bf16(64, 64, 40), h100).splits, 2) << "clamped to the 2 slices";
  }
}

// Note [SIMT NT via a transposed B]: only strict-fp32 NT problems with a large M and a B of at
// most 512 MiB run on a transposed copy (GPT-2's forwards, the lm head included), never dX / dW.
TEST(GemmProperty, SimtTransposeBChoice) {
  if (std::getenv("BLUBLAS_SIMT_SPLIT_MAX") != nullptr || std::getenv("BLUBLAS_SIMT_SPLIT_FILL") != nullptr) {
    GTEST_SKIP() << "split-K plans changed by the environment";
  }
  const DeviceInfo dev = device(9, 0, 132);
  auto problem = [](int m, int n, int k, bool a_k, bool b_k) {
    gd::GemmProblem p;
    p.m = m, p.n = n, p.k = k;
    p.ab_type = p.cd_type = Dtype::kF32;
    p.a_k_major = a_k, p.b_k_major = b_k;
    return p;
  };
  EXPECT_TRUE(gd::choose_simt_plan(problem(16384, 2304, 768, true, true), dev).transpose_b);
  EXPECT_TRUE(gd::choose_simt_plan(problem(4096, 50304, 768, true, true), dev).transpose_b);
  EXPECT_FALSE(gd::choose_simt_plan(problem(16384, 768, 3072, true, false), dev).transpose_b);
  EXPECT_FALSE(gd::choose_simt_plan(problem(768, 3072, 16384, false, false), dev).transpose_b);
  EXPECT_FALSE(gd::choose_simt_plan(problem(1024, 2304, 768, true, true), dev).transpose_b);
  EXPECT_FALSE(gd::choose_simt_plan(problem(16384, 65536, 4096, true, true), dev).transpose_b)
      << "1 GiB of B is over the cap";
  gd::GemmProblem batched = problem(16384, 768, 768, true, true);
  batched.batch = 2;
  EXPECT_FALSE(gd::choose_simt_plan(batched, dev).transpose_b);
  // Note [SIMT split-K for wave fill]: the lm head's dX at 8192 rows (1.45 waves) takes 2
  // splits; at 16384 rows (2.9 waves, 97%) and with a shallow K it takes none.
  const gd::SimtPlan lm8k = gd::choose_simt_plan(problem(8192, 768, 50304, true, false), dev);
  EXPECT_EQ(lm8k.splits, 2);
  EXPECT_EQ(lm8k.k_split, 25152);
  EXPECT_EQ(gd::choose_simt_plan(problem(16384, 768, 50304, true, false), dev).splits, 1);
  EXPECT_EQ(gd::choose_simt_plan(problem(8192, 768, 4096, true, false), dev).splits, 1);
  // Note [SIMT split-K]: the fc dW (144 tiles, K 16384) takes the fewest splits whose last wave
  // of 264 slots is >= 97% full: 9 x 1824 deep = 1296 CTAs, 4.91 waves (98%; 5 splits fill 91%,
  // 7 95.5%); qkv dW (108 tiles) 12 (98%; 7 fill 95.5%), attn_proj dW (36 tiles) 22 (3 waves).
  const gd::SimtPlan fc_dw = gd::choose_simt_plan(problem(3072, 768, 16384, false, false), dev);
  EXPECT_EQ(fc_dw.splits, 9);
  EXPECT_EQ(fc_dw.k_split, 1824);
  EXPECT_EQ(gd::choose_simt_plan(problem(2304, 768, 16384, false, false), dev).splits, 12);
  EXPECT_EQ(gd::choose_simt_plan(problem(768, 768, 16384, false, false), dev).splits, 22);
  gd::GemmProblem bf16 = problem(16384, 768, 768, true, true);
  bf16.ab_type = bf16.cd_type = Dtype::kBF16;
  EXPECT_FALSE(gd::choose_simt_plan(bf16, dev).transpose_b);
}

// ---- tile math ----------------------------------------------------------------------------------
// A seeded linear congruential generator: next(lo, hi) is uniform in [lo, hi].
struct Lcg {
  uint64_t state;
  int operator()(int lo, int hi) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    return lo + static_cast<int>((state >> 33) % static_cast<uint64_t>(hi - lo + 1));
  }
};

struct UnitParams {  // the fields of the kernel's KernelParams that decode_unit reads
  int tiles_m, tiles_n, batch, group_m, splits, kblocks;
};

// A random tile grid of up to max_tiles x max_tiles tiles, max_batch batches, max_kblocks k-blocks.
void draw_tiles(Lcg& next, UnitParams* p, int max_tiles, int max_batch, int max_group, int max_kblocks) {
  p->tiles_m = next(1, max_tiles);
  p->tiles_n = next(1, max_tiles);
  p->batch = next(1, max_batch);
  p->group_m = next(1, max_group);
  p->kblocks = next(1, max_kblocks);
}

TEST(GemmProperty, Sm90WorkUnitsCoverEveryTileOnce) {
  Lcg next{77};
  for (int t = 0; t < 1500; ++t) {
    UnitParams p;
    draw_tiles(next, &p, 24, 4, 12, 64);
    p.splits = next(1, std::min(12, p.kblocks));  // the launcher clamps splits to the k-blocks
    SCOPED_TRACE("tiles " + std::to_string(p.tiles_m) + "x" + std::to_string(p.tiles_n) +
                 " batch " + std::to_string(p.batch) + " group_m " + std::to_string(p.group_m) +
                 " kblocks " + std::to_string(p.kblocks) + " splits " + std::to_string(p.splits));
    const int units = p.tiles_m * p.tiles_n * p.batch * p.splits;
    std::set<std::tuple<int, int, int, int>> seen;
    std::map<std::tuple<int, int, int>, std::vector<std::pair<int, int>>>
        ranges;  // per tile: split -> k
    for (int u = 0; u < units; ++u) {
      const sm90::WorkUnit w = sm90::decode_unit(p, u);
      ASSERT_TRUE(w.batch >= 0 && w.batch < p.batch && w.tm >= 0 && w.tm < p.tiles_m && w.tn >= 0 &&
                  w.tn < p.tiles_n && w.split >= 0 && w.split < p.splits)
          << "unit " << u << " -> batch " << w.batch << " tile " << w.tm << "," << w.tn << " split "
          << w.split;
      EXPECT_TRUE(seen.insert({w.batch, w.tm, w.tn, w.split}).second)
          << "unit " << u << " repeats a tile";
      EXPECT_LT(w.kb0, w.kb1) << "unit " << u << " has no k-block";
      auto& r = ranges[{w.batch, w.tm, w.tn}];
      if (static_cast<int>(r.size()) <= w.split) r.resize(w.split + 1, {-1, -1});
      r[w.split] = {w.kb0, w.kb1};
    }
    EXPECT_EQ(static_cast<int>(seen.size()), units);
    for (const auto& [tile, r] : ranges) {
      ASSERT_EQ(static_cast<int>(r.size()), p.splits);
      EXPECT_EQ(r.front().first, 0);
      EXPECT_EQ(r.back().second, p.kblocks);
      for (int s = 1; s < p.splits; ++s) EXPECT_EQ(r[s].first, r[s - 1].second) << "split " << s;
    }
    if (::testing::Test::HasFailure()) return;
  }
}

// Note [sm90 stream-K]: with the kernel's own local_unit over random shapes, partitions and
// grids (the CTA budget): every (tile, k-block) runs exactly once; partition boundaries fall on
// sk_gran; a launched CTA runs its partition CTAs in descending order, every partition CTA has
// work; a tile's later parts (kb0 > 0) are first units and its finisher (kb0 = 0 < kb1 <
// kblocks) a last unit whose sk_last_contributor names exactly the CTAs holding those parts; and
// a simulation of the launched CTAs (each running its units in order, a finisher blocking until
// its tile's parts are stored) always runs to the end: no wait can hang.
struct StreamKParams : UnitParams {  // the fields of KernelParams that local_unit reads
  int num_units, sk_ctas, sk_gran, sk_units;
};

TEST(GemmProperty, Sm90StreamKPartitionsAndNeverHangs) {
  Lcg next{4242};
  int finished_tiles = 0;
  for (int trial = 0; trial < 1500; ++trial) {
    StreamKParams p;
    draw_tiles(next, &p, 12, 3, 8, 80);
    p.splits = 1;
    p.num_units = p.tiles_m * p.tiles_n * p.batch;
    p.sk_gran = p.kblocks % 2 == 0 ? 2 : 1;
    p.sk_units = p.num_units * p.kblocks / p.sk_gran;
    p.sk_ctas = std::min(next(1, 140), p.sk_units);  // as the launcher clamps it
    const int grid = next(1, p.sk_ctas);
    SCOPED_TRACE("tiles " + std::to_string(p.tiles_m) + "x" + std::to_string(p.tiles_n) + " batch " +
                 std::to_string(p.batch) + " kblocks " + std::to_string(p.kblocks) + " sk_ctas " +
                 std::to_string(p.sk_ctas) + " grid " + std::to_string(grid));
    std::vector<std::vector<sm90::WorkUnit>> per_cta(grid);
    std::map<int, std::vector<sm90::WorkUnit>> per_partition;
    std::map<std::tuple<int, int, int>, std::vector<std::pair<int, int>>> ranges;
    for (int b = 0; b < grid; ++b) {
      const int n = sm90::local_unit_count(p, b, grid);
      int prev_v = p.sk_ctas;
      for (int j = 0; j < n; ++j) {
        const sm90::WorkUnit w = sm90::local_unit(p, b, grid, j);
        ASSERT_EQ(w.sk_cta % grid, b) << "unit " << j << " of CTA " << b;
        ASSERT_LE(w.sk_cta, prev_v) << "partition CTAs not in descending order";
        prev_v = w.sk_cta;
        ASSERT_TRUE(w.kb0 >= 0 && w.kb0 < w.kb1 && w.kb1 <= p.kblocks) << w.kb0 << ".." << w.kb1;
        if (p.sk_gran == 2) {
          EXPECT_EQ(w.kb0 % 2, 0);
          EXPECT_EQ(w.kb1 % 2, 0);
        }
        per_cta[b].push_back(w);
        per_partition[w.sk_cta].push_back(w);
        ranges[{w.batch, w.tm, w.tn}].push_back({w.kb0, w.kb1});
      }
    }
    ASSERT_EQ(static_cast<int>(per_partition.size()), p.sk_ctas) << "a partition CTA without work";
    ASSERT_EQ(static_cast<int>(ranges.size()), p.num_units);
    for (auto& [tile, r] : ranges) {
      std::sort(r.begin(), r.end());
      EXPECT_EQ(r.front().first, 0);
      EXPECT_EQ(r.back().second, p.kblocks);
      for (size_t i = 1; i < r.size(); ++i) EXPECT_EQ(r[i].first, r[i - 1].second);
    }
    // Parts and finishers.
    std::map<std::tuple<int, int, int>, std::vector<int>> parts;  // tile -> partition CTAs, k order
    for (const auto& [v, units] : per_partition) {
      for (size_t j = 0; j < units.size(); ++j) {
        const sm90::WorkUnit& w = units[j];
        if (w.kb0 > 0) {
          EXPECT_EQ(j, 0u) << "a later part that is not its partition CTA's first unit";
          parts[{w.batch, w.tm, w.tn}].push_back(v);
        }
        if (w.kb0 == 0 && w.kb1 < p.kblocks) {
          EXPECT_EQ(j + 1, units.size()) << "a finisher that is not last";
        }
      }
    }
    for (const auto& [v, units] : per_partition) {
      const sm90::WorkUnit& w = units.back();
      if (w.kb0 != 0 || w.kb1 == p.kblocks) continue;
      ++finished_tiles;
      const int last = sm90::sk_last_contributor(p, w);
      std::vector<int> expect;
      for (int h = v + 1; h <= last; ++h) expect.push_back(h);
      const std::vector<int>& got = parts[std::make_tuple(w.batch, w.tm, w.tn)];
      EXPECT_EQ(got, expect) << "finisher " << v;
    }
    // Simulation: round-robin over launched CTAs; a finisher waits for its tile's parts.
    std::set<int> stored;  // partition CTAs whose part is stored
    std::vector<size_t> pc(grid, 0);
    size_t done = 0, total = 0;
    for (const auto& u : per_cta) total += u.size();
    for (bool progress = true; progress;) {
      progress = false;
      for (int b = 0; b < grid; ++b) {
        if (pc[b] == per_cta[b].size()) continue;
        const sm90::WorkUnit& w = per_cta[b][pc[b]];
        if (w.kb0 == 0 && w.kb1 < p.kblocks) {
          bool ready = true;
          for (int h = w.sk_cta + 1; h <= sm90::sk_last_contributor(p, w); ++h) ready = ready && stored.count(h);
          if (!ready) continue;
        }
        if (w.kb0 > 0) stored.insert(w.sk_cta);
        ++pc[b];
        ++done;
        progress = true;
      }
    }
    ASSERT_EQ(done, total) << "the launched CTAs would wait forever";
    if (::testing::Test::HasFailure()) return;
  }
  EXPECT_GT(finished_tiles, 1000);
}

// Note [sm90 fused bias gradient]: which problems the kernel sums kBiasGradA for, and that every
// work unit of those starts its k-range on a 128-k chunk (the kernel's precondition: a chunk's two
// k-blocks in one unit), checked with the kernel's own decode_unit over random splits.
TEST(GemmProperty, Sm90FusedBiasGradPreconditions) {
  using T = sm90::Sm90Tile;
  blublas::gemm_detail::GemmProblem p;
  p.m = 768; p.n = 3072; p.k = 16384; p.batch = 1;
  p.ab_type = p.b_type = Dtype::kBF16; p.cd_type = Dtype::kF32;
  p.a_k_major = false;
  p.epilogue = Epilogue::kBiasGradA;
  for (T t : {T::k128x128_1c, T::k128x256_2c, T::k128x128_2c, T::k64x256_pp, T::k192x192_3c}) {
    EXPECT_TRUE(sm90::sm90_fuses_bias_grad(p, t, 1, false)) << sm90::sm90_tile_name(t);
  }
  EXPECT_FALSE(sm90::sm90_fuses_bias_grad(p, T::k128x256_2c_cl2, 1, false));  // cluster multicast
  EXPECT_FALSE(sm90::sm90_fuses_bias_grad(p, T::k128x128_2c, 1, true));       // K-major A: "row" pass
  blublas::gemm_detail::GemmProblem q = p;
  q.epilogue = Epilogue::kBiasGradB;
  EXPECT_FALSE(sm90::sm90_fuses_bias_grad(q, T::k128x128_2c, 1, false));
  q = p;
  q.batch = 2;
  EXPECT_FALSE(sm90::sm90_fuses_bias_grad(q, T::k128x128_2c, 1, false));
  q = p;
  q.ab_type = q.b_type = Dtype::kF32;
  EXPECT_FALSE(sm90::sm90_fuses_bias_grad(q, T::k128x128_2c, 1, false));  // tf32: 32-deep stages
  q = p;
  q.ab_type = q.b_type = Dtype::kF16;
  EXPECT_TRUE(sm90::sm90_fuses_bias_grad(q, T::k128x128_2c, 1, false));
  // Splits: fused exactly when every unit's first k-block is even.
  uint64_t rng = 30;
  int fused = 0, separate = 0;
  for (int t = 0; t < 3000; ++t) {
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    q = p;
    q.k = 1 + static_cast<int>((rng >> 33) % 5000);
    UnitParams u;
    u.tiles_m = 3; u.tiles_n = 2; u.batch = 1; u.group_m = 8;
    u.kblocks = (q.k + 63) / 64;
    u.splits = 1 + static_cast<int>((rng >> 20) % static_cast<uint64_t>(std::min(16, u.kblocks)));
    bool all_even = true;
    for (int unit = 0; unit < u.tiles_m * u.tiles_n * u.splits; ++unit) {
      all_even = all_even && sm90::decode_unit(u, unit).kb0 % 2 == 0;
    }
    const bool f = sm90::sm90_fuses_bias_grad(q, T::k128x128_2c, u.splits, false);
    EXPECT_EQ(f, all_even) << "k " << q.k << " splits " << u.splits;
    (f ? fused : separate) += 1;
  }
  EXPECT_GT(fused, 300);
  EXPECT_GT(separate, 300);
}

TEST(GemmProperty, RepackedOperandLayout) {
  for (Dtype t : {Dtype::kF32, Dtype::kBF16, Dtype::kF16}) {
    const int64_t per16 = 16 / static_cast<int64_t>(blublas::dtype_size(t));
    for (int64_t inner : {1, 2, 3, 7, 8, 9, 31, 4099}) {
      gd::RepackSpec s;
      s.type = t;
      s.batch = 3;
      s.outer = 5;
      s.inner = inner;
      EXPECT_EQ(s.ld_dst() % per16, 0);
      EXPECT_GE(s.ld_dst(), inner);
      EXPECT_LT(s.ld_dst(), inner + per16);
      EXPECT_EQ(s.stride_dst(), 5 * s.ld_dst());
      EXPECT_EQ(s.bytes(), static_cast<std::size_t>(3 * 5 * s.ld_dst()) * blublas::dtype_size(t));
    }
  }
}

}  // namespace

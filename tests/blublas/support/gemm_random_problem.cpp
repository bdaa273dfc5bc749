// gemm_random_problem.cpp: the seeded problem generator of the GEMM property tests (see the
// header). A splitmix64 stream per (seed, index) and integer arithmetic only, so a problem is the
// same on every machine and standard library.
#include "support/gemm_random_problem.h"

#include <algorithm>
#include <cstdint>
#include <sstream>

namespace blu::test {
namespace {

using blublas::ComputeMode;
using blublas::Dtype;
using blublas::Epilogue;
using blublas::Layout;
using blublas::Op;

struct Rng {
  uint64_t state;
  uint64_t next() {
    uint64_t z = (state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  int below(int n) { return static_cast<int>(next() % static_cast<uint64_t>(n)); }  // [0, n)
  int range(int lo, int hi) { return lo + below(hi - lo + 1); }                     // [lo, hi]
  bool percent(int p) { return below(100) < p; }
  template <class T, std::size_t N>
  T pick(const T (&v)[N]) {
    return v[below(static_cast<int>(N))];
  }
};

int64_t round_up(int64_t v, int64_t m) {
  return (v + m - 1) / m * m;
}

// Sizes around every tile edge (64, 128, 192, 256 and multiples) and the smallest ones.
constexpr int kEdgeSizes[] = {1,   2,   3,   7,   8,   9,   15,  16,  17,  31,  32,
                              33,  63,  64,  65,  127, 128, 129, 191, 192, 193, 255,
                              256, 257, 319, 320, 383, 384, 385, 511, 512, 513};
// K below / at / past one k-block (64 16-bit or 32 f32 elements), one 16-byte chunk (8 or 4).
constexpr int kEdgeK[] = {1,  2,  3,  4,  5,  7,   8,   9,   15,  16,  17,  31,  32,  33, 63,
                          64, 65, 95, 96, 97, 127, 128, 129, 191, 192, 193, 255, 256, 257};

const char* op_name(Op o) {
  return o == Op::kT ? "T" : "N";
}

// A matrix stored rows x cols in `layout`, batch copies. Inputs may be broadcast (stride 0) and
// take the tightest non-overlapping stride; outputs never overlap (validate() demands it).
MatrixPlace make_place(Rng& r, int64_t rows, int64_t cols, bool col_major, int64_t elem_bytes,
                       int batch, bool input) {
  MatrixPlace p;
  p.rows = rows;
  p.cols = cols;
  p.col_major = col_major;
  const int64_t inner = col_major ? rows : cols, outer = col_major ? cols : rows;
  const int64_t per16 = 16 / elem_bytes;
  const int ld_mode = r.below(100);
  if (ld_mode < 35) {
    p.ld = inner;  // tight: misaligned for the tensor-core paths unless inner is a multiple
  } else if (ld_mode < 70) {
    p.ld = round_up(inner, per16);
  } else if (ld_mode < 85) {
    p.ld = round_up(inner, per16) + per16 * r.range(1, 3);
  } else {
    p.ld = inner + r.range(1, 7);  // odd padding
  }
  const int64_t tight = (outer - 1) * p.ld + inner;
  if (batch == 1) {
    // Ignored for batch 1 (even negative): any value must do.
    p.stride = r.percent(20) ? -1 - r.below(1000) : outer * p.ld;
  } else {
    const int s = r.below(100);
    if (s < 30) {
      p.stride = tight;
    } else if (s < 60) {
      p.stride = outer * p.ld;
    } else if (s < 80) {
      p.stride = round_up(outer * p.ld, per16);
    } else if (s < 92 || !input) {
      p.stride = outer * p.ld + r.range(1, 37);
    } else {
      p.stride = 0;  // one matrix for every batch
    }
  }
  p.offset = r.percent(12) ? r.range(1, static_cast<int>(std::max<int64_t>(1, per16 - 1))) : 0;
  p.elems = p.offset + (batch > 1 ? (batch - 1) * p.stride : 0) + tight;
  return p;
}

void set_dims(Rng& r, int* m, int* n, int* k, int* batch) {
  const int cls = r.below(100);
  auto tiny = [&] { return r.range(1, 48); };
  auto edge = [&] { return r.percent(70) ? r.pick(kEdgeSizes) : r.range(1, 300); };
  *batch = r.percent(70) ? 1 : r.range(2, 4);
  if (cls < 35) {
    *m = tiny();
    *n = tiny();
    *k = r.percent(50) ? r.range(1, 9) : r.range(1, 40);
  } else if (cls < 65) {
    *m = edge();
    *n = edge();
    *k = r.percent(70) ? r.pick(kEdgeK) : r.range(1, 300);
  } else if (cls < 85) {
    *m = r.range(1, 700);
    *n = r.range(1, 700);
    *k = r.range(1, 700);
    *batch = std::min(*batch, 2);
  } else if (cls < 93) {  // one wide dimension, like the issue's 4099 x 500
    const int wide = r.range(1000, 4200), other = r.range(1, 500);
    const bool m_wide = r.percent(50);
    *m = m_wide ? wide : other;
    *n = m_wide ? other : wide;
    *k = r.percent(50) ? r.range(1, 8) : r.range(1, 256);
    *batch = std::min(*batch, 3);
  } else {  // deep K, skinny output: split-K on the sm_90a and SIMT paths
    *m = r.range(1, 260);
    *n = r.range(1, 260);
    *k = r.range(1000, 5200);
    *batch = std::min(*batch, 2);
  }
  if (r.percent(12)) *k = r.range(1, 2);  // the issue's K
}

}  // namespace

const char* gemm_precision_name(Dtype ab, ComputeMode compute) {
  switch (ab) {
    case Dtype::kBF16:
      return "bf16";
    case Dtype::kF16:
      return "f16";
    case Dtype::kE4M3:
      return "e4m3";
    case Dtype::kE5M2:
      return "e5m2";
    case Dtype::kF32:
      break;
  }
  return compute == ComputeMode::kTF32 ? "tf32" : "fp32";
}

RandomGemm random_gemm(uint64_t seed, int index) {
  Rng r{seed * 0x2545f4914f6cdd1dull + static_cast<uint64_t>(index) * 0x9e3779b97f4a7c15ull + 1};
  r.next();
  RandomGemm g;
  g.seed = seed;
  g.index = index;
  blublas::GemmDesc& d = g.desc;

  const int prec = r.below(100);
  if (prec < 15) {
    d.ab_type = Dtype::kF32;
    d.cd_type = Dtype::kF32;
    d.compute = r.percent(50) ? ComputeMode::kDefault : ComputeMode::kStrictF32;
  } else if (prec < 30) {
    d.ab_type = Dtype::kF32;
    d.cd_type = Dtype::kF32;
    d.compute = ComputeMode::kTF32;
  } else {
    d.ab_type = prec < 65 ? Dtype::kBF16 : Dtype::kF16;
    const Dtype other = d.ab_type == Dtype::kBF16 ? Dtype::kF16 : Dtype::kBF16;
    const int o = r.below(100);
    d.cd_type = o < 50 ? d.ab_type : (o < 80 ? Dtype::kF32 : other);
  }
  set_dims(r, &d.m, &d.n, &d.k, &d.batch);
  // Keep one problem's work and memory small: the run does thousands.
  while (static_cast<int64_t>(d.batch) * d.m * d.n > 3000000 ||
         static_cast<int64_t>(d.batch) * d.m * d.n * d.k > 2000000000) {
    if (d.k > 8 && d.k >= d.m && d.k >= d.n)
      d.k = (d.k + 1) / 2;
    else if (d.m >= d.n)
      d.m = (d.m + 1) / 2;
    else
      d.n = (d.n + 1) / 2;
  }
  d.op_a = r.percent(50) ? Op::kT : Op::kN;
  d.op_b = r.percent(50) ? Op::kT : Op::kN;
  d.layout = r.percent(50) ? Layout::kColMajor : Layout::kRowMajor;
  const bool cm = d.layout == Layout::kColMajor;

  const float alphas[] = {1.0f, 0.5f, 2.0f, -1.0f, -0.5f, 1.5f, 0.25f};
  d.alpha = r.percent(70) ? r.pick(alphas) : static_cast<float>(r.range(-2000, 2000)) / 1000.0f;
  if (d.alpha == 0.0f) d.alpha = 0.75f;
  const float betas[] = {1.0f, 0.5f, -1.0f, 0.75f, -0.25f};
  d.beta = r.percent(50) ? 0.0f
                         : (r.percent(70) ? r.pick(betas)
                                          : static_cast<float>(r.range(-1500, 1500)) / 1000.0f);

  const int e = r.below(100);
  if (e >= 50) {
    const Epilogue epis[] = {Epilogue::kBias,      Epilogue::kBiasGelu,  Epilogue::kGelu,
                             Epilogue::kBiasGradA, Epilogue::kBiasGradB, Epilogue::kGeluGrad};
    d.epilogue = r.pick(epis);
    const bool grad = d.epilogue == Epilogue::kBiasGradA || d.epilogue == Epilogue::kBiasGradB;
    if (grad && d.batch > 1) d.epilogue = Epilogue::kBias;
  }
  g.aux_written =
      d.epilogue == Epilogue::kBiasGelu || (d.epilogue == Epilogue::kGelu && r.percent(50));
  g.aux_read = d.epilogue == Epilogue::kGeluGrad;

  const int64_t es_ab = static_cast<int64_t>(blublas::dtype_size(d.ab_type));
  const int64_t es_cd = static_cast<int64_t>(blublas::dtype_size(d.cd_type));
  // Stored shapes: A is M x K (N) or K x M (T); B is K x N (N) or N x K (T).
  g.a = d.op_a == Op::kN ? make_place(r, d.m, d.k, cm, es_ab, d.batch, true)
                         : make_place(r, d.k, d.m, cm, es_ab, d.batch, true);
  g.b = d.op_b == Op::kN ? make_place(r, d.k, d.n, cm, es_ab, d.batch, true)
                         : make_place(r, d.n, d.k, cm, es_ab, d.batch, true);
  g.d = make_place(r, d.m, d.n, cm, es_cd, d.batch, false);
  if (d.beta != 0.0f) {
    g.c_aliases_d = r.percent(50);
    g.c = g.c_aliases_d ? g.d : make_place(r, d.m, d.n, cm, es_cd, d.batch, true);
  }
  if (g.aux_written || g.aux_read) g.aux = make_place(r, d.m, d.n, cm, es_cd, d.batch, g.aux_read);
  g.bias_offset = r.percent(15) ? r.range(1, 7) : 0;

  d.lda = g.a.ld;
  d.stride_a = g.a.stride;
  d.ldb = g.b.ld;
  d.stride_b = g.b.stride;
  d.ldd = g.d.ld;
  d.stride_d = g.d.stride;
  if (d.beta != 0.0f) {
    d.ldc = g.c.ld;
    d.stride_c = g.c.stride;
  }
  if (g.aux_written || g.aux_read) {
    d.ld_aux = g.aux.ld;
    d.stride_aux = g.aux.stride;
  }

  const int scale_mode = r.below(100);
  if (scale_mode < 10) {
    g.input_scale =
        1.0f / 64;  // f16 results below 6.1e-5 (subnormal): Note [GEMM bound near underflow]
  } else if (scale_mode < 15 && static_cast<double>(d.k) * 16 * 2 < 20000) {
    g.input_scale = 4.0f;
  }
  const int64_t ws_offsets[] = {4, 8, 16, 48, 100, 128, 200};
  g.workspace_offset = r.percent(25) ? r.pick(ws_offsets) : 0;

  if (r.percent(60)) {
    const char* tiles[] = {"128x128_1c", "128x256_2c",     "128x128_2c",
                           "128x256_2c_cl2", "64x256_pp", "192x192_3c"};
    g.sm90_tile = r.pick(tiles);
  }
  const int splits[] = {0, 0, 0, 1, 2, 3, 4, 7};
  g.sm90_splits = r.pick(splits);
  g.sm90_generic_epilogue = r.percent(25);
  const int sm80_splits[] = {0, 0, 0, 2, 3, 5};  // Note [sm80 split-K]; drawn last: the rest is unchanged
  g.sm80_splits = r.pick(sm80_splits);
  g.sm90_stream_k = r.percent(35) ? 1 : -1;  // Note [sm90 stream-K]; drawn last as well
  return g;
}

RandomGemm issue11_gemm(int which) {
  RandomGemm g;
  g.seed = 11;
  g.index = which;
  blublas::GemmDesc& d = g.desc;
  d.ab_type = Dtype::kF16;
  d.cd_type = Dtype::kF16;
  d.op_a = Op::kT;
  d.op_b = Op::kT;
  d.layout = Layout::kRowMajor;
  d.alpha = 0.5f;
  d.beta = 0.0f;
  if (which == 0) {
    d.m = 64;
    d.n = 1536;
    d.k = 1;
    d.batch = 1;
  } else {
    d.m = 4099;
    d.n = 500;
    d.k = 2;
    d.batch = 3;
  }
  auto tight = [&](int64_t rows, int64_t cols) {
    MatrixPlace p;
    p.rows = rows;
    p.cols = cols;
    p.ld = cols;
    p.stride = rows * cols;
    p.elems = p.stride * d.batch;
    return p;
  };
  g.a = tight(d.k, d.m);  // op(A) = T: A stored K x M
  g.b = tight(d.n, d.k);  // op(B) = T: B stored N x K
  g.d = tight(d.m, d.n);
  d.lda = g.a.ld;
  d.stride_a = g.a.stride;
  d.ldb = g.b.ld;
  d.stride_b = g.b.stride;
  d.ldd = g.d.ld;
  d.stride_d = g.d.stride;
  return g;
}

void bind_buffers(RandomGemm* g, void* a, void* b, void* c, void* d, void* aux, void* bias,
                  float* bias_grad) {
  blublas::GemmDesc& desc = g->desc;
  const int64_t es_ab = static_cast<int64_t>(blublas::dtype_size(desc.ab_type));
  const int64_t es_cd = static_cast<int64_t>(blublas::dtype_size(desc.cd_type));
  auto at = [](void* base, int64_t off_bytes) -> void* {
    return base == nullptr ? nullptr : static_cast<char*>(base) + off_bytes;
  };
  desc.a = at(a, g->a.offset * es_ab);
  desc.b = at(b, g->b.offset * es_ab);
  desc.d = at(d, g->d.offset * es_cd);
  desc.c = desc.beta == 0.0f ? nullptr : (g->c_aliases_d ? desc.d : at(c, g->c.offset * es_cd));
  desc.aux = (g->aux_written || g->aux_read) ? at(aux, g->aux.offset * es_cd) : nullptr;
  const bool has_bias = desc.epilogue == Epilogue::kBias || desc.epilogue == Epilogue::kBiasGelu;
  desc.bias = has_bias ? at(bias, g->bias_offset * es_cd) : nullptr;
  const bool grad = desc.epilogue == Epilogue::kBiasGradA || desc.epilogue == Epilogue::kBiasGradB;
  desc.bias_grad = grad ? bias_grad : nullptr;
}

GemmBufferBytes buffer_bytes(const RandomGemm& g) {
  const blublas::GemmDesc& d = g.desc;
  const std::size_t es_ab = blublas::dtype_size(d.ab_type), es_cd = blublas::dtype_size(d.cd_type);
  GemmBufferBytes b;
  b.a = static_cast<std::size_t>(g.a.elems) * es_ab;
  b.b = static_cast<std::size_t>(g.b.elems) * es_ab;
  b.d = static_cast<std::size_t>(g.d.elems) * es_cd;
  if (d.beta != 0.0f && !g.c_aliases_d) b.c = static_cast<std::size_t>(g.c.elems) * es_cd;
  if (g.aux_written || g.aux_read) b.aux = static_cast<std::size_t>(g.aux.elems) * es_cd;
  if (d.epilogue == Epilogue::kBias || d.epilogue == Epilogue::kBiasGelu) {
    b.bias = static_cast<std::size_t>(g.bias_offset + d.n) * es_cd;
  }
  if (d.epilogue == Epilogue::kBiasGradA) b.bias_grad = static_cast<std::size_t>(d.m) * 4;
  if (d.epilogue == Epilogue::kBiasGradB) b.bias_grad = static_cast<std::size_t>(d.n) * 4;
  return b;
}

std::string RandomGemm::describe() const {
  const blublas::GemmDesc& gd = desc;
  std::ostringstream os;
  auto place = [&](const char* name, const MatrixPlace& p) {
    os << " | " << name << ": stored " << p.rows << "x" << p.cols << " ld=" << p.ld
       << " stride=" << p.stride << " offset=" << p.offset;
  };
  os << "seed=" << seed << " case=" << index << " | M=" << gd.m << " N=" << gd.n << " K=" << gd.k
     << " batch=" << gd.batch << " op=" << op_name(gd.op_a) << op_name(gd.op_b) << " "
     << (gd.layout == Layout::kColMajor ? "col-major" : "row-major")
     << " ab=" << blublas::dtype_name(gd.ab_type) << " cd=" << blublas::dtype_name(gd.cd_type)
     << " precision=" << gemm_precision_name(gd.ab_type, gd.compute)
     << " compute=" << blublas::compute_mode_name(gd.compute) << " epilogue=" << blublas::epilogue_name(gd.epilogue)
     << (aux_written ? " (aux written)" : "") << (aux_read ? " (aux read)" : "")
     << " alpha=" << gd.alpha << " beta=" << gd.beta << " input_scale=" << input_scale;
  place("a", a);
  place("b", b);
  if (gd.beta != 0.0f) {
    if (c_aliases_d) {
      os << " | c: aliases d";
    } else {
      place("c", c);
    }
  }
  place("d", d);
  if (aux_written || aux_read) place("aux", aux);
  if (gd.epilogue == Epilogue::kBias || gd.epilogue == Epilogue::kBiasGelu) {
    os << " | bias offset=" << bias_offset;
  }
  os << " | workspace offset=" << workspace_offset
     << " | sm90 variant: tile=" << (sm90_tile.empty() ? "heuristic" : sm90_tile)
     << " splits=" << sm90_splits << " generic_epilogue=" << (sm90_generic_epilogue ? 1 : 0)
     << " stream_k=" << sm90_stream_k
     << " | sm80 splits=" << sm80_splits;
  return os.str();
}

}  // namespace blu::test

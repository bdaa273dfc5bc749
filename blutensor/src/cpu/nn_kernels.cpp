// CPU kernels of the NN ops: softmax / log_softmax, layernorm, embedding, cross-entropy, causal
// fill, dropout, random fills, AdamW. Row-wise kernels parallelise over rows; per-row math is in
// float (double for f64) with fixed order, so results are deterministic.
#include <cmath>
#include <limits>

#include "blutensor/philox.h"
#include "cpu/cpu_loops.h"
#include "cpu/cpu_math.h"
#include "cpu/cpu_ops.h"
#include "cpu/dtype_switch.h"

namespace blu::cpu_ops {

using cpu::compute_t;

namespace {

template <typename T> inline compute_t<T> ld(const T& v) { return static_cast<compute_t<T>>(v); }
template <typename T> inline int64_t rows_of(const Tensor& t) { return t.numel() / std::max<int64_t>(1, t.size(-1)); }

// ---------------------------------------------------------------- softmax
template <typename T>
void softmax_fwd_typed(const Tensor& y, const Tensor& x, bool log) {
  using C = compute_t<T>;
  const int64_t cols = x.size(-1), rows = x.numel() / std::max<int64_t>(cols, 1);
  const T* xp = static_cast<const T*>(x.data_ptr());
  T* yp = static_cast<T*>(y.data_ptr());
  cpu::parallel_for(rows, cols, [&](int64_t r) {
    const T* xr = xp + r * cols;
    T* yr = yp + r * cols;
    thread_local std::vector<C> buf;
    buf.resize(static_cast<std::size_t>(cols));
    C m = -std::numeric_limits<C>::infinity();
    for (int64_t i = 0; i < cols; ++i) m = std::max(m, ld(xr[i]));
    if (m == -std::numeric_limits<C>::infinity()) m = 0;  // fully masked row: keep finite
    for (int64_t i = 0; i < cols; ++i) buf[i] = cpu::exp_any<C>(ld(xr[i]) - m);
    C s = cpu::sum_fixed<C>(buf.data(), cols);
    if (log) {
      C lse = m + std::log(s);
      for (int64_t i = 0; i < cols; ++i) yr[i] = T(ld(xr[i]) - lse);
    } else {
      C inv = C(1) / s;
      for (int64_t i = 0; i < cols; ++i) yr[i] = T(buf[i] * inv);
    }
  });
}

template <typename T>
void softmax_bwd_typed(const Tensor& dx, const Tensor& dy, const Tensor& y, bool log) {
  using C = compute_t<T>;
  const int64_t cols = y.size(-1), rows = y.numel() / std::max<int64_t>(cols, 1);
  const T* dyp = static_cast<const T*>(dy.data_ptr());
  const T* yp = static_cast<const T*>(y.data_ptr());
  T* dxp = static_cast<T*>(dx.data_ptr());
  cpu::parallel_for(rows, cols, [&](int64_t r) {
    const T* g = dyp + r * cols;
    const T* yr = yp + r * cols;
    T* o = dxp + r * cols;
    C dot = 0;
    if (log) {
      for (int64_t i = 0; i < cols; ++i) dot += ld(g[i]);
      for (int64_t i = 0; i < cols; ++i) o[i] = T(ld(g[i]) - cpu::exp_any<C>(ld(yr[i])) * dot);
    } else {
      for (int64_t i = 0; i < cols; ++i) dot += ld(g[i]) * ld(yr[i]);
      for (int64_t i = 0; i < cols; ++i) o[i] = T(ld(yr[i]) * (ld(g[i]) - dot));
    }
  });
}

// ---------------------------------------------------------------- layernorm
template <typename T>
void layer_norm_fwd_typed(const Tensor& y, const Tensor& mean, const Tensor& rstd, const Tensor& x,
                          const Tensor& w, const Tensor& b, double eps) {
  using C = compute_t<T>;
  using S = std::conditional_t<std::is_same_v<T, double>, double, float>;  // stats dtype
  const int64_t cols = x.size(-1), rows = x.numel() / std::max<int64_t>(cols, 1);
  const T* xp = static_cast<const T*>(x.data_ptr());
  const T* wp = w.defined() ? static_cast<const T*>(w.data_ptr()) : nullptr;
  const T* bp = b.defined() ? static_cast<const T*>(b.data_ptr()) : nullptr;
  T* yp = static_cast<T*>(y.data_ptr());
  S* mp = static_cast<S*>(mean.data_ptr());
  S* rp = static_cast<S*>(rstd.data_ptr());
  cpu::parallel_for(rows, cols, [&](int64_t r) {
    const T* xr = xp + r * cols;
    T* yr = yp + r * cols;
    C s = 0;
    for (int64_t i = 0; i < cols; ++i) s += ld(xr[i]);
    C mu = s / static_cast<C>(cols);
    C v = 0;
    for (int64_t i = 0; i < cols; ++i) {
      C d = ld(xr[i]) - mu;
      v += d * d;
    }
    C rs = C(1) / std::sqrt(v / static_cast<C>(cols) + static_cast<C>(eps));
    for (int64_t i = 0; i < cols; ++i) {
      C n = (ld(xr[i]) - mu) * rs;
      if (wp) n *= ld(wp[i]);
      if (bp) n += ld(bp[i]);
      yr[i] = T(n);
    }
    mp[r] = static_cast<S>(mu);
    rp[r] = static_cast<S>(rs);
  });
}

template <typename T>
void layer_norm_bwd_typed(const Tensor& dx, const Tensor& dw, const Tensor& db, const Tensor& dy,
                          const Tensor& x, const Tensor& w, const Tensor& mean, const Tensor& rstd) {
  using C = compute_t<T>;
  using S = std::conditional_t<std::is_same_v<T, double>, double, float>;
  const int64_t cols = x.size(-1), rows = x.numel() / std::max<int64_t>(cols, 1);
  const T* xp = static_cast<const T*>(x.data_ptr());
  const T* gp = static_cast<const T*>(dy.data_ptr());
  const T* wp = w.defined() ? static_cast<const T*>(w.data_ptr()) : nullptr;
  const S* mp = static_cast<const S*>(mean.data_ptr());
  const S* rp = static_cast<const S*>(rstd.data_ptr());
  if (dx.defined()) {
    T* dxp = static_cast<T*>(dx.data_ptr());
    cpu::parallel_for(rows, cols, [&](int64_t r) {
      const T* xr = xp + r * cols;
      const T* gr = gp + r * cols;
      C mu = static_cast<C>(mp[r]), rs = static_cast<C>(rp[r]);
      C sum_g = 0, sum_gx = 0;
      for (int64_t i = 0; i < cols; ++i) {
        C g = ld(gr[i]) * (wp ? ld(wp[i]) : C(1));
        C xh = (ld(xr[i]) - mu) * rs;
        sum_g += g;
        sum_gx += g * xh;
      }
      C inv_n = C(1) / static_cast<C>(cols);
      for (int64_t i = 0; i < cols; ++i) {
        C g = ld(gr[i]) * (wp ? ld(wp[i]) : C(1));
        C xh = (ld(xr[i]) - mu) * rs;
        dxp[r * cols + i] = T(rs * (g - inv_n * sum_g - xh * inv_n * sum_gx));
      }
    });
  }
  if (dw.defined() || db.defined()) {
    // Column sums: parallel over column blocks, rows in order (deterministic).
    std::vector<double> acc_w(static_cast<std::size_t>(cols), 0.0), acc_b(static_cast<std::size_t>(cols), 0.0);
    const int64_t block = 64;
    const int64_t nblocks = (cols + block - 1) / block;
    cpu::parallel_for(nblocks, rows * block, [&](int64_t bi) {
      int64_t c0 = bi * block, c1 = std::min(cols, c0 + block);
      for (int64_t r = 0; r < rows; ++r) {
        C mu = static_cast<C>(mp[r]), rs = static_cast<C>(rp[r]);
        for (int64_t i = c0; i < c1; ++i) {
          C g = ld(gp[r * cols + i]);
          acc_w[i] += static_cast<double>(g * (ld(xp[r * cols + i]) - mu) * rs);
          acc_b[i] += static_cast<double>(g);
        }
      }
    });
    if (dw.defined()) {
      T* o = static_cast<T*>(dw.data_ptr());
      for (int64_t i = 0; i < cols; ++i) o[i] = T(static_cast<C>(acc_w[i]));
    }
    if (db.defined()) {
      T* o = static_cast<T*>(db.data_ptr());
      for (int64_t i = 0; i < cols; ++i) o[i] = T(static_cast<C>(acc_b[i]));
    }
  }
}

// ---------------------------------------------------------------- embedding
template <typename T, typename I>
void embedding_fwd_typed(const Tensor& out, const Tensor& weight, const Tensor& idx) {
  const int64_t cols = weight.size(-1), n = idx.numel();
  const T* wp = static_cast<const T*>(weight.data_ptr());
  const I* ip = static_cast<const I*>(idx.data_ptr());
  T* op = static_cast<T*>(out.data_ptr());
  cpu::parallel_for(n, cols, [&](int64_t r) {
    std::memcpy(op + r * cols, wp + static_cast<int64_t>(ip[r]) * cols, sizeof(T) * static_cast<std::size_t>(cols));
  });
}

template <typename T, typename I>
void embedding_bwd_typed(const Tensor& dw, const Tensor& dout, const Tensor& idx) {
  using C = compute_t<T>;
  const int64_t cols = dw.size(-1), n = idx.numel(), vocab = dw.size(0);
  const T* gp = static_cast<const T*>(dout.data_ptr());
  const I* ip = static_cast<const I*>(idx.data_ptr());
  T* op = static_cast<T*>(dw.data_ptr());
  std::memset(static_cast<void*>(op), 0, sizeof(T) * static_cast<std::size_t>(vocab * cols));
  // Parallel over column blocks; each block visits the indices in order (deterministic).
  const int64_t block = 32;
  const int64_t nblocks = (cols + block - 1) / block;
  cpu::parallel_for(nblocks, n * block, [&](int64_t bi) {
    int64_t c0 = bi * block, c1 = std::min(cols, c0 + block);
    for (int64_t r = 0; r < n; ++r) {
      T* row = op + static_cast<int64_t>(ip[r]) * cols;
      const T* g = gp + r * cols;
      for (int64_t i = c0; i < c1; ++i) row[i] = T(ld(row[i]) + ld(g[i]));
    }
  });
  (void)sizeof(C);
}

// ---------------------------------------------------------------- cross-entropy
template <typename T, typename I>
void xent_fwd_typed(const Tensor& losses, const Tensor& lse, const Tensor& valid, const Tensor& logits,
                    const Tensor& targets, int64_t ignore_index) {
  using C = compute_t<T>;
  using S = std::conditional_t<std::is_same_v<T, double>, double, float>;
  const int64_t v = logits.size(-1), n = targets.numel();
  const T* xp = static_cast<const T*>(logits.data_ptr());
  const I* tp = static_cast<const I*>(targets.data_ptr());
  S* lp = static_cast<S*>(losses.data_ptr());
  S* ep = static_cast<S*>(lse.data_ptr());
  S* vp = static_cast<S*>(valid.data_ptr());
  for (int64_t r = 0; r < n; ++r) {
    int64_t t = static_cast<int64_t>(tp[r]);
    BLU_CHECK(t == ignore_index || (t >= 0 && t < v), "cross_entropy: target ", t, " at position ", r,
              " is out of range [0, ", v, ") (ignore_index ", ignore_index, ")");
  }
  cpu::parallel_for(n, v, [&](int64_t r) {
    const T* xr = xp + r * v;
    thread_local std::vector<C> buf;
    buf.resize(static_cast<std::size_t>(v));
    C l;
    if constexpr (std::is_same_v<T, float>) {
      l = cpu::row_logsumexp_f32(xr, v, buf.data());
    } else {
      C m = -std::numeric_limits<C>::infinity();
      for (int64_t i = 0; i < v; ++i) m = std::max(m, ld(xr[i]));
      for (int64_t i = 0; i < v; ++i) buf[i] = cpu::exp_any<C>(ld(xr[i]) - m);
      l = m + std::log(cpu::sum_fixed<C>(buf.data(), v));
    }
    ep[r] = static_cast<S>(l);
    int64_t t = static_cast<int64_t>(tp[r]);
    if (t == ignore_index) {
      lp[r] = 0;
      vp[r] = 0;
    } else {
      lp[r] = static_cast<S>(l - ld(xr[t]));
      vp[r] = 1;
    }
  });
}

template <typename T, typename I>
void xent_bwd_typed(const Tensor& dlogits, const Tensor& dlosses, const Tensor& logits, const Tensor& lse,
                    const Tensor& targets, int64_t ignore_index) {
  using C = compute_t<T>;
  using S = std::conditional_t<std::is_same_v<T, double>, double, float>;
  const int64_t v = logits.size(-1), n = targets.numel();
  const T* xp = static_cast<const T*>(logits.data_ptr());
  const I* tp = static_cast<const I*>(targets.data_ptr());
  const S* gp = dlosses.defined() ? static_cast<const S*>(dlosses.data_ptr()) : nullptr;  // none: 1
  const S* ep = static_cast<const S*>(lse.data_ptr());
  T* op = static_cast<T*>(dlogits.data_ptr());
  cpu::parallel_for(n, v, [&](int64_t r) {
    T* o = op + r * v;
    int64_t t = static_cast<int64_t>(tp[r]);
    if (t == ignore_index) {
      for (int64_t i = 0; i < v; ++i) o[i] = T(C(0));
      return;
    }
    const T* xr = xp + r * v;
    C g = gp ? static_cast<C>(gp[r]) : C(1), l = static_cast<C>(ep[r]);
    if constexpr (std::is_same_v<T, float>) {
      cpu::row_scaled_softmax_f32(o, xr, v, l, g);
    } else {
      for (int64_t i = 0; i < v; ++i) o[i] = T(g * cpu::exp_any<C>(ld(xr[i]) - l));
    }
    o[t] = T(ld(o[t]) - g);
  });
}

// ---------------------------------------------------------------- masks, dropout, random
template <typename T>
void causal_fill_typed(const Tensor& out, const Tensor& x, double value) {
  const int64_t cols = x.size(-1), rows = x.size(-2);
  const int64_t mats = x.numel() / std::max<int64_t>(1, rows * cols);
  const T* xp = static_cast<const T*>(x.data_ptr());
  T* op = static_cast<T*>(out.data_ptr());
  const T fillv = T(static_cast<compute_t<T>>(value));
  cpu::parallel_for(mats * rows, cols, [&](int64_t mr) {
    int64_t r = mr % rows;
    const T* xr = xp + mr * cols;
    T* o = op + mr * cols;
    int64_t limit = r + cols - rows;  // last unmasked column
    for (int64_t c = 0; c < cols; ++c) o[c] = c > limit ? fillv : xr[c];
  });
}

template <typename T>
void dropout_typed(const Tensor& out, const Tensor& x, double p, uint64_t seed, uint64_t offset) {
  using C = compute_t<T>;
  const int64_t n = x.numel();
  const T* xp = static_cast<const T*>(x.data_ptr());
  T* op = static_cast<T*>(out.data_ptr());
  const C scale = static_cast<C>(1.0 / (1.0 - p));
  const float pf = static_cast<float>(p);
  cpu::parallel_for((n + 4095) / 4096, 4096, [&](int64_t blk) {
    int64_t i0 = blk * 4096, i1 = std::min(n, i0 + 4096);
    for (int64_t i = i0; i < i1; ++i) {
      bool keep = philox::dropout_keep(seed, offset, static_cast<uint64_t>(i), pf);
      op[i] = T(keep ? ld(xp[i]) * scale : C(0));
    }
  });
}

template <typename T>
void random_typed(const Tensor& out, uint64_t seed, uint64_t offset, double a, double b, bool normal) {
  using C = compute_t<T>;
  const int64_t n = out.numel();
  T* op = static_cast<T*>(out.data_ptr());
  cpu::parallel_for((n + 4095) / 4096, 4096, [&](int64_t blk) {
    int64_t i0 = blk * 4096, i1 = std::min(n, i0 + 4096);
    for (int64_t i = i0; i < i1; ++i) {
      if (normal) {
        float z = philox::normal_at(seed, offset, static_cast<uint64_t>(i));
        op[i] = T(static_cast<C>(a + b * static_cast<double>(z)));
      } else {
        float u = philox::uniform_at(seed, offset, static_cast<uint64_t>(i));
        op[i] = T(static_cast<C>(a + (b - a) * static_cast<double>(u)));
      }
    }
  });
}

template <typename T>
void adamw_one(const Tensor& p, const Tensor& g, const Tensor& m, const Tensor& v, const float* grad_scale,
               const AdamWParams& hp) {
  using C = compute_t<T>;
  const int64_t n = p.numel();
  T* pp = static_cast<T*>(p.data_ptr());
  const T* gp = static_cast<const T*>(g.data_ptr());
  T* mp = static_cast<T*>(m.data_ptr());
  T* vp = static_cast<T*>(v.data_ptr());
  const C lr = static_cast<C>(hp.lr), b1 = static_cast<C>(hp.beta1), b2 = static_cast<C>(hp.beta2);
  const C eps = static_cast<C>(hp.eps), decay = static_cast<C>(1.0 - hp.lr * hp.weight_decay);
  const C bc1 = static_cast<C>(1.0 - std::pow(hp.beta1, static_cast<double>(hp.step)));
  const C bc2 = static_cast<C>(1.0 - std::pow(hp.beta2, static_cast<double>(hp.step)));
  const C step_size = lr / bc1;
  const C inv_sqrt_bc2 = C(1) / std::sqrt(bc2);
  // grad_scale: the gradient as scale_tensors_ would have left it (the product rounded to T).
  const C gs = grad_scale != nullptr ? static_cast<C>(*grad_scale) : C(1);
  if (!std::isfinite(gs)) return;  // a non-finite grad_scale skips the update (optim.h)
  cpu::parallel_for((n + 4095) / 4096, 4096, [&](int64_t blk) {
    int64_t i0 = blk * 4096, i1 = std::min(n, i0 + 4096);
    for (int64_t i = i0; i < i1; ++i) {
      C gi = grad_scale != nullptr ? ld(T(ld(gp[i]) * gs)) : ld(gp[i]);
      C mi = b1 * ld(mp[i]) + (C(1) - b1) * gi;
      C vi = b2 * ld(vp[i]) + (C(1) - b2) * gi * gi;
      C pi = ld(pp[i]) * decay;
      pi -= step_size * mi / (std::sqrt(vi) * inv_sqrt_bc2 + eps);
      mp[i] = T(mi);
      vp[i] = T(vi);
      pp[i] = T(pi);
    }
  });
}

}  // namespace

void softmax_forward(const Tensor& y, const Tensor& x, bool log) {
  BLU_SWITCH_FLOAT_DTYPES(x.dtype(), T, "softmax", softmax_fwd_typed<T>(y, x, log));
}
void softmax_backward(const Tensor& dx, const Tensor& dy, const Tensor& y, bool log) {
  BLU_SWITCH_FLOAT_DTYPES(y.dtype(), T, "softmax_backward", softmax_bwd_typed<T>(dx, dy, y, log));
}
void layer_norm_forward(const Tensor& y, const Tensor& mean, const Tensor& rstd, const Tensor& x,
                        const Tensor& weight, const Tensor& bias, double eps) {
  BLU_SWITCH_FLOAT_DTYPES(x.dtype(), T, "layer_norm", layer_norm_fwd_typed<T>(y, mean, rstd, x, weight, bias, eps));
}
void layer_norm_backward(const Tensor& dx, const Tensor& dweight, const Tensor& dbias, const Tensor& dy,
                         const Tensor& x, const Tensor& weight, const Tensor& mean, const Tensor& rstd) {
  BLU_SWITCH_FLOAT_DTYPES(x.dtype(), T, "layer_norm_backward",
                          layer_norm_bwd_typed<T>(dx, dweight, dbias, dy, x, weight, mean, rstd));
}
void embedding_forward(const Tensor& out, const Tensor& weight, const Tensor& indices) {
  BLU_SWITCH_ALL_DTYPES(weight.dtype(), T, "embedding",
                        BLU_SWITCH_INDEX_DTYPES(indices.dtype(), I, "embedding",
                                                (embedding_fwd_typed<T, I>(out, weight, indices))));
}
void embedding_backward(const Tensor& dweight, const Tensor& dout, const Tensor& indices) {
  BLU_SWITCH_FLOAT_DTYPES(dweight.dtype(), T, "embedding_backward",
                          BLU_SWITCH_INDEX_DTYPES(indices.dtype(), I, "embedding_backward",
                                                  (embedding_bwd_typed<T, I>(dweight, dout, indices))));
}
void cross_entropy_forward(const Tensor& losses, const Tensor& lse, const Tensor& valid, const Tensor& logits,
                           const Tensor& targets, int64_t ignore_index) {
  BLU_SWITCH_FLOAT_DTYPES(logits.dtype(), T, "cross_entropy",
                          BLU_SWITCH_INDEX_DTYPES(targets.dtype(), I, "cross_entropy",
                                                  (xent_fwd_typed<T, I>(losses, lse, valid, logits, targets,
                                                                        ignore_index))));
}
void cross_entropy_backward(const Tensor& dlogits, const Tensor& dlosses, const Tensor& logits, const Tensor& lse,
                            const Tensor& targets, int64_t ignore_index) {
  BLU_SWITCH_FLOAT_DTYPES(logits.dtype(), T, "cross_entropy_backward",
                          BLU_SWITCH_INDEX_DTYPES(targets.dtype(), I, "cross_entropy_backward",
                                                  (xent_bwd_typed<T, I>(dlogits, dlosses, logits, lse, targets,
                                                                        ignore_index))));
}
void cross_entropy_forward_backward(const Tensor& losses, const Tensor& lse, const Tensor& valid, const Tensor& dlogits,
                                    const Tensor& logits, const Tensor& targets, int64_t ignore_index) {
  cross_entropy_forward(losses, lse, valid, logits, targets, ignore_index);
  cross_entropy_backward(dlogits, Tensor(), logits, lse, targets, ignore_index);
}
void causal_fill(const Tensor& out, const Tensor& x, double value) {
  BLU_SWITCH_FLOAT_DTYPES(x.dtype(), T, "causal_fill", causal_fill_typed<T>(out, x, value));
}
void dropout(const Tensor& out, const Tensor& x, double p, uint64_t seed, uint64_t offset) {
  BLU_SWITCH_FLOAT_DTYPES(x.dtype(), T, "dropout", dropout_typed<T>(out, x, p, seed, offset));
}
void random_uniform(const Tensor& out, uint64_t seed, uint64_t offset, double low, double high) {
  BLU_SWITCH_FLOAT_DTYPES(out.dtype(), T, "uniform_", random_typed<T>(out, seed, offset, low, high, false));
}
void random_normal(const Tensor& out, uint64_t seed, uint64_t offset, double mean, double stddev) {
  BLU_SWITCH_FLOAT_DTYPES(out.dtype(), T, "normal_", random_typed<T>(out, seed, offset, mean, stddev, true));
}
void adamw_step(const std::vector<Tensor>& params, const std::vector<Tensor>& grads,
                const std::vector<Tensor>& exp_avgs, const std::vector<Tensor>& exp_avg_sqs,
                const Tensor& grad_scale, const AdamWParams& hp) {
  const float* gs = grad_scale.defined() ? static_cast<const float*>(grad_scale.data_ptr()) : nullptr;
  for (std::size_t i = 0; i < params.size(); ++i) {
    BLU_SWITCH_FLOAT_DTYPES(params[i].dtype(), T, "adamw_step",
                            adamw_one<T>(params[i], grads[i], exp_avgs[i], exp_avg_sqs[i], gs, hp));
  }
}

}  // namespace blu::cpu_ops

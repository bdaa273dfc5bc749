// Tensor- and context-parallel checks (support/parallel_checks.h).
#include "support/parallel_checks.h"

#include <cmath>
#include <sstream>
#include <vector>

#include "bludist/context_parallel.h"
#include "bludist/tensor_parallel.h"
#include "blutensor/autograd.h"
#include "blutensor/ops.h"
#include "blutensor/random.h"

namespace bludist::test {
namespace {

// "" when got and want agree elementwise within tol, else the first difference.
std::string mismatch(const Tensor& got, const Tensor& want, double tol, const std::string& what) {
  if (!got.defined() || got.sizes() != want.sizes()) {
    return what + ": got " + (got.defined() ? got.describe() : std::string("undefined")) + ", want " +
           want.describe();
  }
  const std::vector<double> a = got.contiguous().to_double_vector(), b = want.contiguous().to_double_vector();
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (!(std::abs(a[i] - b[i]) <= tol)) {
      std::ostringstream os;
      os << what << ": element " << i << ": got " << a[i] << " vs want " << b[i];
      return os.str();
    }
  }
  return "";
}

// The first non-empty message.
std::string first(std::initializer_list<std::string> results) {
  for (const std::string& r : results)
    if (!r.empty()) return r;
  return "";
}

// Same values on every rank (fixed seed, drawn on the CPU), then on `device`.
struct Draw {
  blu::Generator gen;
  blu::Device device;
  Tensor leaf(blu::Shape s, double sd) {
    return blu::empty(s, blu::kFloat64).normal_(0, sd, &gen).to(device).requires_grad_();
  }
  Tensor value(blu::Shape s, double sd) { return blu::empty(s, blu::kFloat64).normal_(0, sd, &gen).to(device); }
};

constexpr double kTol = 1e-10;

}  // namespace

std::string check_tp_mlp(ProcessGroup& pg, blu::Device device) {
  Draw d{blu::Generator(5), device};
  Tensor x = d.leaf({5, 6}, 0.5), w1 = d.leaf({12, 6}, 0.5), b1 = d.leaf({12}, 0.5), w2 = d.leaf({4, 12}, 0.5),
         b2 = d.leaf({4}, 0.5);
  Tensor c = d.value({5, 4}, 1);
  Tensor y = blu::linear(blu::gelu(blu::linear(x, w1, b1)), w2, b2);
  blu::sum(y * c).backward();

  auto pgp = pg.shared_from_this();
  ColumnParallelLinear col(w1, b1, pgp);
  RowParallelLinear row(w2, b2, pgp);
  Tensor xt = x.detach().clone().requires_grad_();
  Tensor yt = row.forward(blu::gelu(col.forward(xt)));
  blu::sum(yt * c).backward();

  const int64_t h = 12 / pg.size(), lo = pg.rank() * h;
  return first({mismatch(yt.detach(), y.detach(), kTol, "output"),
                mismatch(xt.grad(), x.grad(), kTol, "input gradient"),
                mismatch(col.weight().grad(), w1.grad().narrow(0, lo, h), kTol, "column weight shard gradient"),
                mismatch(col.bias().grad(), b1.grad().narrow(0, lo, h), kTol, "column bias shard gradient"),
                mismatch(row.weight().grad(), w2.grad().narrow(1, lo, h), kTol, "row weight shard gradient"),
                mismatch(row.bias().grad(), b2.grad(), kTol, "row bias gradient")});
}

std::string check_tp_mlp_overlapped(ProcessGroup& pg, blu::Device device) {
  Draw d{blu::Generator(7), device};
  Tensor x = d.leaf({2, 5, 6}, 0.5), w1 = d.leaf({12, 6}, 0.5), b1 = d.leaf({12}, 0.5), w2 = d.leaf({4, 12}, 0.5),
         b2 = d.leaf({4}, 0.5);
  Tensor c = d.value({2, 5, 4}, 1);
  Tensor y = blu::linear(blu::gelu(blu::linear(x, w1, b1)), w2, b2);
  blu::sum(y * c).backward();
  auto pgp = pg.shared_from_this();
  const int64_t h = 12 / pg.size(), lo = pg.rank() * h;
  for (int chunks : {1, 3, 4, 16}) {
    Tensor w1r = shard_rows(w1, pg), b1r = shard_rows(b1, pg), w2c = shard_cols(w2, pg);
    Tensor xt = x.detach().clone().requires_grad_();
    Tensor yt = tp_row_linear_overlapped(blu::gelu(tp_column_linear_overlapped(xt, w1r, b1r, pgp, chunks)), w2c,
                                         pgp, chunks) + b2.detach();
    blu::sum(yt * c).backward();
    const std::string what = " (" + std::to_string(chunks) + " chunks)";
    const std::string bad = first({mismatch(yt.detach(), y.detach(), kTol, "output" + what),
                                   mismatch(xt.grad(), x.grad(), kTol, "input gradient" + what),
                                   mismatch(w1r.grad(), w1.grad().narrow(0, lo, h), kTol, "column weight shard gradient" + what),
                                   mismatch(b1r.grad(), b1.grad().narrow(0, lo, h), kTol, "column bias shard gradient" + what),
                                   mismatch(w2c.grad(), w2.grad().narrow(1, lo, h), kTol, "row weight shard gradient" + what)});
    if (!bad.empty()) return bad;
  }
  return "";
}

std::string check_vocab_parallel(ProcessGroup& pg, blu::Device device) {
  auto pgp = pg.shared_from_this();
  Draw d{blu::Generator(9), device};
  Tensor wte = d.leaf({12, 5}, 1), logits = d.leaf({7, 12}, 2);
  Tensor c = d.value({2, 4, 5}, 1);
  const std::vector<int64_t> ids_v = {0, 11, 5, 6, 3, 3, 8, 10}, tgt_v = {1, 11, 4, 7, 0, 9, 6};
  Tensor ids = blu::from_vector(ids_v, {2, 4}).to(device), targets = blu::from_vector(tgt_v, {7}).to(device);
  blu::sum(blu::embedding(wte, ids) * c).backward();
  Tensor loss = blu::cross_entropy(logits, targets);
  loss.backward();

  const int64_t v = 12 / pg.size(), lo = pg.rank() * v;
  Tensor wte_r = shard_rows(wte, pg), logits_r = shard_cols(logits, pg);
  Tensor emb = vocab_parallel_embedding(wte_r, ids, pgp);
  blu::sum(emb * c).backward();
  Tensor loss_r = vocab_parallel_cross_entropy(logits_r, targets, pgp);
  loss_r.backward();
  return first({mismatch(emb.detach(), blu::embedding(wte.detach(), ids), kTol, "embedding"),
                mismatch(wte_r.grad(), wte.grad().narrow(0, lo, v), kTol, "embedding shard gradient"),
                mismatch(loss_r.detach(), loss.detach(), kTol, "cross-entropy"),
                mismatch(logits_r.grad(), logits.grad().narrow(1, lo, v), kTol, "logits shard gradient")});
}

std::string check_tp_attention_block(ProcessGroup& pg, blu::Device device) {
  auto pgp = pg.shared_from_this();
  constexpr int64_t B = 2, T = 5, C = 12, H = 6, D = C / H;
  Draw d{blu::Generator(21), device};
  Tensor x = d.leaf({B, T, C}, 1), ln_w = d.leaf({C}, 1), ln_b = d.leaf({C}, 0.1), wqkv = d.leaf({3 * C, C}, 0.3),
         bqkv = d.leaf({3 * C}, 0.1), wproj = d.leaf({C, C}, 0.3), bproj = d.leaf({C}, 0.1);
  Tensor c = d.value({B, T, C}, 1);
  auto attend = [&](const Tensor& qkv, int64_t heads) {
    const int64_t width = heads * D;
    std::vector<Tensor> p = qkv.split(width, -1);
    auto split_heads = [&](const Tensor& t) { return t.reshape({B, T, heads, D}).transpose(1, 2); };
    Tensor y = blu::scaled_dot_product_attention(split_heads(p[0]), split_heads(p[1]), split_heads(p[2]), true);
    return y.transpose(1, 2).reshape({B, T, width});
  };
  Tensor h = blu::layer_norm(x, ln_w, ln_b);
  Tensor y = x + blu::linear(attend(blu::linear(h, wqkv, bqkv), H), wproj, bproj);
  blu::sum(y * c).backward();

  Tensor xt = x.detach().clone().requires_grad_();
  Tensor wqkv_r = shard_fused_qkv(wqkv, H, pg), bqkv_r = shard_fused_qkv(bqkv, H, pg);
  RowParallelLinear proj(wproj, bproj, pgp);
  Tensor ht = tp_copy_to_region(blu::layer_norm(xt, ln_w.detach(), ln_b.detach()), pgp);
  Tensor yt = xt + proj.forward(attend(blu::linear(ht, wqkv_r, bqkv_r), H / pg.size()));
  blu::sum(yt * c).backward();

  const int64_t rows = C / pg.size(), lo = pg.rank() * rows;
  auto qkv_rows = [&](const Tensor& g) {
    return blu::cat({g.narrow(0, lo, rows), g.narrow(0, C + lo, rows), g.narrow(0, 2 * C + lo, rows)}, 0);
  };
  return first({mismatch(yt.detach(), y.detach(), kTol, "block output"),
                mismatch(xt.grad(), x.grad(), kTol, "input gradient"),
                mismatch(wqkv_r.grad(), qkv_rows(wqkv.grad()), kTol, "qkv weight shard gradient"),
                mismatch(bqkv_r.grad(), qkv_rows(bqkv.grad()), kTol, "qkv bias shard gradient"),
                mismatch(proj.weight().grad(), wproj.grad().narrow(1, lo, rows), kTol,
                         "projection weight shard gradient"),
                mismatch(proj.bias().grad(), bproj.grad(), kTol, "projection bias gradient")});
}

std::string check_ring_attention(ProcessGroup& pg, blu::Device device, bool causal, bool balanced) {
  constexpr int64_t B = 2, H = 2, Tl = 4, D = 3;
  const int n = pg.size(), r = pg.rank();
  const int64_t T = Tl * n;
  Draw d{blu::Generator(33), device};
  Tensor q = d.leaf({B, H, T, D}, 1), k = d.leaf({B, H, T, D}, 1), v = d.leaf({B, H, T, D}, 1);
  Tensor c = d.value({B, H, T, D}, 1);
  Tensor y = blu::scaled_dot_product_attention(q, k, v, causal);
  blu::sum(y * c).backward();

  // This rank's positions: chunk r of size Tl, or (balanced) chunks r and 2n-1-r of size Tl/2.
  auto mine = [&](const Tensor& t) {
    if (!balanced) return t.narrow(2, r * Tl, Tl);
    return blu::cat({t.narrow(2, r * (Tl / 2), Tl / 2), t.narrow(2, (2 * n - 1 - r) * (Tl / 2), Tl / 2)}, 2);
  };
  auto leaf_of = [&](const Tensor& t) { return mine(t.detach()).contiguous().clone().requires_grad_(); };
  Tensor qr = leaf_of(q), kr = leaf_of(k), vr = leaf_of(v);
  Tensor yr = ring_attention(qr, kr, vr, causal, pg.shared_from_this(), balanced);
  blu::sum(yr * mine(c)).backward();
  const std::string tag =
      ", " + std::to_string(n) + " ranks" + (causal ? ", causal" : "") + (balanced ? ", balanced" : "");
  return first({mismatch(yr.detach(), mine(y.detach()), kTol, "output chunk" + tag),
                mismatch(qr.grad(), mine(q.grad()), kTol, "q gradient chunk" + tag),
                mismatch(kr.grad(), mine(k.grad()), kTol, "k gradient chunk" + tag),
                mismatch(vr.grad(), mine(v.grad()), kTol, "v gradient chunk" + tag)});
}

}  // namespace bludist::test

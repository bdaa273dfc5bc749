// Ring attention (Note [Ring attention] in bludist/context_parallel.h).
#include "bludist/context_parallel.h"

#include <cmath>
#include <vector>

#include "blutensor/autograd.h"
#include "blutensor/error.h"
#include "blutensor/ops.h"

namespace bludist {
namespace {

// out = x of rank (rank - dir) mod n, sent to rank (rank + dir) mod n. Even ranks send first, odd
// ranks receive first, so blocking point-to-point calls never wait on each other in a cycle.
Tensor shift(const Tensor& x, int dir, ProcessGroup& pg) {
  const int n = pg.size(), r = pg.rank();
  Tensor in = x.contiguous();
  if (n == 1) return in.clone();
  Tensor out = blu::empty(in.sizes(), blu::TensorOptions(in.dtype()).device(in.device()));
  const int to = (r + dir + n) % n, from = (r - dir + n) % n;
  if (r % 2 == 0) {
    pg.send(in, to);
    pg.recv(out, from);
  } else {
    pg.recv(out, from);
    pg.send(in, to);
  }
  return out;
}

}  // namespace

Tensor ring_shift(const Tensor& x, const std::shared_ptr<ProcessGroup>& pg) {
  BLU_CHECK(pg, "ring_shift: null process group");
  Tensor y;
  {
    blu::NoGradGuard no_grad;
    y = shift(x.detach(), +1, *pg);
  }
  return blu::autograd::record("ring_shift", y, {x}, {}, [pg](const Tensor& gy, const blu::BackwardContext&) {
    blu::NoGradGuard no_grad;
    return std::vector<Tensor>{shift(gy, -1, *pg)};
  });
}

namespace {
constexpr double kMasked = -1e30;  // finite: a fully masked row stays NaN-free

struct Partial {  // one query block's running output and row log-sum-exp
  Tensor out, lse;
};

enum class Mask { kNone, kDiagonal, kAll };

// Attention of q over one K/V block (kDiagonal: the causal mask of a block facing itself; kAll:
// every key masked, a zero contribution that keeps the block in the graph), merged into `acc`
// with log-sum-exp weights (Note [Ring attention]).
void attend_block(const Tensor& q, const Tensor& k, const Tensor& v, Mask mask, double scale, Partial& acc) {
  Tensor scores = blu::mul(blu::matmul(q, k.transpose(2, 3)), scale);
  if (mask == Mask::kDiagonal) scores = blu::masked_fill_causal(scores, kMasked);
  if (mask == Mask::kAll) scores = blu::mul(scores, 0.0) + kMasked;
  Tensor m;
  {
    blu::NoGradGuard no_grad;
    m = blu::amax(scores.detach(), {-1}, true);
  }
  Tensor lse = blu::log(blu::sum(blu::exp(scores - m), {-1}, true)) + m;  // [B, H, rows, 1]
  Tensor out = blu::matmul(blu::exp(scores - lse), v);
  if (!acc.out.defined()) {
    acc = {out, lse};
    return;
  }
  Tensor mx;
  {
    blu::NoGradGuard no_grad;
    mx = blu::amax(blu::cat({acc.lse.detach(), lse.detach()}, -1), {-1}, true);
  }
  Tensor merged = blu::log(blu::exp(acc.lse - mx) + blu::exp(lse - mx)) + mx;
  acc.out = acc.out * blu::exp(acc.lse - merged) + out * blu::exp(lse - merged);
  acc.lse = merged;
}
}  // namespace

Tensor ring_attention(const Tensor& q, const Tensor& k, const Tensor& v, bool causal,
                      const std::shared_ptr<ProcessGroup>& pg, bool balanced) {
  BLU_CHECK(pg && q.dim() == 4 && k.sizes() == q.sizes() && v.sizes() == q.sizes(),
            "ring_attention: expected q, k, v of one shape [B, H, T/size, D], got ", q.describe(), ", ",
            k.describe(), ", ", v.describe());
  const int64_t tl = q.sizes()[2], d = q.sizes()[3];
  BLU_CHECK(!balanced || tl % 2 == 0, "ring_attention: balanced chunks need an even local length, got ",
            q.describe());
  const int n = pg->size(), r = pg->rank();
  const double scale = 1.0 / std::sqrt(static_cast<double>(d));
  // K and V travel as one tensor: one message a step, and one chain of ring_shifts whose backward
  // order is the same on every rank whatever blocks a rank skips.
  Tensor kv = blu::cat({k, v}, 3);
  auto key = [&](const Tensor& t, int64_t start, int64_t len) { return t.narrow(3, 0, d).narrow(2, start, len); };
  auto val = [&](const Tensor& t, int64_t start, int64_t len) { return t.narrow(3, d, d).narrow(2, start, len); };
  if (!balanced) {
    Partial acc;
    for (int s = 0; s < n; ++s) {
      const int src = (r - s + n) % n;  // whose positions kv holds now
      // Every rank must reach every ring_shift in backward, so blocks above the diagonal are still
      // computed, fully masked (rank 0 would otherwise never use the shifted blocks).
      const Mask mask = !causal ? Mask::kNone : src == r ? Mask::kDiagonal : src > r ? Mask::kAll : Mask::kNone;
      attend_block(q, key(kv, 0, tl), val(kv, 0, tl), mask, scale, acc);
      if (s + 1 < n) kv = ring_shift(kv, pg);
    }
    return acc.out;
  }
  // Balanced (Note [Ring attention]): halves a = chunk r and b = chunk 2n-1-r of 2n chunks.
  const int64_t h = tl / 2;
  const Tensor qa = q.narrow(2, 0, h), qb = q.narrow(2, h, h);
  Partial pa, pb;
  for (int s = 0; s < n; ++s) {
    const int src = (r - s + n) % n;  // kv holds chunks c = src and e = 2n-1-src
    const Tensor kc = key(kv, 0, h), vc = val(kv, 0, h), ke = key(kv, h, h), ve = val(kv, h, h);
    const Mask diag = src == r ? Mask::kDiagonal : Mask::kNone;
    if (!causal) {
      attend_block(qa, kc, vc, Mask::kNone, scale, pa);
      attend_block(qa, ke, ve, Mask::kNone, scale, pa);
      attend_block(qb, kc, vc, Mask::kNone, scale, pb);
      attend_block(qb, ke, ve, Mask::kNone, scale, pb);
    } else {
      // (qb, kc) is computed at every step on every rank, so every ring_shift is reached in backward.
      if (src <= r) attend_block(qa, kc, vc, diag, scale, pa);  // chunk e > r: above a, skipped
      attend_block(qb, kc, vc, Mask::kNone, scale, pb);          // chunk c < n <= b
      if (src >= r) attend_block(qb, ke, ve, diag, scale, pb);   // e <= b iff src >= r
    }
    if (s + 1 < n) kv = ring_shift(kv, pg);
  }
  return blu::cat({pa.out, pb.out}, 2);
}

}  // namespace bludist

// Ring attention (Note [Ring attention] in bludist/context_parallel.h).
#include "bludist/context_parallel.h"

#include <cmath>

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
  Tensor out = blu::empty(in.sizes(), blu::TensorOptions(in.dtype()).device(in.device()));
  if (n == 1) return in.clone();
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

Tensor ring_attention(const Tensor& q, const Tensor& k, const Tensor& v, bool causal,
                      const std::shared_ptr<ProcessGroup>& pg) {
  BLU_CHECK(pg && q.dim() == 4 && k.sizes() == q.sizes() && v.sizes() == q.sizes(),
            "ring_attention: expected q, k, v of one shape [B, H, T/size, D], got ", q.describe(), ", ",
            k.describe(), ", ", v.describe());
  const int n = pg->size(), r = pg->rank();
  const double scale = 1.0 / std::sqrt(static_cast<double>(q.sizes()[3]));
  constexpr double kMasked = -1e30;  // finite: a fully masked block stays NaN-free and weighs 0
  Tensor out, lse, kk = k, vv = v;
  for (int s = 0; s < n; ++s) {
    const int src = (r - s + n) % n;  // whose positions kk / vv hold now
    Tensor scores = blu::mul(blu::matmul(q, kk.transpose(2, 3)), scale);
    if (causal && src == r) scores = blu::masked_fill_causal(scores, kMasked);
    if (causal && src > r) scores = blu::mul(scores, 0.0) + kMasked;  // all above the diagonal
    Tensor m;
    {
      blu::NoGradGuard no_grad;
      m = blu::amax(scores.detach(), {-1}, true);
    }
    Tensor block_lse = blu::log(blu::sum(blu::exp(scores - m), {-1}, true)) + m;  // [B, H, Tl, 1]
    Tensor block_out = blu::matmul(blu::exp(scores - block_lse), vv);
    if (s == 0) {
      out = block_out;
      lse = block_lse;
    } else {
      Tensor mx;
      {
        blu::NoGradGuard no_grad;
        mx = blu::amax(blu::cat({lse.detach(), block_lse.detach()}, -1), {-1}, true);
      }
      Tensor merged = blu::log(blu::exp(lse - mx) + blu::exp(block_lse - mx)) + mx;
      out = out * blu::exp(lse - merged) + block_out * blu::exp(block_lse - merged);
      lse = merged;
    }
    if (s + 1 < n) {
      kk = ring_shift(kk, pg);
      vv = ring_shift(vv, pg);
    }
  }
  return out;
}

}  // namespace bludist

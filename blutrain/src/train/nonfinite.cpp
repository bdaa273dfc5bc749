// nonfinite.cpp: the --nonfinite policy's streak counting, the step description of its reports
// and the BLUTRAIN_TEST_INJECT_NONFINITE hook (Note [Non-finite steps] in nonfinite.h).
#include "train/nonfinite.h"

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "blutensor/autograd.h"
#include "blutensor/error.h"

namespace blu::train {
namespace {

bool parse_step(const std::string& text, int64_t& out) {
  if (text.empty() || text.find_first_not_of("0123456789") != std::string::npos) return false;
  errno = 0;
  const long long v = std::strtoll(text.c_str(), nullptr, 10);
  out = v;
  return errno == 0 && v >= 1;
}

std::string number(double v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), std::isfinite(v) ? "%.4f" : "%g", v);
  return buf;
}

}  // namespace

NonfiniteInjection NonfiniteInjection::parse(const std::string& spec,
                                             const std::vector<NamedParam>& params) {
  auto fail = [&](const std::string& why) {
    BLU_THROW(kInjectNonfiniteEnv, "='", spec, "': ", why,
              " (expected STEPS[@TARGET][:nan|inf|-inf], STEPS = N or N-M, TARGET = a parameter "
              "name or 'loss')");
  };
  NonfiniteInjection inj;
  std::string rest = spec;
  if (const size_t colon = rest.rfind(':'); colon != std::string::npos) {
    const std::string v = rest.substr(colon + 1);
    if (v == "nan") {
      inj.value = std::numeric_limits<double>::quiet_NaN();
    } else if (v == "inf") {
      inj.value = std::numeric_limits<double>::infinity();
    } else if (v == "-inf") {
      inj.value = -std::numeric_limits<double>::infinity();
    } else {
      fail("value '" + v + "' is not nan, inf or -inf");
    }
    rest.resize(colon);
  }
  if (const size_t at = rest.find('@'); at != std::string::npos) {
    inj.target = rest.substr(at + 1);
    rest.resize(at);
    if (inj.target.empty()) fail("the target after '@' is empty");
  } else {
    if (params.empty()) fail("the model has no parameters");
    inj.target = params.back().name;
  }
  const size_t dash = rest.find('-');
  const std::string a = rest.substr(0, dash),
                    b = dash == std::string::npos ? a : rest.substr(dash + 1);
  if (!parse_step(a, inj.first_step) || !parse_step(b, inj.last_step) ||
      inj.last_step < inj.first_step) {
    fail("the steps '" + rest + "' are not N or N-M with 1 <= N <= M");
  }
  if (inj.target != "loss") {
    bool known = false;
    for (const NamedParam& p : params) known = known || p.name == inj.target;
    if (!known) fail("no parameter is named '" + inj.target + "'");
  }
  return inj;
}

NonfiniteInjection NonfiniteInjection::from_environment(const std::vector<NamedParam>& params) {
  const char* spec = std::getenv(kInjectNonfiniteEnv);
  if (spec == nullptr || *spec == '\0') return {};
  return parse(spec, params);
}

void NonfiniteInjection::arm_in_backward(const std::vector<NamedParam>& params, const int64_t* step) {
  if (!enabled() || target == "loss") return;
  for (const NamedParam& p : params) {
    if (p.name != target) continue;
    const NonfiniteInjection self = *this;
    p.tensor->register_grad_ready_hook([self, step](Tensor& param) {
      if (!self.active(*step)) return;
      NoGradGuard no_grad;
      param.grad().reshape({-1}).narrow(0, 0, 1).fill_(self.value);
    });
    armed_ = true;
    return;
  }
}

void NonfiniteInjection::apply(const std::vector<NamedParam>& params, double& loss) const {
  if (target == "loss") {
    loss = value;
    return;
  }
  if (armed_) return;
  NoGradGuard no_grad;
  for (const NamedParam& p : params) {
    if (p.name != target) continue;
    Tensor g = p.tensor->grad();
    BLU_CHECK(g.defined(), kInjectNonfiniteEnv, ": parameter ", target,
              " has no gradient this step");
    g.reshape({-1}).narrow(0, 0, 1).fill_(value);
    return;
  }
}

void NonfiniteInjection::poison_weight(const std::vector<NamedParam>& params) const {
  BLU_CHECK(target != "loss", kInjectNonfiniteEnv, ": the fused engine takes a parameter target, not loss");
  NoGradGuard no_grad;
  for (const NamedParam& p : params) {
    if (p.name == target) p.tensor->reshape({-1}).narrow(0, 0, 1).fill_(value);
  }
}

NonfinitePolicy::NonfinitePolicy(const std::string& policy, int max_skips)
    : skip_(policy == "skip"), max_skips_(max_skips) {
  BLU_CHECK(policy == "stop" || policy == "skip", "--nonfinite '", policy,
            "': expected stop or skip");
  BLU_CHECK(max_skips >= 1, "--nonfinite-max-skips ", max_skips, " must be at least 1");
}

NonfinitePolicy::Action NonfinitePolicy::on_step(bool nonfinite) {
  if (!nonfinite) {
    consecutive_ = 0;
    return Action::kContinue;
  }
  ++consecutive_;
  if (!skip_ || consecutive_ >= max_skips_) return Action::kStop;
  return Action::kSkip;
}

std::string describe_nonfinite_step(int64_t step, double loss, double grad_norm,
                                    const std::string& first_nonfinite) {
  return "step " + std::to_string(step) + ": loss " + number(loss) + ", gradient norm " +
         number(grad_norm) +
         (first_nonfinite.empty()
              ? std::string(", every gradient finite")
              : ", first non-finite gradient (optimizer order): " + first_nonfinite);
}

}  // namespace blu::train

// Every op of the op registry run on the CPU and on CUDA with the same inputs (float32, larger odd
// sizes): forward outputs and input gradients (from the same random output gradient) must agree
// per element within |cuda - cpu| <= atol + rtol |cpu|. Prints a table; with
// BLU_TENSOR_REPORT=<path> writes {"metrics": {"tensor.ops_checked", "tensor.ops_agree",
// "tensor.cpu_vs_cuda_ops_agree"}, "rows": [...]} there.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>

#include "blutensor/blutensor.h"
#include "blutensor/op_registry.h"
#include "common/gpu_test.h"

namespace {

using namespace blu;

struct Row {
  std::string op;
  double fwd_err = 0, grad_err = 0;  // worst |diff| / (atol + rtol |cpu|)
  std::string worst;                 // where the worst element was
  bool agree = false;
  std::string error;
};

// Worst normalised error; fills `where` with index, got and expected.
double compare(const Tensor& cpu, const Tensor& cuda, double atol, double rtol, std::string* where) {
  if (cpu.sizes() != cuda.sizes()) {
    *where = "shape " + cpu.shape_str() + " vs " + cuda.shape_str();
    return INFINITY;
  }
  std::vector<double> a = cpu.to_double_vector(), b = cuda.to_double_vector();
  double worst = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    double e = std::fabs(a[i] - b[i]) / (atol + rtol * std::fabs(a[i]));
    if (std::isnan(e) || (std::isnan(a[i]) != std::isnan(b[i]))) e = INFINITY;
    if (std::isnan(a[i]) && std::isnan(b[i])) e = 0;
    if (e > worst) {
      worst = e;
      char buf[160];
      std::snprintf(buf, sizeof(buf), "index %zu: cuda %.9g cpu %.9g", i, b[i], a[i]);
      *where = buf;
    }
  }
  return worst;
}

Row check_op(const OpCase& c, uint64_t seed, DType dtype) {
  Row row;
  row.op = c.name;
  // float32: a few ulps of accumulated rounding; bf16: a few bf16 ulps (8 bits of mantissa), since
  // both sides round every intermediate result to bf16 but not at the same places.
  const double base_atol = dtype == kFloat32 ? 1e-4 : 3e-2, base_rtol = dtype == kFloat32 ? 1e-3 : 3e-2;
  const double atol = base_atol * c.tolerance_scale, rtol = base_rtol * c.tolerance_scale;
  try {
    OpInputSpec spec;
    spec.dtype = dtype;
    spec.seed = seed;
    spec.size_scale = 2;
    std::vector<Tensor> in_cpu = c.make_inputs(spec);
    spec.device = Device::cuda(0);
    std::vector<Tensor> in_cuda = c.make_inputs(spec);
    Tensor out_cpu = c.forward(in_cpu);
    Tensor out_cuda = c.forward(in_cuda);
    std::string where;
    row.fwd_err = compare(out_cpu, out_cuda, atol, rtol, &where);
    row.worst = "fwd " + where;
    Generator g(seed + 1000);
    Tensor grad = randn(out_cpu.sizes(), out_cpu.dtype(), &g);
    out_cpu.backward(grad);
    out_cuda.backward(grad.to(Device::cuda(0)));
    for (std::size_t i = 0; i < in_cpu.size(); ++i) {
      if (!c.differentiable[i]) continue;
      if (!in_cpu[i].grad().defined() || !in_cuda[i].grad().defined()) {
        row.grad_err = INFINITY;
        row.worst = "input " + std::to_string(i) + ": gradient missing";
        continue;
      }
      double e = compare(in_cpu[i].grad(), in_cuda[i].grad(), atol, rtol, &where);
      if (e > row.grad_err) {
        row.grad_err = e;
        if (e > 1) row.worst = "grad of input " + std::to_string(i) + " " + where;
      }
    }
    row.agree = row.fwd_err <= 1.0 && row.grad_err <= 1.0;
  } catch (const std::exception& e) {
    row.error = e.what();
    row.agree = false;
  }
  return row;
}

TEST(OpsCpuVsCudaGpu, EveryRegisteredOpAgrees) {
  BLU_REQUIRE_GPU();
  std::vector<Row> rows;
  uint64_t seed = 1;
  for (const OpCase& c : op_registry()) rows.push_back(check_op(c, seed++, kFloat32));
  int agree = 0;
  std::printf("\n| op | fwd err/tol | grad err/tol | agree | note |\n|---|---|---|---|---|\n");
  for (const Row& r : rows) {
    agree += r.agree;
    std::printf("| %s | %.3g | %.3g | %s | %s |\n", r.op.c_str(), r.fwd_err, r.grad_err, r.agree ? "yes" : "NO",
                r.error.empty() ? (r.agree ? "" : r.worst.c_str()) : r.error.c_str());
  }
  std::printf("\nops agreeing: %d / %zu\n", agree, rows.size());
  if (const char* path = std::getenv("BLU_TENSOR_REPORT")) {
    std::ofstream f(path);
    f << "{\"metrics\": {\"tensor.ops_checked\": " << rows.size() << ", \"tensor.ops_agree\": " << agree
      << ", \"tensor.cpu_vs_cuda_ops_agree\": " << (agree == static_cast<int>(rows.size()) ? 1 : 0) << "},\n \"rows\": [";
    for (std::size_t i = 0; i < rows.size(); ++i) {
      const Row& r = rows[i];
      auto num = [](double v) { return std::isfinite(v) ? json::Value::number(v).dump() : std::string("null"); };
      f << (i ? ",\n  " : "\n  ") << "{\"op\": " << json::quote(r.op) << ", \"dtype\": \"f32\", \"fwd_err_over_tol\": "
        << num(r.fwd_err) << ", \"grad_err_over_tol\": " << num(r.grad_err) << ", \"agree\": " << (r.agree ? "true" : "false")
        << ", \"note\": " << json::quote(r.error.empty() ? (r.agree ? "" : r.worst) : r.error) << "}";
    }
    f << "]}\n";
  }
  for (const Row& r : rows) {
    EXPECT_TRUE(r.agree) << r.op << ": " << (r.error.empty() ? r.worst : r.error) << " (fwd " << r.fwd_err
                         << ", grad " << r.grad_err << " x tolerance)";
  }
}

// The same comparison in bf16 (reported in its own table; not part of the tensor.* metrics).
TEST(OpsCpuVsCudaGpu, EveryRegisteredOpAgreesInBf16) {
  BLU_REQUIRE_GPU();
  std::vector<Row> rows;
  uint64_t seed = 1;
  for (const OpCase& c : op_registry()) rows.push_back(check_op(c, seed++, kBFloat16));
  int agree = 0;
  std::printf("\nbf16\n| op | fwd err/tol | grad err/tol | agree | note |\n|---|---|---|---|---|\n");
  for (const Row& r : rows) {
    agree += r.agree;
    std::printf("| %s | %.3g | %.3g | %s | %s |\n", r.op.c_str(), r.fwd_err, r.grad_err, r.agree ? "yes" : "NO",
                r.error.empty() ? (r.agree ? "" : r.worst.c_str()) : r.error.c_str());
  }
  std::printf("\nbf16 ops agreeing: %d / %zu\n", agree, rows.size());
  for (const Row& r : rows) {
    EXPECT_TRUE(r.agree) << r.op << " (bf16): " << (r.error.empty() ? r.worst : r.error) << " (fwd " << r.fwd_err
                         << ", grad " << r.grad_err << " x tolerance)";
  }
}

TEST(OpsCpuVsCudaGpu, RandomStreamsAreIdentical) {
  BLU_REQUIRE_GPU();
  Generator a(31), b(31);
  Tensor u_cpu = rand({1001}, kFloat32, &a), u_cuda = rand({1001}, TensorOptions(kFloat32).device(Device::cuda(0)), &b);
  EXPECT_EQ(max_abs_diff(u_cpu, u_cuda), 0.0) << "uniforms differ";
  Tensor n_cpu = randn({1001}, kFloat32, &a), n_cuda = randn({1001}, TensorOptions(kFloat32).device(Device::cuda(0)), &b);
  EXPECT_LT(max_abs_diff(n_cpu, n_cuda), 1e-6) << "normals differ";
  Tensor x = ones({333, 3});
  Generator c(5), d(5);
  Tensor m_cpu = dropout(x, 0.4, true, &c), m_cuda = dropout(x.to(Device::cuda(0)), 0.4, true, &d);
  EXPECT_EQ(max_abs_diff(m_cpu, m_cuda), 0.0) << "dropout masks differ";
}

}  // namespace

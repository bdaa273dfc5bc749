// attention_bench.cu: blublas causal flash attention, forward and forward+backward TFLOP/s at the
// GPT-2 124M shape (B16 T1024, 12 heads of 64; and 6 heads of 128), q/k/v as strided views of a
// fused [B, T, 3, H, d] activation exactly as the trainer passes them.
//
// FLOP model (causal, as the anchors count it): forward 4*B*H*T*T*d / 2, backward 2.5x forward
// (so forward+backward is 3.5x forward). The recomputation our deterministic backward does is not
// counted. The PyTorch SDPA reference is measured by bench/torch_attention.py in the same device
// call; when <blu_out>/torch_attention.json exists (the device script runs the python first) this
// binary prints and records attention.bf16.fwdbwd_ratio_vs_torch_sdpa as well (and the tf32,
// fp32 and f32_3xtf32 ratios against PyTorch's fp32 SDPA).
//
// The bf16 d64 rows also run per dQ mode (Note [sm90 flash backward: dQ accumulated in order]):
// <prefix>.dq_twopass.* and <prefix>.dq_accumulate.*, at the GPT-2 shape, the d48 shape (B16
// T1024 H25) and the long-context shape (B2 T16384 H12), each mode's backward in the same process.
//
// --bwd_groups=G1,G2,...: the two-pass rows again with the backward's CTA order in groups of G
// heads (Note [sm90 flash backward: CTA order]), in the same process.
// --dq_only: those rows alone, then the sm90 tile sweep at each of their shapes, and the ratios
// to PyTorch SDPA's fastest backend per shape when torch_attention.py --dq_shapes wrote
// <blu_out>/torch_attention.json in the same call (metrics <prefix>.{fwd,bwd}_ratio_vs_torch_sdpa).
//
// Usage: attention_bench [--blu_out=<dir>] [--blu_quick] [--dq_only (the dQ-mode rows alone)]
//                        [--bwd_groups=1,4,8]
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "../blublas/src/attention/attention_params.h"  // tile tables (internal, for the sweep)
#include "bench_common.h"
#include "blublas/attention.h"
#include "blublas/check.h"
#include "blublas/device_info.h"

namespace {

using blublas::AttnPath;
using blublas::AttnPrecision;

struct Shape {
  int B, T, H, d;
  AttnPrecision prec;
  const char* metric_prefix;  // metrics: <prefix>.fwd_tflops, <prefix>.fwdbwd_tflops
  AttnPath path = AttnPath::kAuto;  // forced path rows: <prefix>.<path>.*
  blublas::AttnDqMode dq_mode = blublas::AttnDqMode::kAuto;  // forced rows: <prefix>.dq_<mode>.*
  // > 0: BLUBLAS_ATTN_BWD_GROUP for this row (Note [sm90 flash backward: CTA order]): <prefix>.dq_twopass.g<G>.*
  int bwd_group = 0;
};

const char* dq_mode_name(blublas::AttnDqMode m) {
  switch (m) {
    case blublas::AttnDqMode::kTwoPass:
      return "twopass";
    case blublas::AttnDqMode::kPartials:
      return "partials";
    case blublas::AttnDqMode::kAccumulate:
      return "accumulate";
    default:
      return "auto";
  }
}

struct Result {
  double fwd_ms, fwdbwd_ms, fwd_tflops, bwd_tflops, fwdbwd_tflops;
  std::string path;
};

void check(const blublas::Status& st) {
  if (!st.ok()) {
    std::fprintf(stderr, "attention_bench: %s\n", st.to_string().c_str());
    std::exit(2);
  }
}

__global__ void fill_random(void* p, size_t n, int bf16, unsigned seed) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    unsigned x = static_cast<unsigned>(i) * 2654435761u ^ seed;
    x ^= x >> 13;
    x *= 0x5bd1e995u;
    x ^= x >> 15;
    const float v = (static_cast<float>(x & 0xffff) / 65535.0f - 0.5f) * 3.0f;
    if (bf16)
      static_cast<__nv_bfloat16*>(p)[i] = __float2bfloat16(v);
    else
      static_cast<float*>(p)[i] = v;
  }
}

struct Problem {
  void *qkv = nullptr, *dqkv = nullptr, *o = nullptr, *d_o = nullptr, *ws = nullptr;
  float* lse = nullptr;
  size_t ws_bytes = 0;
  blublas::AttentionDesc desc;
  ~Problem() {
    for (void* p : {qkv, dqkv, o, d_o, ws, static_cast<void*>(lse)}) cudaFree(p);
  }
};

void setup(const Shape& s, cudaStream_t stream, Problem* pb) {
  const size_t eb = s.prec == AttnPrecision::kBF16 ? 2 : 4;
  const size_t n = static_cast<size_t>(s.B) * s.T * s.H * s.d;
  void *qkv, *dqkv, *o, *d_o, *ws;
  float* lse;
  blublas::AttentionDesc& desc = pb->desc;
  BLU_BENCH_CUDA(cudaMalloc(&qkv, 3 * n * eb));
  BLU_BENCH_CUDA(cudaMalloc(&dqkv, 3 * n * eb));
  BLU_BENCH_CUDA(cudaMalloc(&o, n * eb));
  BLU_BENCH_CUDA(cudaMalloc(&d_o, n * eb));
  BLU_BENCH_CUDA(cudaMalloc(&lse, static_cast<size_t>(s.B) * s.H * s.T * sizeof(float)));
  fill_random<<<1024, 256, 0, stream>>>(qkv, 3 * n, eb == 2, 1u);
  fill_random<<<1024, 256, 0, stream>>>(d_o, n, eb == 2, 2u);

  desc.batch = s.B;
  desc.seq_len = s.T;
  desc.heads = s.H;
  desc.head_dim = s.d;
  desc.softmax_scale = 1.0f / std::sqrt(static_cast<float>(s.d));
  desc.causal = true;
  desc.precision = s.prec;
  desc.dq_mode = s.dq_mode;
  desc.q = blublas::attn_qkv_view(qkv, 0, s.T, s.H, s.d, eb);
  desc.k = blublas::attn_qkv_view(qkv, 1, s.T, s.H, s.d, eb);
  desc.v = blublas::attn_qkv_view(qkv, 2, s.T, s.H, s.d, eb);
  auto out_view = [&](void* base, int which) {
    blublas::AttnInput in = blublas::attn_qkv_view(base, which, s.T, s.H, s.d, eb);
    blublas::AttnOutput v;
    v.ptr = const_cast<void*>(in.ptr);
    v.batch_stride = in.batch_stride;
    v.seq_stride = in.seq_stride;
    v.head_stride = in.head_stride;
    return v;
  };
  int64_t sb, st, sh;
  blublas::attn_dense_strides(s.T, s.H, s.d, &sb, &st, &sh);
  desc.o = blublas::AttnOutput{o, sb, st, sh};
  desc.d_o = blublas::AttnInput{d_o, sb, st, sh};
  desc.lse = lse;
  desc.dq = out_view(dqkv, 0);
  desc.dk = out_view(dqkv, 1);
  desc.dv = out_view(dqkv, 2);
  size_t ws_bytes = 0;
  check(blublas::attention_backward_workspace_size(desc, &ws_bytes));
  BLU_BENCH_CUDA(cudaMalloc(&ws, ws_bytes));
  pb->qkv = qkv;
  pb->dqkv = dqkv;
  pb->o = o;
  pb->d_o = d_o;
  pb->ws = ws;
  pb->lse = lse;
  pb->ws_bytes = ws_bytes;
}

Result run(const Shape& s, bool quick, cudaStream_t stream) {
  // Note [sm90 flash backward: CTA order]: read per call by make_params.
  if (s.bwd_group > 0) {
    setenv("BLUBLAS_ATTN_BWD_GROUP", std::to_string(s.bwd_group).c_str(), 1);
  } else {
    unsetenv("BLUBLAS_ATTN_BWD_GROUP");
  }
  Problem pb;
  setup(s, stream, &pb);
  pb.desc.path = s.path;
  const blublas::AttentionDesc& desc = pb.desc;
  void* ws = pb.ws;
  const size_t ws_bytes = pb.ws_bytes;
  AttnPath path = AttnPath::kAuto;
  check(blublas::attention_selected_path(desc, &path));

  // One working set is ~8 tensors of B*T*H*d: far beyond L2 at these shapes, so no rotation.
  const bool slow = s.prec == AttnPrecision::kF32Strict;
  const int warmup = quick ? 2 : 5;
  const int reps = slow ? (quick ? 3 : 5) : (quick ? 10 : 40);
  Result r;
  r.path = blublas::attn_path_name(path);
  r.fwd_ms = blu::bench::median_ms([&](int) { check(blublas::attention_forward(desc, stream)); },
                                   stream, warmup, reps);
  r.fwdbwd_ms = blu::bench::median_ms(
      [&](int) {
        check(blublas::attention_forward(desc, stream));
        check(blublas::attention_backward(desc, ws, ws_bytes, stream));
      },
      stream, warmup, reps);
  const double fwd_flop = 4.0 * s.B * s.H * static_cast<double>(s.T) * s.T * s.d / 2.0;
  r.fwd_tflops = fwd_flop / (r.fwd_ms * 1e-3) / 1e12;
  r.fwdbwd_tflops = 3.5 * fwd_flop / (r.fwdbwd_ms * 1e-3) / 1e12;
  r.bwd_tflops = 2.5 * fwd_flop / ((r.fwdbwd_ms - r.fwd_ms) * 1e-3) / 1e12;
  return r;
}

// Times every entry of the bf16 tile tables (Note [Attention tile tables]) at one shape.
void sweep(const Shape& s, bool sm90, bool quick, cudaStream_t stream,
           blu::bench::Report* report) {
  const char* family = sm90 ? "sm90" : "sm80";
  unsetenv("BLUBLAS_ATTN_BWD_GROUP");  // the tables' own CTA order
  Problem pb;
  setup(s, stream, &pb);
  blublas::DeviceInfo dev;
  check(blublas::current_device_info(&dev));
  const blublas::attn::Params p = blublas::attn::make_params(pb.desc, pb.ws);
  check(blublas::attention_forward(pb.desc, stream));
  const int warmup = quick ? 2 : 3, reps = quick ? 5 : 15;
  const double fwd_flop = 4.0 * s.B * s.H * static_cast<double>(s.T) * s.T * s.d / 2.0;
  std::printf(
      "\n| %s tile sweep B%d T%d H%d d%d | config | ms | TFLOP/s (causal FLOPs) |\n"
      "|---|---|---|---|\n",
      family, s.B, s.T, s.H, s.d);
  int n = 0;
  const blublas::attn::KernelConfig* ft = sm90 ? blublas::attn::sm90_bf16_fwd_table(s.d, &n)
                                               : blublas::attn::sm80_bf16_fwd_table(s.d, &n);
  for (int i = 0; i < n; ++i) {
    const blublas::Status probe = ft[i].launch(p, dev, stream);
    if (!probe.ok()) {
      std::printf("| fwd | %d: %s | n/a | %s |\n", i, ft[i].name, probe.to_string().c_str());
      continue;
    }
    const double ms = blu::bench::median_ms([&](int) { check(ft[i].launch(p, dev, stream)); },
                                            stream, warmup, reps);
    const double tf = fwd_flop / (ms * 1e-3) / 1e12;
    std::printf("| fwd | %d: %s | %.3f | %.1f |\n", i, ft[i].name, ms, tf);
    report->row(blu::bench::Row()
                    .str("sweep", "fwd")
                    .str("family", family)
                    .num("B", s.B)
                    .num("T", s.T)
                    .num("H", s.H)
                    .num("d", s.d)
                    .num("config", i)
                    .str("name", ft[i].name)
                    .num("ms", ms)
                    .num("tflops", tf));
  }
  const blublas::attn::KernelConfig* bt = sm90 ? blublas::attn::sm90_bf16_bwd_table(s.d, &n)
                                               : blublas::attn::sm80_bf16_bwd_table(s.d, &n);
  for (int i = 0; i < n; ++i) {
    const blublas::Status probe = bt[i].launch(p, dev, stream);
    if (!probe.ok()) {
      std::printf("| bwd | %d: %s | n/a | %s |\n", i, bt[i].name, probe.to_string().c_str());
      continue;
    }
    const double ms = blu::bench::median_ms(
        [&](int) {
          check(blublas::attn::attn_bwd_delta(p, s.d, true, stream));
          check(bt[i].launch(p, dev, stream));
        },
        stream, warmup, reps);
    const double tf = 2.5 * fwd_flop / (ms * 1e-3) / 1e12;
    std::printf("| bwd | %d: %s | %.3f | %.1f |\n", i, bt[i].name, ms, tf);
    report->row(blu::bench::Row()
                    .str("sweep", "bwd")
                    .str("family", family)
                    .num("B", s.B)
                    .num("T", s.T)
                    .num("H", s.H)
                    .num("d", s.d)
                    .num("config", i)
                    .str("name", bt[i].name)
                    .num("ms", ms)
                    .num("tflops", tf));
  }
}

// Reads "key": number from a flat JSON file written by torch_attention.py; NaN when absent.
double json_number(const std::string& path, const std::string& key) {
  std::ifstream f(path);
  if (!f) return NAN;
  std::stringstream ss;
  ss << f.rdbuf();
  const std::string text = ss.str();
  const std::string needle = "\"" + key + "\"";
  const size_t at = text.find(needle);
  if (at == std::string::npos) return NAN;
  const size_t colon = text.find(':', at + needle.size());
  if (colon == std::string::npos) return NAN;
  return std::strtod(text.c_str() + colon + 1, nullptr);
}

}  // namespace

int main(int argc, char** argv) {
  const blu::bench::Options opt = blu::bench::parse_options(&argc, argv);
  bool dq_only = false;
  std::vector<int> bwd_groups;
  for (int i = 1; i < argc; ++i) {
    dq_only = dq_only || std::strcmp(argv[i], "--dq_only") == 0;
    if (std::strncmp(argv[i], "--bwd_groups=", 13) == 0) {
      for (const char* c = argv[i] + 13; *c != '\0';) {
        char* end = nullptr;
        const long g = std::strtol(c, &end, 10);
        if (end == c) break;
        if (g > 0) bwd_groups.push_back(static_cast<int>(g));
        c = *end == ',' ? end + 1 : end;
      }
    }
  }
  if (blublas::device_count() == 0) {
    std::fprintf(stderr, "attention_bench: no CUDA device\n");
    return 1;
  }
  cudaStream_t stream;
  BLU_BENCH_CUDA(cudaStreamCreate(&stream));
  std::vector<Shape> shapes = {
      {16, 1024, 12, 64, AttnPrecision::kBF16, "attention.bf16"},
      {16, 1024, 6, 128, AttnPrecision::kBF16, "attention.bf16.d128"},
      {16, 1024, 12, 64, AttnPrecision::kF32TF32, "attention.tf32"},
      {4, 1024, 12, 64, AttnPrecision::kF32Strict, "attention.fp32"},
      {16, 1024, 12, 64, AttnPrecision::kF32Split3TF32, "attention.f32_3xtf32"},
  };
  // The bf16 rows again per forced path (sm80 mma.sync and sm90 wgmma side by side), where the
  // device runs that path.
  {
    blublas::DeviceInfo dev;
    check(blublas::current_device_info(&dev));
    const bool sm90 = blublas::attn::sm90_attn_available(dev).ok();
    for (int i = 0; i < 2; ++i) {
      Shape s = shapes[i];
      s.path = AttnPath::kSm80Mma;
      shapes.push_back(s);
      if (sm90) {
        s.path = AttnPath::kSm90Wgmma;
        shapes.push_back(s);
      }
    }
    // bf16 d64 per dQ mode: GPT-2 124M, d48 (1.56B), long context (skipped with --blu_quick).
    const Shape dq_shapes[] = {
        {16, 1024, 12, 64, AttnPrecision::kBF16, "attention.bf16"},
        {16, 1024, 25, 64, AttnPrecision::kBF16, "attention.bf16.d48"},
        {2, 16384, 12, 64, AttnPrecision::kBF16, "attention.bf16.t16384"},
    };
    if (dq_only) shapes.clear();
    for (const Shape& base : dq_shapes) {
      if (opt.quick && base.T > 1024) continue;
      for (auto m : {blublas::AttnDqMode::kTwoPass, blublas::AttnDqMode::kAccumulate}) {
        Shape s = base;
        s.dq_mode = m;
        shapes.push_back(s);
      }
      for (int g : bwd_groups) {
        Shape s = base;
        s.dq_mode = blublas::AttnDqMode::kTwoPass;
        s.bwd_group = g;
        shapes.push_back(s);
      }
    }
  }
  blu::bench::Report report("attention_bench");
  struct Printed {
    Shape s;
    Result r;
  };
  std::vector<Printed> done;
  for (const Shape& s : shapes) {
    const Result r = run(s, opt.quick, stream);
    std::string prefix = s.metric_prefix;
    if (s.path != AttnPath::kAuto) prefix += std::string(".") + blublas::attn_path_name(s.path);
    if (s.dq_mode != blublas::AttnDqMode::kAuto) {
      prefix += std::string(".dq_") + dq_mode_name(s.dq_mode);
      if (s.bwd_group > 0) prefix += ".g" + std::to_string(s.bwd_group);
    }
    report.metric(prefix + ".fwd_tflops", r.fwd_tflops);
    report.metric(prefix + ".bwd_tflops", r.bwd_tflops);
    report.metric(prefix + ".fwdbwd_tflops", r.fwdbwd_tflops);
    report.row(blu::bench::Row()
                   .str("precision", blublas::attn_precision_name(s.prec))
                   .str("path", r.path)
                   .num("B", s.B)
                   .num("T", s.T)
                   .num("H", s.H)
                   .num("d", s.d)
                   .str("dq_mode", dq_mode_name(s.dq_mode))
                   .num("fwd_ms", r.fwd_ms)
                   .num("fwdbwd_ms", r.fwdbwd_ms)
                   .num("fwd_tflops", r.fwd_tflops)
                   .num("bwd_tflops", r.bwd_tflops)
                   .num("fwdbwd_tflops", r.fwdbwd_tflops));
    done.push_back({s, r});
  }

  double torch_fwdbwd = NAN, torch_fwd = NAN;
  if (!opt.out_dir.empty()) {
    const std::string tj = opt.out_dir + "/torch_attention.json";
    torch_fwdbwd = json_number(tj, "torch_sdpa.bf16.fwdbwd_tflops");
    torch_fwd = json_number(tj, "torch_sdpa.bf16.fwd_tflops");
  }
  const double ours = done[0].r.fwdbwd_tflops;
  if (dq_only) torch_fwdbwd = torch_fwd = NAN;  // the ratios below index the full row list
  if (!opt.out_dir.empty() && !dq_only) {  // tf32 and strict fp32 against PyTorch SDPA on fp32 inputs
    const std::string tj = opt.out_dir + "/torch_attention.json";
    // f32_3xtf32 is compared with PyTorch's fp32 SDPA under strict settings at the same B16
    // shape (torch_sdpa.fp32_b16: the memory-efficient kernel's 3xTF32 fp32 path on sm80+).
    for (size_t i = 2; i < 5; ++i) {
      const AttnPrecision pr = done[i].s.prec;
      const std::string mode = pr == AttnPrecision::kF32TF32         ? "tf32"
                               : pr == AttnPrecision::kF32Split3TF32 ? "f32_3xtf32"
                                                                     : "fp32";
      const std::string ref_mode = pr == AttnPrecision::kF32Split3TF32 ? "fp32_b16" : mode;
      const double ref = json_number(tj, "torch_sdpa." + ref_mode + ".fwdbwd_tflops");
      const double ref_fwd = json_number(tj, "torch_sdpa." + ref_mode + ".fwd_tflops");
      if (pr == AttnPrecision::kF32Split3TF32 && std::isfinite(ref_fwd) && ref_fwd > 0) {
        report.metric("attention." + mode + ".fwd_ratio_vs_torch_sdpa",
                      done[i].r.fwd_tflops / ref_fwd);
      }
      if (std::isfinite(ref) && ref > 0) {
        report.metric("attention." + mode + ".fwdbwd_ratio_vs_torch_sdpa",
                      done[i].r.fwdbwd_tflops / ref);
        std::printf("attention.%s.fwdbwd_ratio_vs_torch_sdpa = %.3f (ours %.1f vs %.1f TFLOP/s)\n",
                    mode.c_str(), done[i].r.fwdbwd_tflops / ref, done[i].r.fwdbwd_tflops, ref);
      }
    }
  }
  if (std::isfinite(torch_fwdbwd) && torch_fwdbwd > 0) {
    report.metric("attention.bf16.fwdbwd_ratio_vs_torch_sdpa", ours / torch_fwdbwd);
    if (std::isfinite(torch_fwd) && torch_fwd > 0) {
      report.metric("attention.bf16.fwd_ratio_vs_torch_sdpa", done[0].r.fwd_tflops / torch_fwd);
    }
  }
  if (dq_only && !opt.out_dir.empty()) {  // per shape against torch_attention.py --dq_shapes
    const std::string tj = opt.out_dir + "/torch_attention.json";
    for (const Printed& d : done) {
      if (d.s.dq_mode != blublas::AttnDqMode::kTwoPass || d.s.bwd_group != 0) continue;
      const std::string ref = std::string("torch_sdpa") + (d.s.metric_prefix + 9);  // ".bf16..."
      const double rf = json_number(tj, ref + ".fwd_tflops");
      const double rb = json_number(tj, ref + ".bwd_tflops");
      if (!(std::isfinite(rf) && std::isfinite(rb) && rf > 0 && rb > 0)) continue;
      report.metric(std::string(d.s.metric_prefix) + ".fwd_ratio_vs_torch_sdpa", d.r.fwd_tflops / rf);
      report.metric(std::string(d.s.metric_prefix) + ".bwd_ratio_vs_torch_sdpa", d.r.bwd_tflops / rb);
      std::printf("%s vs torch SDPA (fastest backend): fwd %.1f / %.1f = %.3f, bwd %.1f / %.1f = "
                  "%.3f TFLOP/s\n",
                  d.s.metric_prefix, d.r.fwd_tflops, rf, d.r.fwd_tflops / rf, d.r.bwd_tflops, rb,
                  d.r.bwd_tflops / rb);
    }
  }
  auto print_summary = [&]() {
    std::printf(
        "\n| precision | path | dQ | B | T | H | d | fwd ms | fwd TFLOP/s | bwd TFLOP/s | "
        "fwd+bwd ms | fwd+bwd TFLOP/s |\n|---|---|---|---|---|---|---|---|---|---|---|---|\n");
    for (const auto& p : done) {
      std::printf("| %s | %s | %s | %d | %d | %d | %d | %.3f | %.1f | %.1f | %.3f | %.1f |\n",
                  blublas::attn_precision_name(p.s.prec), p.r.path.c_str(),
                  (std::string(dq_mode_name(p.s.dq_mode)) +
                   (p.s.bwd_group > 0 ? " g" + std::to_string(p.s.bwd_group) : std::string()))
                      .c_str(),
                  p.s.B, p.s.T, p.s.H, p.s.d, p.r.fwd_ms,
                  p.r.fwd_tflops, p.r.bwd_tflops, p.r.fwdbwd_ms, p.r.fwdbwd_tflops);
    }
    if (std::isfinite(torch_fwdbwd)) {
      std::printf(
          "\nattention.bf16.fwdbwd_ratio_vs_torch_sdpa = %.3f (ours %.1f vs torch SDPA %.1f "
          "TFLOP/s fwd+bwd; fwd %.1f vs %.1f)\n",
          ours / torch_fwdbwd, ours, torch_fwdbwd, done[0].r.fwd_tflops, torch_fwd);
    } else {
      std::printf(
          "\n(no torch_attention.json in --blu_out: run bench/torch_attention.py <dir> first "
          "for the ratio vs PyTorch SDPA; anchor on H100: fwd 228, fwd+bwd 153 TFLOP/s)\n");
    }
    std::fflush(stdout);
  };
  report.write(opt.out_dir);  // before the sweep: a failing experimental tile cannot lose it
  print_summary();
  {
    blublas::DeviceInfo dev;
    check(blublas::current_device_info(&dev));
    const bool sm90 = blublas::attn::sm90_attn_available(dev).ok();
    if (dq_only) {  // the sm90 tables at every dQ-mode shape (GPT-2, d48, long context)
      for (const Printed& d : done) {
        if (sm90 && d.s.dq_mode == blublas::AttnDqMode::kTwoPass && d.s.bwd_group == 0) {
          sweep(d.s, true, opt.quick, stream, &report);
        }
      }
    } else {
      for (int fam = sm90 ? 1 : 0; fam >= 0; --fam) {
        sweep(shapes[0], fam == 1, opt.quick, stream, &report);
        sweep(shapes[1], fam == 1, opt.quick, stream, &report);
      }
    }
  }
  report.write(opt.out_dir);  // again, with the sweep rows
  print_summary();            // the short table comes last
  BLU_BENCH_CUDA(cudaStreamDestroy(stream));
  return 0;
}

// gemm.cpp: the public GEMM entry points (blublas/gemm.h): argument validation, normalization to
// the row-major GemmProblem (gemm_problem.h), workspace query, and dispatch to the SIMT, sm_80
// (mma.sync) and sm_90a (wgmma) paths.
//
// Note [Validate before CUDA]
// Every argument check that does not need the device (sizes, leading dimensions, pointers, enums,
// dtype/compute combinations, epilogue operands) runs before the first CUDA call, so a bad desc
// is reported identically with or without a GPU (tests/blublas/gemm_args_test.cpp relies on it).
// Only then is the device queried, the path chosen and the path asked whether it accepts the
// problem (alignment, arch): kAuto falls back to the next path, a forced path returns its reason.
#include <cstdint>
#include <sstream>
#include <string>

#include "blublas/check.h"
#include "blublas/gemm.h"
#include "gemm/gemm_problem.h"
#include "gemm/heuristics.h"
#include "gemm/operand_repack.h"

namespace blublas {

const char* epilogue_name(Epilogue e) {
  switch (e) {
    case Epilogue::kNone: return "none";
    case Epilogue::kBias: return "bias";
    case Epilogue::kBiasGelu: return "bias_gelu";
    case Epilogue::kGelu: return "gelu";
    case Epilogue::kBiasGradA: return "bias_grad_a";
    case Epilogue::kBiasGradB: return "bias_grad_b";
    case Epilogue::kGeluGrad: return "gelu_grad";
  }
  return "invalid";
}
const char* compute_mode_name(ComputeMode c) {
  switch (c) {
    case ComputeMode::kDefault: return "default";
    case ComputeMode::kStrictF32: return "strict_f32";
    case ComputeMode::kTF32: return "tf32";
  }
  return "invalid";
}


namespace gemm_detail {
namespace {

bool valid_dtype(Dtype t) { return t == Dtype::kF32 || t == Dtype::kBF16 || t == Dtype::kF16; }
bool valid_ab_type(Dtype t) { return valid_dtype(t) || dtype_is_fp8(t); }
bool valid_op(Op o) { return o == Op::kN || o == Op::kT; }
bool valid_layout(Layout l) { return l == Layout::kRowMajor || l == Layout::kColMajor; }
bool valid_path(GemmPath p) {
  return p == GemmPath::kAuto || p == GemmPath::kSimt || p == GemmPath::kSm80Mma ||
         p == GemmPath::kSm90Wgmma;
}
bool valid_epilogue(Epilogue e) {
  const int v = static_cast<int>(e);
  return v >= static_cast<int>(Epilogue::kNone) && v <= static_cast<int>(Epilogue::kGeluGrad);
}
// "gemm(M=17, N=33, K=9, batch=1, NT, row-major, ab=bf16, cd=f32, compute=default, epilogue=none,
//  path=auto)": the prefix of every message, so each names the op, sizes, dtypes and path.
std::string describe(const GemmDesc& d) {
  std::ostringstream os;
  os << "gemm(M=" << d.m << ", N=" << d.n << ", K=" << d.k << ", batch=" << d.batch << ", "
     << (d.op_a == Op::kT ? 'T' : 'N') << (d.op_b == Op::kT ? 'T' : 'N') << ", "
     << (d.layout == Layout::kColMajor ? "col-major" : "row-major")
     << ", ab=" << dtype_name(d.ab_type);
  if (d.b_type != kSameAsA) os << ", b=" << dtype_name(d.b_type);
  os << ", cd=" << dtype_name(d.cd_type)
     << ", compute=" << compute_mode_name(d.compute) << ", epilogue=" << epilogue_name(d.epilogue)
     << ", path=" << gemm_path_name(d.path) << ")";
  return os.str();
}

// Rows and columns of a matrix as it lies in memory: for row-major storage the leading dimension
// spans the columns; for column-major the rows. `rows` x `cols` is the stored (not op'd) shape.
struct Stored {
  int64_t rows, cols;
  int64_t min_ld(Layout l) const { return l == Layout::kRowMajor ? cols : rows; }
  int64_t outer(Layout l) const { return l == Layout::kRowMajor ? rows : cols; }
};

// Minimum element stride between batch matrices so that consecutive ones do not overlap.
int64_t min_batch_stride(const Stored& s, Layout l, int64_t ld) {
  return (s.outer(l) - 1) * ld + s.min_ld(l);
}

// name: "a", "b", "c", "d" or "aux"; the fields are ld<name> / stride_<name> (ld_aux for aux).
Status check_matrix(const GemmDesc& d, const char* name, const void* ptr, const Stored& s,
                    int64_t ld, int64_t stride, bool written) {
  const std::string ld_name = std::string(name) == "aux" ? "ld_aux" : std::string("ld") + name;
  const std::string what = describe(d);
  BLUBLAS_CHECK_ARG(ptr != nullptr, what, ": ", name, " is null");
  const int64_t need = s.min_ld(d.layout);
  BLUBLAS_CHECK_ARG(ld >= need && ld >= 1, what, ": ", ld_name, "=", ld, " < ", need, " (", name,
                    " is stored ", s.rows, " x ", s.cols, " ",
                    d.layout == Layout::kRowMajor ? "row-major" : "col-major", ")");
  if (d.batch > 1) {
    BLUBLAS_CHECK_ARG(stride >= 0, what, ": stride_", name, "=", stride, " is negative");
    if (written) {
      const int64_t min_stride = min_batch_stride(s, d.layout, ld);
      BLUBLAS_CHECK_ARG(stride >= min_stride, what, ": stride_", name, "=", stride,
                        " < ", min_stride, ": batch outputs would overlap");
    }
  }
  return Status::success();
}

// Note [FP8 GEMM]
// ab_type e4m3/e5m2 (b_type: B's, any of the four pairs) runs on the sm_90a wgmma kernels
// (m64nNk32 FP8 instructions, 128-byte K rows = 128 elements a stage), and on sm_89 (Ada) on the
// mma.sync kernels (m16n8k32; Note [sm89 FP8 mma.sync] in sm80_gemm_kernel.cuh), which kSm80Mma
// also forces on Hopper. What it takes, checked here before any CUDA call: both operands K-major
// (neither FP8 instruction has a transpose; cuBLASLt asks the same "TN" form), C/D f32 or bf16,
// epilogue none or bias, path auto, sm90_wgmma or sm80_mma (split-K and the TMA tiles: sm90 only).
// Scales: the kernel multiplies each accumulator tile by *scale_a * *scale_b once, before the
// epilogue (and before split-K partials are written, so the reduction sums scaled partials); alpha,
// beta and bias then apply as for every type. amax_d: max |D| (the values stored, before rounding
// to D's type) over the call, reduced per warp and max-ed into *amax_d with one atomicMax per warp
// (float bits as int: exact and order-independent, so deterministic).
// Accuracy: the products of FP8 values are exact in fp32, but Hopper's FP8 wgmma adds them with
// fewer accumulator bits than an fp32 FMA chain (the "fast accumulation" cuBLASLt exposes as
// CUBLASLT_MATMUL_DESC_FAST_ACCUM); tests/blublas/gemm_fp8_gpu_test.cu measures the error against a
// float64 reference and holds it to the bound stated there.
Status validate_fp8(const GemmDesc& d, const std::string& what) {
  BLUBLAS_CHECK_ARG(d.compute == ComputeMode::kDefault, what, ": compute=", compute_mode_name(d.compute),
                    " is for f32 inputs (FP8 accumulates in fp32: use compute=default)");
  BLUBLAS_CHECK(d.cd_type == Dtype::kF32 || d.cd_type == Dtype::kBF16, StatusCode::kNotSupported, what,
                ": FP8 inputs take f32 or bf16 C/D (cd=", dtype_name(d.cd_type), ")");
  BLUBLAS_CHECK(d.epilogue == Epilogue::kNone || d.epilogue == Epilogue::kBias, StatusCode::kNotSupported,
                what, ": FP8 inputs take epilogue none or bias (got ", epilogue_name(d.epilogue), ")");
  const bool k_major = d.layout == Layout::kRowMajor ? d.op_a == Op::kN && d.op_b == Op::kT
                                                     : d.op_a == Op::kT && d.op_b == Op::kN;
  BLUBLAS_CHECK(k_major, StatusCode::kNotSupported, what,
                ": FP8 needs both operands K-major (", d.layout == Layout::kRowMajor ? "NT" : "TN",
                " in this layout): the FP8 tensor-core instructions take no transposed operand");
  BLUBLAS_CHECK(d.path == GemmPath::kAuto || d.path == GemmPath::kSm90Wgmma || d.path == GemmPath::kSm80Mma,
                StatusCode::kNotSupported, what,
                ": FP8 runs on the sm90_wgmma path (sm_90) or the sm80_mma path (mma.sync, sm_89 and newer); "
                "there is no SIMT FP8 kernel");
  return Status::success();
}

Status validate(const GemmDesc& d) {
  // Enums first: describe() prints them.
  BLUBLAS_CHECK_ARG(valid_ab_type(d.ab_type) && valid_dtype(d.cd_type) &&
                        (d.b_type == kSameAsA || dtype_is_fp8(d.b_type)),
                    "gemm: invalid dtype (ab_type=", static_cast<int>(d.ab_type),
                    ", b_type=", static_cast<int>(d.b_type), ", cd_type=",
                    static_cast<int>(d.cd_type), ")");
  BLUBLAS_CHECK_ARG(valid_op(d.op_a) && valid_op(d.op_b), "gemm: invalid op (op_a=",
                    static_cast<int>(d.op_a), ", op_b=", static_cast<int>(d.op_b), ")");
  BLUBLAS_CHECK_ARG(valid_layout(d.layout), "gemm: invalid layout ", static_cast<int>(d.layout));
  BLUBLAS_CHECK_ARG(valid_path(d.path), "gemm: invalid path ", static_cast<int>(d.path));
  BLUBLAS_CHECK_ARG(valid_epilogue(d.epilogue), "gemm: invalid epilogue ",
                    static_cast<int>(d.epilogue));
  BLUBLAS_CHECK_ARG(d.compute == ComputeMode::kDefault || d.compute == ComputeMode::kStrictF32 ||
                        d.compute == ComputeMode::kTF32,
                    "gemm: invalid compute mode ", static_cast<int>(d.compute));
  const std::string what = describe(d);

  BLUBLAS_CHECK_ARG(d.m >= 1 && d.n >= 1 && d.k >= 1, what, ": M, N and K must be >= 1");
  BLUBLAS_CHECK_ARG(d.batch >= 1, what, ": batch must be >= 1");
  BLUBLAS_CHECK_ARG(d.max_ctas >= 0, what, ": max_ctas must be >= 0 (0: one CTA per SM)");
  if (dtype_is_fp8(d.ab_type)) {
    BLUBLAS_RETURN_IF_ERROR(validate_fp8(d, what));
  } else {
    BLUBLAS_CHECK_ARG(d.b_type == kSameAsA && d.scale_a == nullptr && d.scale_b == nullptr &&
                          d.amax_d == nullptr,
                      what, ": b_type, scale_a, scale_b and amax_d are for FP8 inputs only");
  }
  if (d.ab_type != Dtype::kF32) {
    BLUBLAS_CHECK_ARG(d.compute == ComputeMode::kDefault, what, ": compute=",
                      compute_mode_name(d.compute), " needs f32 inputs (ab=", dtype_name(d.ab_type),
                      " always accumulates in fp32: use compute=default)");
  } else {
    BLUBLAS_CHECK(d.cd_type == Dtype::kF32, StatusCode::kNotSupported, what,
                  ": f32 inputs take f32 C/D only (cd=", dtype_name(d.cd_type), ")");
  }

  // A: op(A) is M x K, so A is stored M x K (N) or K x M (T); B: op(B) is K x N.
  const Stored sa = d.op_a == Op::kN ? Stored{d.m, d.k} : Stored{d.k, d.m};
  const Stored sb = d.op_b == Op::kN ? Stored{d.k, d.n} : Stored{d.n, d.k};
  const Stored sd{d.m, d.n};
  BLUBLAS_RETURN_IF_ERROR(check_matrix(d, "a", d.a, sa, d.lda, d.stride_a, false));
  BLUBLAS_RETURN_IF_ERROR(check_matrix(d, "b", d.b, sb, d.ldb, d.stride_b, false));
  BLUBLAS_RETURN_IF_ERROR(check_matrix(d, "d", d.d, sd, d.ldd, d.stride_d, true));
  if (d.beta != 0.0f) {
    BLUBLAS_RETURN_IF_ERROR(check_matrix(d, "c", d.c, sd, d.ldc, d.stride_c, false));
    if (d.c == d.d) {
      BLUBLAS_CHECK_ARG(d.ldc == d.ldd && (d.batch == 1 || d.stride_c == d.stride_d), what,
                        ": c aliases d but ldc=", d.ldc, " != ldd=", d.ldd, " or stride_c=",
                        d.stride_c, " != stride_d=", d.stride_d);
    }
  }

  switch (d.epilogue) {
    case Epilogue::kNone: break;
    case Epilogue::kBias:
      BLUBLAS_CHECK_ARG(d.bias != nullptr, what, ": epilogue bias needs bias (N=", d.n,
                        " elements of ", dtype_name(d.cd_type), ")");
      break;
    case Epilogue::kBiasGelu:
    case Epilogue::kGelu:
      if (d.epilogue == Epilogue::kBiasGelu) {
        BLUBLAS_CHECK_ARG(d.bias != nullptr, what, ": epilogue bias_gelu needs bias (N=", d.n,
                          " elements of ", dtype_name(d.cd_type), ")");
        BLUBLAS_CHECK_ARG(d.aux != nullptr, what,
                          ": epilogue bias_gelu needs aux (the M x N pre-activation)");
      }
      if (d.aux != nullptr) {
        BLUBLAS_RETURN_IF_ERROR(check_matrix(d, "aux", d.aux, sd, d.ld_aux, d.stride_aux, true));
        BLUBLAS_CHECK_ARG(d.aux != d.d, what, ": aux must not alias d");
      }
      break;
    case Epilogue::kGeluGrad:
      BLUBLAS_CHECK_ARG(d.aux != nullptr, what,
                        ": epilogue gelu_grad needs aux (the M x N pre-activation to read)");
      BLUBLAS_RETURN_IF_ERROR(check_matrix(d, "aux", d.aux, sd, d.ld_aux, d.stride_aux, false));
      BLUBLAS_CHECK_ARG(d.aux != d.d, what, ": aux must not alias d");
      break;
    case Epilogue::kBiasGradA:
    case Epilogue::kBiasGradB:
      BLUBLAS_CHECK_ARG(d.bias_grad != nullptr, what, ": epilogue ", epilogue_name(d.epilogue),
                        " needs bias_grad (", d.epilogue == Epilogue::kBiasGradA ? d.m : d.n,
                        " floats)");
      BLUBLAS_CHECK_ARG(d.batch == 1, what, ": epilogue ", epilogue_name(d.epilogue),
                        " needs batch == 1 (batch=", d.batch, ")");
      break;
  }
  return Status::success();
}

// Is `path` able to run p on dev? Forwards to the path's own check.
Status path_supports(GemmPath path, const GemmProblem& p, const DeviceInfo& dev) {
  switch (path) {
    case GemmPath::kSimt: return simt_gemm_supports(p, dev);
    case GemmPath::kSm80Mma: return sm80_gemm_supports(p, dev);
    case GemmPath::kSm90Wgmma: return sm90_gemm_supports(p, dev);
    case GemmPath::kAuto: break;
  }
  return Status(StatusCode::kInvalidArgument, "gemm: no path named auto at dispatch");
}

std::size_t path_workspace(GemmPath path, const GemmProblem& p, const DeviceInfo& dev) {
  switch (path) {
    case GemmPath::kSimt: return simt_gemm_workspace_bytes(p, dev);
    case GemmPath::kSm80Mma: return sm80_gemm_workspace_bytes(p, dev);
    case GemmPath::kSm90Wgmma: return sm90_gemm_workspace_bytes(p, dev);
    case GemmPath::kAuto: break;
  }
  return 0;
}

// Note [Repacking misaligned operands]
// The tensor-core paths load operands in 16-byte chunks (cp.async, TMA), so they refuse an operand
// whose pointer, leading dimension or batch stride is not a multiple of 16 bytes (kMisaligned).
// Falling back to the SIMT kernels would cost 10x or more for 16-bit inputs, so kAuto instead
// copies each misaligned operand into the caller's workspace with a 16-byte aligned leading
// dimension (operand_repack.cu: one pass at near copy bandwidth) and runs the tensor-core path on
// the copy. The workspace query includes the copies (plus 256 bytes of alignment slack). A forced
// path never repacks: it returns its kMisaligned reason. The SIMT path stays the fallback for
// problems no tensor-core path takes even after repacking.
struct Plan {
  GemmPath path = GemmPath::kAuto;
  GemmProblem problem;  // what the path runs; repacked operands point into the workspace
  bool repack[2] = {false, false};  // A', B' of the normalized problem
  RepackSpec spec[2];
  const void* source[2] = {nullptr, nullptr};  // the caller's operands that are copied
  std::size_t offset[2] = {0, 0};   // of each copy, from the 256-aligned workspace start
  std::size_t path_offset = 0, path_bytes = 0, total_bytes = 0;
};

// Note [Workspace alignment]
// gemm.h asks nothing of the workspace pointer's alignment, but the sm_90a path needs its
// workspace (split-K partials, tf32 transposes) 256-byte aligned and used to return kMisaligned
// from gemm() (after gemm_workspace_size() had accepted the problem) for a pointer from a
// sub-allocator, e.g. cudaMalloc'd base + 16. The dispatcher therefore adds kWorkspaceAlign bytes
// of slack to every non-zero workspace size and hands each path a 256-byte aligned pointer, with
// or without repacked operands (tests/blublas/gemm_property_gpu_test.cu passes offset pointers).
constexpr std::size_t kWorkspaceAlign = 256;
std::size_t align_up(std::size_t v) { return (v + kWorkspaceAlign - 1) / kWorkspaceAlign * kWorkspaceAlign; }

bool aligned16(const void* ptr, int64_t ld, int64_t stride, Dtype t) {
  const int64_t per16 = 16 / static_cast<int64_t>(dtype_size(t));
  return reinterpret_cast<std::uintptr_t>(ptr) % 16 == 0 && ld % per16 == 0 && stride % per16 == 0;
}

// A placeholder 16-byte aligned operand address for support checks before the workspace is known.
const void* planned_copy_address() { return reinterpret_cast<const void*>(std::uintptr_t{4096}); }

// Can `path` run p, directly or (allow_repack) on aligned copies of its misaligned operands?
Status plan_path(GemmPath path, const GemmProblem& p, const DeviceInfo& dev, bool allow_repack,
                 Plan* plan) {
  Status st = path_supports(path, p, dev);
  if (st.ok()) {
    *plan = Plan{};
    plan->path = path;
    plan->problem = p;
    plan->path_bytes = path_workspace(path, p, dev);
    // Note [Workspace alignment]: the slack that lets execute() align the path's workspace.
    plan->total_bytes = plan->path_bytes > 0 ? kWorkspaceAlign + plan->path_bytes : 0;
    return st;
  }
  if (!allow_repack || path == GemmPath::kSimt || st.code() != StatusCode::kMisaligned) return st;
  Plan q;
  q.path = path;
  q.problem = p;
  const bool a_bad = !aligned16(p.a, p.lda, p.stride_a, p.ab_type);
  const bool b_bad = !aligned16(p.b, p.ldb, p.stride_b, p.b_type);
  std::size_t offset = 0;
  for (int which = 0; which < 2; ++which) {
    if (!(which == 0 ? a_bad : b_bad)) continue;
    RepackSpec& s = q.spec[which];
    const bool k_major = which == 0 ? p.a_k_major : p.b_k_major;
    const int64_t rows = which == 0 ? p.m : p.n;
    s.type = which == 0 ? p.ab_type : p.b_type;
    s.batch = p.batch;
    s.outer = k_major ? rows : p.k;
    s.inner = k_major ? p.k : rows;
    s.ld_src = which == 0 ? p.lda : p.ldb;
    s.stride_src = which == 0 ? p.stride_a : p.stride_b;
    q.repack[which] = true;
    q.source[which] = which == 0 ? p.a : p.b;
    q.offset[which] = offset;
    offset += align_up(s.bytes());
    if (which == 0) {
      q.problem.a = planned_copy_address(); q.problem.lda = s.ld_dst(); q.problem.stride_a = p.batch > 1 ? s.stride_dst() : 0;
    } else {
      q.problem.b = planned_copy_address(); q.problem.ldb = s.ld_dst(); q.problem.stride_b = p.batch > 1 ? s.stride_dst() : 0;
    }
  }
  if (!path_supports(path, q.problem, dev).ok()) return st;  // still refused: report the first reason
  q.path_offset = offset;
  q.path_bytes = path_workspace(path, q.problem, dev);
  q.total_bytes = kWorkspaceAlign + offset + q.path_bytes;
  *plan = q;
  return Status::success();
}

// Validates, normalizes, queries the device and resolves the path (kAuto: the first that accepts,
// directly or after repacking).
Status prepare(const GemmDesc& desc, Plan* plan, DeviceInfo* dev) {
  BLUBLAS_RETURN_IF_ERROR(validate(desc));
  GemmProblem p;
  BLUBLAS_RETURN_IF_ERROR(normalize(desc, &p));
  BLUBLAS_RETURN_IF_ERROR(current_device_info(dev));
  if (desc.path != GemmPath::kAuto) {
    Status st = plan_path(desc.path, p, *dev, false, plan);
    if (!st.ok()) return Status(st.code(), describe(desc) + ": " + st.message());
    return Status::success();
  }
  GemmPath order[3];
  int n = 0;
  auto_path_order(p, *dev, order, &n);
  std::string reasons;
  for (int i = 0; i < n; ++i) {
    Status st = plan_path(order[i], p, *dev, true, plan);
    if (st.ok()) return st;
    reasons += std::string(i ? "; " : "") + gemm_path_name(order[i]) + ": " + st.message();
  }
  return Status(StatusCode::kNotSupported, describe(desc) + ": no path accepts it (" + reasons + ")");
}

// Runs a plan: the operand copies, then the path on the problem that points at them.
Status execute(const Plan& plan, const DeviceInfo& dev, void* workspace, std::size_t workspace_bytes,
               cudaStream_t stream) {
  GemmProblem p = plan.problem;
  char* base = static_cast<char*>(workspace);
  std::size_t avail = workspace_bytes;
  if (plan.total_bytes > 0) {  // Note [Workspace alignment]
    const std::uintptr_t addr = reinterpret_cast<std::uintptr_t>(workspace);
    const std::size_t skip = (kWorkspaceAlign - addr % kWorkspaceAlign) % kWorkspaceAlign;
    base += skip;
    avail -= skip;
  }
  if (plan.repack[0] || plan.repack[1]) {
    for (int which = 0; which < 2; ++which) {
      if (!plan.repack[which]) continue;
      void* dst = base + plan.offset[which];
      BLUBLAS_RETURN_IF_ERROR(repack_operand(plan.spec[which], plan.source[which], dst, stream));
      if (which == 0) p.a = dst; else p.b = dst;
    }
    base += plan.path_offset;
    avail -= plan.path_offset;
  }
  void* path_ws = plan.path_bytes ? static_cast<void*>(base) : nullptr;
  switch (plan.path) {
    case GemmPath::kSimt: return simt_gemm_run(p, dev, path_ws, avail, stream);
    case GemmPath::kSm80Mma: return sm80_gemm_run(p, dev, path_ws, avail, stream);
    case GemmPath::kSm90Wgmma: return sm90_gemm_run(p, dev, path_ws, avail, stream);
    case GemmPath::kAuto: break;
  }
  return Status(StatusCode::kInvalidArgument, "gemm: unresolved path");
}

}  // namespace

Status normalize(const GemmDesc& d, GemmProblem* p) {
  BLUBLAS_CHECK_ARG(p != nullptr, "gemm: normalize: null problem");
  GemmProblem q;
  q.batch = d.batch;
  const Dtype b_type = d.b_type == kSameAsA ? d.ab_type : d.b_type;
  q.ab_type = d.layout == Layout::kRowMajor ? d.ab_type : b_type;  // A' and B' swap below
  q.b_type = d.layout == Layout::kRowMajor ? b_type : d.ab_type;
  q.cd_type = d.cd_type;
  q.scale_a = d.scale_a;
  q.scale_b = d.scale_b;
  q.amax = d.amax_d;
  q.max_ctas = d.max_ctas;
  q.compute = d.compute;
  if (d.ab_type == Dtype::kF32 && d.compute == ComputeMode::kDefault) {
    q.compute = ComputeMode::kStrictF32;
  }
  q.alpha = d.alpha;
  q.beta = d.beta;
  q.c = d.beta != 0.0f ? d.c : nullptr;
  q.ldc = d.ldc;
  q.stride_c = d.batch > 1 ? d.stride_c : 0;
  q.d = d.d;
  q.ldd = d.ldd;
  q.stride_d = d.batch > 1 ? d.stride_d : 0;
  q.bias = d.bias;
  q.aux = d.aux;
  q.ld_aux = d.ld_aux;
  q.stride_aux = d.batch > 1 ? d.stride_aux : 0;
  q.bias_grad = d.bias_grad;
  q.k = d.k;
  const int64_t sa = d.batch > 1 ? d.stride_a : 0;
  const int64_t sb = d.batch > 1 ? d.stride_b : 0;
  if (d.layout == Layout::kRowMajor) {
    // D = op(A) op(B) as stored: A' = op(A), B' = op(B).
    q.m = d.m;
    q.n = d.n;
    q.a = d.a; q.lda = d.lda; q.stride_a = sa; q.a_k_major = d.op_a == Op::kN;
    q.b = d.b; q.ldb = d.ldb; q.stride_b = sb; q.b_k_major = d.op_b == Op::kT;
    q.bias_per_col = true;
    q.epilogue = d.epilogue;
  } else {
    // Column-major D is the row-major D^T = op(B)^T op(A)^T: A' = op(B)^T, B' = op(A)^T.
    q.m = d.n;
    q.n = d.m;
    q.a = d.b; q.lda = d.ldb; q.stride_a = sb; q.a_k_major = d.op_b == Op::kN;
    q.b = d.a; q.ldb = d.lda; q.stride_b = sa; q.b_k_major = d.op_a == Op::kT;
    q.bias_per_col = false;
    q.epilogue = d.epilogue == Epilogue::kBiasGradA   ? Epilogue::kBiasGradB
                 : d.epilogue == Epilogue::kBiasGradB ? Epilogue::kBiasGradA
                                                      : d.epilogue;
  }
  *p = q;
  return Status::success();
}

}  // namespace gemm_detail

const char* gemm_path_name(GemmPath path) noexcept {
  switch (path) {
    case GemmPath::kAuto: return "auto";
    case GemmPath::kSimt: return "simt";
    case GemmPath::kSm80Mma: return "sm80_mma";
    case GemmPath::kSm90Wgmma: return "sm90_wgmma";
  }
  return "invalid";
}

Status gemm_selected_path(const GemmDesc& desc, GemmPath* path) {
  BLUBLAS_CHECK_ARG(path != nullptr, "gemm_selected_path: path is null");
  gemm_detail::Plan plan;
  DeviceInfo dev;
  BLUBLAS_RETURN_IF_ERROR(gemm_detail::prepare(desc, &plan, &dev));
  *path = plan.path;
  return Status::success();
}

Status gemm_workspace_size(const GemmDesc& desc, std::size_t* bytes) {
  BLUBLAS_CHECK_ARG(bytes != nullptr, "gemm_workspace_size: bytes is null");
  gemm_detail::Plan plan;
  DeviceInfo dev;
  BLUBLAS_RETURN_IF_ERROR(gemm_detail::prepare(desc, &plan, &dev));
  *bytes = plan.total_bytes;
  return Status::success();
}

Status gemm(const GemmDesc& desc, void* workspace, std::size_t workspace_bytes,
            cudaStream_t stream) {
  gemm_detail::Plan plan;
  DeviceInfo dev;
  BLUBLAS_RETURN_IF_ERROR(gemm_detail::prepare(desc, &plan, &dev));
  BLUBLAS_CHECK(workspace_bytes >= plan.total_bytes && (plan.total_bytes == 0 || workspace != nullptr),
                StatusCode::kWorkspaceTooSmall, gemm_detail::describe(desc), ": path ",
                gemm_path_name(plan.path), " needs ", plan.total_bytes, " workspace bytes, got ",
                workspace_bytes, workspace == nullptr ? " (null)" : "");
  const Status st = gemm_detail::execute(plan, dev, workspace, workspace_bytes, stream);
  if (!st.ok()) return Status(st.code(), gemm_detail::describe(desc) + ": " + st.message());
  return Status::success();
}

}  // namespace blublas

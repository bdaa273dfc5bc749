"""kernel_families.py: the kernel-family classifier and per-step breakdown shared by the e2e
harness (PyTorch's profiler trace) and mirrored in blutrain/src/common/kernel_trace.cpp (CUPTI).

Note [Kernel families]
A kernel belongs to the first family (in FAMILIES order) with a substring (case-insensitive) in
its name. The base name (the function name without return type, namespaces, template arguments
and parameters) is tried first, then the full demangled name: a GEMM whose epilogue template
argument says "Gelu" stays a GEMM (base "sm90_gemm_kernel"), while PyTorch's
"vectorized_elementwise_kernel<4, GeluCUDAKernelImpl...>" is GELU (found in the full name).
Within a pass, the specific families (attention ... adamw) come before gemm; elementwise/copy is
tried last, on the full name, after both passes. Keep this table identical to kFamilies in kernel_trace.cpp.
"""

FAMILIES = [
    ("attention", ("flash_attn", "flash_fwd", "flash_bwd", "fmha", "attention", "simt_attn", "attn_", "_attn",
                   "sdpa", "mem_eff")),
    ("layernorm", ("layer_norm", "layernorm", "ln_fwd", "ln_bwd", "gammabeta", "rms_norm")),
    ("gelu", ("gelu",)),
    ("softmax/xent", ("softmax", "xent", "cross_entropy", "nll_loss", "logsumexp", "classifier")),
    ("adamw", ("adam", "lpnorm", "grad_norm", "grad_sumsq", "clip", "optimizer")),
    ("gemm", ("gemm", "gemv", "nvjet", "xmma", "cutlass", "cublas", "simt_f32", "simt_generic", "split_reduce",
              "splitk", "triton_tem", "matmul", "wgmma", "bias_grad", "dot_kernel")),
    ("elementwise/copy", ("elementwise", "memcpy", "memset", "copy", "fill", "cast", "convert", "embedding",
                          "index", "add", "mul", "scale", "reduce", "triton_poi", "triton_red", "triton_per",
                          "cat", "transpose", "repack", "column_sum")),
]
FAMILY_NAMES = [f for f, _ in FAMILIES] + ["other"]


def base_name(name):
    """'void ns::foo_kernel<int, 4>(float*, int)' -> 'foo_kernel'."""
    s = name
    # Drop the parameter list and template arguments (balanced from the first '<' / '(').
    out, depth = [], 0
    for ch in s:
        if ch in "<(":
            depth += 1
        elif ch in ">)":
            depth = max(0, depth - 1)
        elif depth == 0:
            out.append(ch)
    s = "".join(out).strip()
    s = s.split(" ")[-1] if s else s   # drop the return type ("void ")
    return s.split("::")[-1]


def classify(name):
    lower = name.lower()
    for text in (base_name(name).lower(), lower):
        for fam, subs in FAMILIES[:-1]:
            if any(sub in text for sub in subs):
                return fam
    if any(sub in lower for sub in FAMILIES[-1][1]):
        return FAMILIES[-1][0]
    return "other"


def union_ms(intervals):
    """Total length of the union of [start, end) intervals (any time unit)."""
    total, cur_s, cur_e = 0.0, None, None
    for s, e in sorted(intervals):
        if cur_e is None or s > cur_e:
            if cur_e is not None:
                total += cur_e - cur_s
            cur_s, cur_e = s, e
        else:
            cur_e = max(cur_e, e)
    if cur_e is not None:
        total += cur_e - cur_s
    return total


def breakdown(records, step_wall_ms=None, top=20):
    """records: [(name, start_ms, end_ms)] of one step's kernels, memcpys and memsets.
    Returns the per-family JSON object (same keys as KernelTrace::to_json)."""
    fams = {f: {"ms": 0.0, "count": 0} for f in FAMILY_NAMES}
    per_kernel = {}
    for name, s, e in records:
        fam = classify(name)
        d = max(0.0, e - s)
        fams[fam]["ms"] += d
        fams[fam]["count"] += 1
        k = per_kernel.setdefault(name, {"name": name, "family": fam, "ms": 0.0, "count": 0})
        k["ms"] += d
        k["count"] += 1
    busy = union_ms([(s, e) for _, s, e in records])
    span = (max(e for _, _, e in records) - min(s for _, s, _ in records)) if records else 0.0
    out = {
        "launches": len(records),
        "kernel_sum_ms": sum(f["ms"] for f in fams.values()),
        "busy_ms": busy,
        "span_ms": span,
        "host_gap_ms": span - busy,
        "families": fams,
        "top": sorted(per_kernel.values(), key=lambda k: -k["ms"])[:top],
    }
    if step_wall_ms is not None:
        out["step_wall_ms"] = step_wall_ms
        out["wall_minus_busy_ms"] = step_wall_ms - busy
    return out


def profile_one_step(run_step, wall_ms_out):
    """Runs run_step() under torch.profiler (PyTorch imported here: the classifier needs none);
    returns [(name, start_ms, end_ms)] of its GPU work and appends the wall ms to wall_ms_out."""
    import json, os, tempfile, time
    import torch
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        run_step()
        torch.cuda.synchronize()
        wall_ms_out.append((time.perf_counter() - t0) * 1e3)
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "trace.json")
        prof.export_chrome_trace(path)
        trace = json.load(open(path))
    recs = []
    for e in trace.get("traceEvents", []):
        if e.get("ph") == "X" and e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset"):
            name = e.get("name", "?")
            if e["cat"] != "kernel" and not name.startswith("["):
                name = f"[{e['cat']}] {name}"
            recs.append((name, e["ts"] / 1e3, (e["ts"] + e.get("dur", 0)) / 1e3))
    return recs

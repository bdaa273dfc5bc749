#!/usr/bin/env python3
"""dist_report.py: the data-parallel race of scripts/device-dist.sh, from its run directories to
metrics and a table. Each run is RUNS/<tag>/ with an `rc` file (exit status) or a `skipped` file
(why it did not run):
  <mode>.1gpu, <mode>.2gpu                blutrain --engine fused, one GPU / --dp 2 (metrics.jsonl)
  <mode>.torch_ddp_<eager|compile>        torch_gpt2_train.py --ddp under torchrun, 2 ranks (torch.json)
  <mode>.torch_1gpu_<eager|compile>       the same program on one GPU (torch.json), optional
One timing rule for all (bench/e2e/run_e2e.py's): tok/s = global tokens per step / the median step
time after the first --warmup steps; blutrain's per-step tokens_per_s are global tokens / step time,
so their median after step `warmup` is the same number.

Writes OUT (the results contract: {"metrics": {...}} plus the slim run records) and prints the
table. The metrics (`<m>` a mode):
  dist.ddp.<m>.tok_s, .tok_s_2gpu          blutrain --dp 2, global tok/s
  dist.ddp.<m>.tok_s_1gpu                  blutrain on one GPU
  dist.ddp.<m>.peak_gib, .peak_gib_1gpu    blutrain's allocator peak (2 GPUs: the largest rank's)
  dist.ddp.<m>.torch_ddp_<v>.tok_s, .peak_gib, .warmup_s    PyTorch DDP, variant v = eager | compile
  dist.ddp.<m>.torch_1gpu_<v>.tok_s, .peak_gib              PyTorch on one GPU (when run)
and the derived ones (derive(), also called by scripts/make_summary.py over merged results):
  dist.ddp.<m>.scaling_2gpu                tok_s / tok_s_1gpu (goal >= 1.95)
  dist.ddp.<m>.torch_ddp_tok_s             the faster PyTorch DDP variant: the reference (only when
                                           both eager and compile were measured, as the next four)
  dist.ddp.<m>.torch_ddp_is_compile        1 when that is torch.compile, 0 eager
  dist.ddp.<m>.torch_ddp_peak_gib          that variant's peak
  dist.ddp.<m>.ratio_vs_torch_ddp          tok_s / torch_ddp_tok_s (goal > 1), and _eager / _compile
  dist.ddp.<m>.peak_ratio_vs_torch_ddp     peak_gib / torch_ddp_peak_gib
  dist.ddp.<m>.torch_scaling_2gpu_<v>      PyTorch's own 2-GPU scaling (when its one-GPU run exists)
  dist.ddp.<m>.meets_goal                  1 when scaling_2gpu >= 1.95 and ratio_vs_torch_ddp > 1
ZeRO runs (<m>.2gpu.autograd.zero<k>, BLU_DIST_ZERO; k = 0 is DDP on the same engine, the baseline):
  dist.zero<k>.<m>.tok_s, .peak_gib        global tok/s, the largest rank's allocator peak
  dist.zero<k>.<m>.state_gib               rank 0's allocated memory after the last step: weights,
                                           gradients and optimizer state (what ZeRO shards)
  dist.zero<k>.<m>.loss_rel_diff_vs_zero0  max relative loss difference against the DDP run
Communication (bludist Note [Communication timing]; medians after the warm-up, the largest rank's):
  dist.ddp.<m>.comm_ms, dist.zero<k>.<m>.comm_ms              the collectives' time a step
  dist.ddp.<m>.comm_exposed_ms, dist.zero<k>.<m>.comm_exposed_ms   of it, what compute waited for
  dist.ddp.<m>.comm_hidden, dist.zero<k>.<m>.comm_hidden      1 - exposed / comm (the overlap)
  (a graph-captured step's collectives are timed only with BLUDIST_COMM_TIMING_GRAPHS=1)
Usage: dist_report.py RUNS MODES OUT_JSON GPU_NAME [--warmup 5]"""
import argparse, json, os, re, statistics

VARIANTS = ("eager", "compile")
SCALING_GOAL = 1.95
ANCHORS = "PyTorch DDP anchors on 2x H200 (2026-11-21): fp32 108.5K, tf32 311.2K, bf16 713.4K, bf16 compile 884.4K tok/s"


def read_status(d):
    """(rc or None, skipped reason or None) of one run directory."""
    rc = skipped = None
    try:
        rc = int(open(os.path.join(d, "rc")).read().strip())
    except (OSError, ValueError):
        pass
    try:
        skipped = open(os.path.join(d, "skipped")).read().strip() or "skipped"
    except OSError:
        pass
    return rc, skipped


def blutrain_record(runs, tag, warmup):
    d = os.path.join(runs, tag)
    rc, skipped = read_status(d)
    r = {"framework": "blutrain", "rc": rc, "skipped": skipped, "tok_s": None, "peak_gib": None,
         "state_gib": None, "losses": [], "step_ms": [], "comm_ms": None, "comm_exposed_ms": None}
    rates, peak, comm, exposed = [], None, [], []
    try:
        for line in open(os.path.join(d, "metrics.jsonl")):
            try:
                j = json.loads(line)
            except ValueError:
                continue
            if j.get("event") != "train":
                continue
            r["losses"].append(j.get("loss"))
            r["step_ms"].append(j.get("step_ms"))
            if num(j.get("mem_allocated_gib")) and j["mem_allocated_gib"] > 0:
                r["state_gib"] = j["mem_allocated_gib"]  # the last step's
            p = j.get("rank_mem_gib") or j.get("mem_peak_gib")
            if p:
                peak = max(peak or 0.0, p)
            if j.get("step", 0) > warmup and j.get("tokens_per_s"):
                rates.append(j["tokens_per_s"])
            if j.get("step", 0) > warmup and num(j.get("comm_ms")):
                comm.append(j["comm_ms"])
                if num(j.get("comm_exposed_ms")):
                    exposed.append(j["comm_exposed_ms"])
    except OSError:
        pass
    try:
        r["env"] = open(os.path.join(d, "env")).read().strip()  # BLU_DIST_ENV runs: the setting
    except OSError:
        pass
    if rates:
        r["tok_s"] = statistics.median(rates)
    if comm:
        r["comm_ms"] = statistics.median(comm)
    if exposed:
        r["comm_exposed_ms"] = statistics.median(exposed)
    r["peak_gib"] = peak
    return r


def comm_metrics(metrics, prefix, r):
    """The run's communication metrics (see the module's docstring) under prefix."""
    if num(r.get("comm_ms")):
        metrics[prefix + "comm_ms"] = r["comm_ms"]
        if num(r.get("comm_exposed_ms")):
            metrics[prefix + "comm_exposed_ms"] = r["comm_exposed_ms"]
            if r["comm_ms"] > 0:
                metrics[prefix + "comm_hidden"] = 1.0 - r["comm_exposed_ms"] / r["comm_ms"]


def torch_record(runs, tag):
    d = os.path.join(runs, tag)
    rc, skipped = read_status(d)
    r = {"framework": "torch", "rc": rc, "skipped": skipped, "tok_s": None, "peak_gib": None}
    try:
        j = json.load(open(os.path.join(d, "torch.json")))
    except (OSError, ValueError):
        return r
    keep = ("framework", "mode", "world_size", "batch", "global_batch", "seq", "steps", "warmup", "tok_s",
            "tok_s_per_gpu", "median_step_ms", "peak_gib", "peak_gib_per_rank", "device_used_gib",
            "device_used_gib_per_rank", "warmup_s", "total_s", "losses", "step_ms", "ddp", "torch", "gpu")
    r.update({k: j[k] for k in keep if k in j})
    return r


def num(x):
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def modes_in(metrics):
    return sorted({m.group(1) for k in metrics for m in [re.match(r"dist\.ddp\.([^.]+)\.", k)] if m})


def derive(metrics):
    """Adds the derived dist.ddp.* metrics to `metrics` (in place) from the measured ones present."""
    def get(k):
        v = metrics.get(k)
        return v if num(v) and v > 0 else None
    for m in modes_in(metrics):
        p = f"dist.ddp.{m}."
        if get(p + "tok_s") is None and get(p + "tok_s_2gpu") is not None:
            metrics[p + "tok_s"] = metrics[p + "tok_s_2gpu"]
        ours, one = get(p + "tok_s"), get(p + "tok_s_1gpu")
        if ours and one:
            metrics[p + "scaling_2gpu"] = ours / one
        best = None
        for v in VARIANTS:
            t = get(f"{p}torch_ddp_{v}.tok_s")
            if t is None:
                continue
            if ours:
                metrics[f"{p}ratio_vs_torch_ddp_{v}"] = ours / t
            if best is None or t > best[1]:
                best = (v, t)
            t1 = get(f"{p}torch_1gpu_{v}.tok_s")
            if t1:
                metrics[f"{p}torch_scaling_2gpu_{v}"] = t / t1
        if best is None or any(get(f"{p}torch_ddp_{v}.tok_s") is None for v in VARIANTS):
            continue  # the reference is the faster of both variants: none without both
        v, t = best
        metrics[p + "torch_ddp_tok_s"] = t
        metrics[p + "torch_ddp_is_compile"] = 1 if v == "compile" else 0
        tp = get(f"{p}torch_ddp_{v}.peak_gib")
        if tp:
            metrics[p + "torch_ddp_peak_gib"] = tp
        if ours:
            metrics[p + "ratio_vs_torch_ddp"] = ours / t
            if get(p + "peak_gib") and tp:
                metrics[p + "peak_ratio_vs_torch_ddp"] = metrics[p + "peak_gib"] / tp
            sc = metrics.get(p + "scaling_2gpu")
            if num(sc):
                metrics[p + "meets_goal"] = 1 if sc >= SCALING_GOAL and ours > t else 0
    return metrics


def collect(runs, modes, warmup):
    """(metrics, records) from the run directories."""
    metrics, records = {}, {}
    for m in modes:
        p = f"dist.ddp.{m}."
        a = records[f"{m}.1gpu"] = blutrain_record(runs, f"{m}.1gpu", warmup)
        b = records[f"{m}.2gpu"] = blutrain_record(runs, f"{m}.2gpu", warmup)
        for k, v in ((p + "tok_s_1gpu", a["tok_s"]), (p + "tok_s_2gpu", b["tok_s"]), (p + "tok_s", b["tok_s"]),
                     (p + "peak_gib", b["peak_gib"]), (p + "peak_gib_1gpu", a["peak_gib"])):
            if num(v):
                metrics[k] = v
        comm_metrics(metrics, p, b)
        for kind in ("ddp", "1gpu"):
            for v in VARIANTS:
                tag = f"{m}.torch_{kind}_{v}"
                if not os.path.isdir(os.path.join(runs, tag)):
                    continue
                r = records[tag] = torch_record(runs, tag)
                for k in ("tok_s", "peak_gib", "warmup_s"):  # torch.json is written after the last step
                    if num(r.get(k)):
                        metrics[f"{p}torch_{kind}_{v}.{k}"] = r[k]
    # Extra blutrain runs: <mode>.2gpu.bucket<MB> (BLU_DIST_BUCKETS), <mode>.2gpu.nch<N>
    # (BLU_DIST_NCCL_CHANNELS), <mode>.2gpu.gather
    # (BLU_DIST_GATHER=1: --dp-embedding-grad gather, with its scaling over the one-GPU run).
    for tag in sorted(os.listdir(runs)) if os.path.isdir(runs) else []:
        mb = re.match(r"([^.]+)\.2gpu\.(bucket\d+|nch\d+|env\d+|gather)$", tag)
        if mb:
            r = records[tag] = blutrain_record(runs, tag, warmup)
            if num(r["tok_s"]):
                p = f"dist.ddp.{mb.group(1)}.{mb.group(2)}."
                metrics[p + "tok_s"] = r["tok_s"]
                comm_metrics(metrics, p, r)  # e.g. BLU_DIST_ENV=BLUDIST_COMM_TIMING_GRAPHS=1
                one = metrics.get(f"dist.ddp.{mb.group(1)}.tok_s_1gpu")
                if not mb.group(2).startswith("bucket") and num(one) and one > 0:
                    metrics[p + "scaling_2gpu"] = r["tok_s"] / one
    zero0 = {}  # mode -> the --zero 0 run's losses; "zero0" sorts before the stages compared with it
    for tag in sorted(os.listdir(runs)) if os.path.isdir(runs) else []:
        mz = re.match(r"([^.]+)\.2gpu\.autograd\.zero(\d)$", tag)
        if not mz:
            continue
        mode, stage = mz.groups()
        r = records[tag] = blutrain_record(runs, tag, warmup)
        p = f"dist.zero{stage}.{mode}."
        for k in ("tok_s", "peak_gib", "state_gib"):
            if num(r[k]):
                metrics[p + k] = r[k]
        comm_metrics(metrics, p, r)
        base = zero0.get(mode)
        if stage == "0":
            zero0[mode] = r["losses"]
        elif base and r["losses"] and len(base) == len(r["losses"]):
            metrics[p + "loss_rel_diff_vs_zero0"] = max(
                abs(a - b) / abs(b) for a, b in zip(r["losses"], base) if num(a) and num(b) and b != 0)
    return derive(metrics), records


def fmt(x, f):
    return (f % x) if num(x) else "n/a"


def status(r):
    if r is None:
        return "-"
    if r.get("skipped"):
        return "skip"
    return str(r.get("rc")) if r.get("rc") is not None else "?"


def table(metrics, records, modes):
    k = lambda m, s: metrics.get(f"dist.ddp.{m}.{s}")  # noqa: E731
    lines = [f"{'mode':<5} {'blu 1GPU':>9} {'blu 2GPU':>9} {'scaling':>8} {'torch DDP eager':>15} "
             f"{'compile':>9} {'vs faster':>9} {'peak GiB blu/torch':>18}  rc blu 1/2, torch e/c"]
    for m in modes:
        rec = lambda t: records.get(f"{m}.{t}")  # noqa: E731
        tp = k(m, "torch_ddp_peak_gib")
        lines.append(
            f"{m:<5} {fmt(k(m, 'tok_s_1gpu'), '%.0f'):>9} {fmt(k(m, 'tok_s'), '%.0f'):>9} "
            f"{fmt(k(m, 'scaling_2gpu'), '%.3fx'):>8} {fmt(k(m, 'torch_ddp_eager.tok_s'), '%.0f'):>15} "
            f"{fmt(k(m, 'torch_ddp_compile.tok_s'), '%.0f'):>9} {fmt(k(m, 'ratio_vs_torch_ddp'), '%.3fx'):>9} "
            f"{fmt(k(m, 'peak_gib'), '%.2f') + '/' + fmt(tp, '%.2f'):>18}  "
            f"{status(rec('1gpu'))}/{status(rec('2gpu'))}, "
            f"{status(rec('torch_ddp_eager'))}/{status(rec('torch_ddp_compile'))}")
    one = [(m, v) for m in modes for v in VARIANTS if num(k(m, f"torch_1gpu_{v}.tok_s"))]
    if one:
        lines.append("PyTorch on one GPU (tok/s, its own 2-GPU scaling): " + "; ".join(
            f"{m} {v} {k(m, f'torch_1gpu_{v}.tok_s'):.0f} ({fmt(k(m, f'torch_scaling_2gpu_{v}'), '%.3fx')})"
            for m, v in one))
    for tag, r in sorted(records.items()):
        if ".bucket" in tag or ".nch" in tag or ".env" in tag or tag.endswith(".gather"):
            setting = r.get("env")
            lines.append(f"{tag}{' (' + setting + ')' if setting else ''}: {fmt(r['tok_s'], '%.0f')} tok/s (rc {status(r)})")
    for tag, r in sorted(records.items()):
        mz = re.match(r"([^.]+)\.2gpu\.autograd\.zero(\d)$", tag)
        if mz:
            d = metrics.get(f"dist.zero{mz.group(2)}.{mz.group(1)}.loss_rel_diff_vs_zero0")
            lines.append(f"{mz.group(1)} --zero {mz.group(2)} (autograd engine): {fmt(r['tok_s'], '%.0f')} tok/s, "
                         f"peak {fmt(r['peak_gib'], '%.2f')} GiB, after the step {fmt(r['state_gib'], '%.2f')} GiB"
                         + (f", losses vs --zero 0: max rel diff {d:.2g}" if num(d) else "") + f" (rc {status(r)})")
    verdicts = [f"{m} {'MET' if k(m, 'meets_goal') == 1 else 'not met' if k(m, 'meets_goal') == 0 else 'n/a'}"
                for m in modes]
    lines.append(f"goal (>= {SCALING_GOAL}x one GPU and ahead of the faster PyTorch DDP): " + ", ".join(verdicts))
    lines.append(f"({ANCHORS})")
    return "\n".join(lines)


def parse_config(text):
    try:
        return json.loads(text) if text else {}
    except ValueError:
        return {"unparsed": text}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("runs")
    ap.add_argument("modes")
    ap.add_argument("out")
    ap.add_argument("gpu")
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--config", default="", help="JSON object of the call's settings, kept in OUT")
    a = ap.parse_args()
    modes = [m for m in a.modes.split(",") if m]
    metrics, records = collect(a.runs, modes, a.warmup)
    doc = {"gpu": a.gpu, "engine": "fused", "metrics": dict(sorted(metrics.items())),
           "config": parse_config(a.config), "runs": records}
    os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
    json.dump(doc, open(a.out, "w"), indent=1)
    print(table(metrics, records, modes))


if __name__ == "__main__":
    main()

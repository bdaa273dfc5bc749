"""e2e_report.py: the race's metrics, markdown table and PNG from the per-run records of run_e2e.py
(and the fidelity metrics of fidelity.py). Pure Python apart from matplotlib in write_png.

Note [Race metrics]
For a mode m, with runs keyed "<m>.<framework>" (framework: blutrain, torch_eager, torch_compile):
  e2e.m.tok_s, .peak_gib, .device_used_gib          blutrain's numbers
  e2e.m.<torch fw>.tok_s / .peak_gib / .device_used_gib / .median_step_ms / .warmup_s
  e2e.m.ratio_vs_<torch fw>        blutrain tok/s over that variant's (>1: blutrain faster)
  e2e.m.peak_ratio_vs_<torch fw>   blutrain peak over that variant's (<1: blutrain smaller)
  e2e.m.ratio_vs_torch_best, .peak_ratio_vs_torch_best   against the faster variant: the bar of
                                   issue 10 is ratio >= 1 and peak_ratio <= 1 there
  e2e.m.<fw>.error = 1             a run that failed or timed out (its log tail is in e2e.json)
Only numbers go under "metrics" (scripts/make_summary.py merges them into summary.json).
"""

TORCH = ("torch_eager", "torch_compile")
LABEL = {"blutrain": "blutrain", "torch_eager": "PyTorch eager", "torch_compile": "torch.compile"}


def _num(x):
    return isinstance(x, (int, float)) and not isinstance(x, bool) and x == x


def derive_metrics(runs, modes):
    m = {}
    for mode in modes:
        ours = runs.get(f"{mode}.blutrain", {})
        for fw in ("blutrain",) + TORCH:
            r = runs.get(f"{mode}.{fw}")
            if r is None:
                continue
            pre = f"e2e.{mode}." if fw == "blutrain" else f"e2e.{mode}.{fw}."
            if "error" in r:
                m[f"e2e.{mode}.{fw}.error"] = 1
                continue
            for k in ("tok_s", "peak_gib", "device_used_gib", "median_step_ms", "warmup_s"):
                if _num(r.get(k)):
                    m[pre + k] = float(r[k])
            if fw == "blutrain" and _num(r.get("launches_per_step")):
                m[pre + "launches_per_step"] = r["launches_per_step"]
        best = None
        for fw in TORCH:
            t = runs.get(f"{mode}.{fw}", {})
            if "error" in t or not _num(t.get("tok_s")):
                continue
            if best is None or t["tok_s"] > best["tok_s"]:
                best = t
            if "error" not in ours and _num(ours.get("tok_s")) and t["tok_s"] > 0:
                m[f"e2e.{mode}.ratio_vs_{fw}"] = ours["tok_s"] / t["tok_s"]
            if "error" not in ours and _num(ours.get("peak_gib")) and _num(t.get("peak_gib")) and t["peak_gib"] > 0:
                m[f"e2e.{mode}.peak_ratio_vs_{fw}"] = ours["peak_gib"] / t["peak_gib"]
            if "error" not in ours and _num(ours.get("device_used_gib")) and _num(t.get("device_used_gib")) \
                    and t["device_used_gib"] > 0:
                m[f"e2e.{mode}.device_used_ratio_vs_{fw}"] = ours["device_used_gib"] / t["device_used_gib"]
        if best is not None and "error" not in ours and _num(ours.get("tok_s")):
            m[f"e2e.{mode}.ratio_vs_torch_best"] = ours["tok_s"] / best["tok_s"]
            if _num(ours.get("peak_gib")) and _num(best.get("peak_gib")) and best["peak_gib"] > 0:
                m[f"e2e.{mode}.peak_ratio_vs_torch_best"] = ours["peak_gib"] / best["peak_gib"]
    return m


def _fmt_k(x):
    return f"{x / 1000:.1f}K" if _num(x) else "-"


def _fmt(x, spec=".2f"):
    return format(x, spec) if _num(x) else "-"


def table_md(runs, modes):
    fws = ("blutrain",) + TORCH
    head = ["mode"] + [f"{LABEL[f]} tok/s" for f in fws] + ["vs eager", "vs compile"] + \
        [f"{LABEL[f]} peak GiB" for f in fws] + [f"{LABEL[f]} used GiB" for f in fws]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    met = derive_metrics(runs, modes)
    for mode in modes:
        def cell(fw, key, f):
            r = runs.get(f"{mode}.{fw}")
            if r is None:
                return "n/a"
            if "error" in r:
                return "ERROR"
            return f(r.get(key))
        row = [mode] + [cell(f, "tok_s", _fmt_k) for f in fws]
        row += [_fmt(met.get(f"e2e.{mode}.ratio_vs_{f}"), ".3f") + "x" if _num(met.get(f"e2e.{mode}.ratio_vs_{f}"))
                else "-" for f in TORCH]
        row += [cell(f, "peak_gib", _fmt) for f in fws] + [cell(f, "device_used_gib", _fmt) for f in fws]
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines)


def write_md(path, runs, modes, config):
    c = config
    md = [f"# GPT-2 {c.get('model', 'd12')} end to end: blutrain vs PyTorch ({c.get('gpu', '?')})", "",
          f"B{c.get('batch')} T{c.get('seq')}, {c.get('steps')} steps, median step after {c.get('timed_after_warmup')} "
          f"warm-up steps (torch.compile's compile time excluded: see warmup_s in e2e.json), data {c.get('data')}, "
          f"AdamW lr 6e-4 (warm-up {c.get('lr_warmup_steps')}, cosine to 0.1x), wd 0.1 on 2-D weights, clip 1.0. "
          "peak = allocator peak; used = device memory in use by the process (total - free).", "",
          table_md(runs, modes), ""]
    errs = [(k, r["error"]) for k, r in runs.items() if "error" in r]
    if errs:
        last = lambda e: ([ln for ln in e.strip().splitlines() if ln.strip()] or [""])[-1][:300]  # noqa: E731
        md += ["Errors (last log line; the tail is in e2e.json):", ""] + [f"- {k}: {e[:12]} {last(e)}" for k, e in errs] + [""]
    profs = [(k, _trace(r["profile"])) for k, r in runs.items() if isinstance(r.get("profile"), dict)]
    profs = [(k, p) for k, p in profs if isinstance(p.get("families"), dict)]
    if profs:
        md += [profile_md(profs), ""]
    text = "\n".join(md)
    open(path, "w").write(text)
    return text


def _trace(profile):
    kt = profile.get("kernel_trace")  # blutrain nests the CUPTI breakdown (next to its op timing)
    return kt if isinstance(kt, dict) else profile


def profile_md(profs):
    """Kernel-family breakdown of the profiled step: ms (launches) per family and run."""
    fams = []
    for _, p in profs:
        for f in p.get("families", {}):
            if f not in fams:
                fams.append(f)
    head = ["run", "step wall ms", "busy ms", "host gap ms"] + fams
    lines = ["Per-kernel-family time of one step, ms (launches):", "",
             "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for k, p in profs:
        row = [k, _fmt(p.get("step_wall_ms"), ".1f"), _fmt(p.get("busy_ms"), ".1f"), _fmt(p.get("host_gap_ms"), ".1f")]
        for f in fams:
            d = p.get("families", {}).get(f, {})
            row.append(f"{d.get('ms', 0):.1f} ({d.get('count', 0)})")
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines)


def write_png(path, runs, modes, config):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fws = ("blutrain",) + TORCH
    colors = {"blutrain": "#d62728", "torch_eager": "#1f77b4", "torch_compile": "#2ca02c"}
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5))
    w = 0.8 / len(fws)
    for ax, key, ylabel in ((axes[0], "tok_s", "tokens / s (thousands)"), (axes[1], "peak_gib", "peak GiB")):
        for i, fw in enumerate(fws):
            xs, ys, labels = [], [], []
            for j, mode in enumerate(modes):
                r = runs.get(f"{mode}.{fw}", {})
                v = r.get(key) if "error" not in r else None
                xs.append(j + (i - (len(fws) - 1) / 2) * w)
                ys.append((v / 1000 if key == "tok_s" else v) if _num(v) else 0)
                labels.append("error" if "error" in r else "n/a" if not _num(v) else
                              f"{ys[-1]:.0f}" if key == "tok_s" else f"{ys[-1]:.1f}")
            bars = ax.bar(xs, ys, w, label=LABEL[fw], color=colors[fw])
            for b, y, t in zip(bars, ys, labels):
                ax.annotate(t, (b.get_x() + b.get_width() / 2, y), ha="center", va="bottom", fontsize=7)
        ax.set_xticks(range(len(modes)))
        ax.set_xticklabels(modes)
        ax.set_ylabel(ylabel)
        ax.grid(axis="y", alpha=0.3)
    axes[0].legend(fontsize=8)
    c = config
    fig.suptitle(f"GPT-2 {c.get('model', 'd12')} training, {c.get('gpu', '?')}: B{c.get('batch')} T{c.get('seq')}, "
                 f"median of steps after {c.get('timed_after_warmup')}, AdamW")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)

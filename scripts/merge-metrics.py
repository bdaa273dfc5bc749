#!/usr/bin/env python3
"""merge-metrics.py: merges the numeric "metrics" of a benchmark's own JSON (gemm_bench.json,
largest_model.json, ...) into bench/results/<gpu>/summary.json when the run did not go through
device-check.sh (a carried binary, a device-scale.sh case). Each merged metric records the commit
it was measured at in metric_commits, as import-device-results.sh does for carried-over metrics,
so nothing is presented as measured at the summary's own commit.
  scripts/merge-metrics.py bench/results/h200/summary.json RUN.json COMMIT [--prefix gemm.]
"""
import argparse, json


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("summary")
    ap.add_argument("run_json")
    ap.add_argument("commit")
    ap.add_argument("--prefix", default="", help="merge only metrics whose name starts with this")
    a = ap.parse_args()
    summary = json.load(open(a.summary))
    run = json.load(open(a.run_json))
    metrics = summary.setdefault("metrics", {})
    commits = summary.setdefault("metric_commits", {})
    n = 0
    for k, v in run.get("metrics", {}).items():
        if not k.startswith(a.prefix) or isinstance(v, bool) or not isinstance(v, (int, float)):
            continue
        metrics[k] = v
        if a.commit != summary.get("commit"):
            commits[k] = a.commit
        else:
            commits.pop(k, None)
        n += 1
    summary["metrics"] = dict(sorted(metrics.items()))
    summary["metric_commits"] = dict(sorted(commits.items()))
    json.dump(summary, open(a.summary, "w"), indent=1)
    print(f"merged {n} metrics at {a.commit[:12]} into {a.summary}")


if __name__ == "__main__":
    main()

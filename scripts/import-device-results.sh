#!/usr/bin/env bash
# Unpacks what a device-check or device-dist run brought back (summary.json + device-results.tar.gz
# or dist-results.tar.gz under the device tool's files_at folder) into bench/results/<gpu>/:
# summary.json, the raw JSON of every benchmark, and a short markdown table (summary.md).
# Usage: import-device-results.sh <dir> <gpu-tag>   (BLU_RESULTS_ROOT replaces bench/results)
set -euo pipefail
src=$(cd "$1" && pwd); tag=$2
cd "$(dirname "$0")/.."
dst=${BLU_RESULTS_ROOT:-bench/results}/$tag
tarball=$src/device-results.tar.gz
[ -f "$tarball" ] || tarball=$src/dist-results.tar.gz
mkdir -p "$dst/raw"
tmp=$(mktemp -d)
tar -C "$tmp" -xzf "$tarball"
# A suite measures only part of the metrics: merge over the committed summary, keeping for each
# carried-over metric the commit it was measured at (metric_commits), so nothing is presented as
# measured at a commit where it was not.
python3 - "$src/summary.json" "$dst/summary.json" <<'PY'
import json, os, sys
new = json.load(open(sys.argv[1]))
old = json.load(open(sys.argv[2])) if os.path.exists(sys.argv[2]) else {"metrics": {}}
carried = dict(old.get("metric_commits", {}))
for k in old.get("metrics", {}):
    if k not in new["metrics"]:
        carried.setdefault(k, old.get("commit"))
for k in new["metrics"]:
    carried.pop(k, None)
merged = dict(new)
merged["metrics"] = dict(sorted({**{k: v for k, v in old.get("metrics", {}).items() if k in carried},
                                 **new["metrics"]}.items()))
merged["metric_commits"] = dict(sorted(carried.items()))
json.dump(merged, open(sys.argv[2], "w"), indent=1)
PY
for f in "$tmp"/logs/results/*.json; do
  [ -f "$f" ] && cp "$f" "$dst/raw/$(basename "$f")"
done
{
  echo "# Device results: $tag"
  echo
  python3 - "$dst/summary.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
print(f"GPU: {d['gpu']}  \nCommit: {d['commit']}{' (dirty tree: provisional)' if d.get('dirty') else ''}  \nDate: {d['date']}  \nSuite: {d.get('suite','')}\n")
print("| metric | value |\n|---|---|")
for k, v in d["metrics"].items():
    print(f"| `{k}` | {v:.4g} |")
PY
  echo
  echo '```'
  cat "$tmp/logs/summary_table.txt" 2>/dev/null | tail -60
  echo '```'
} > "$dst/summary.md"
rm -rf "$tmp"
echo "imported into $dst"

#!/usr/bin/env bash
# Unpacks what a device-check run brought back (summary.json + device-results.tar.gz under the
# device tool's files_at folder) into bench/results/<gpu>/: summary.json, the raw JSON of every
# benchmark, and a short markdown table (summary.md). Usage: import-device-results.sh <dir> <gpu-tag>
set -euo pipefail
src=$1; tag=$2
cd "$(dirname "$0")/.."
dst=bench/results/$tag
mkdir -p "$dst/raw"
tmp=$(mktemp -d)
tar -C "$tmp" -xzf "$src/device-results.tar.gz"
cp "$src/summary.json" "$dst/summary.json"
cp "$tmp"/logs/results/*.json "$dst/raw/" 2>/dev/null || true
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

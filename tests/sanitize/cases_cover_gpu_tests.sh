#!/usr/bin/env bash
# cases_cover_gpu_tests.sh <source root>: every GPU test binary (tests/<lib>/*_gpu_test.{cpp,cu},
# built as <lib>_<name>) has a line in tests/sanitize/cases.txt, so device-sanitize.sh runs it
# (issue 14: every GPU test under compute-sanitizer). Lists the missing ones and fails.
set -euo pipefail
root=${1:?source root}
listed=$(grep -vE '^\s*(#|$)' "$root/tests/sanitize/cases.txt" | awk '{print $1}' | sort -u)
missing=0
for f in "$root"/tests/*/*_gpu_test.cpp "$root"/tests/*/*_gpu_test.cu; do
  [ -e "$f" ] || continue
  lib=$(basename "$(dirname "$f")"); name=$(basename "${f%.*}")
  if ! grep -qx "${lib}_${name}" <<< "$listed"; then
    echo "tests/sanitize/cases.txt has no line for ${lib}_${name} ($f)"
    missing=1
  fi
done
exit $missing

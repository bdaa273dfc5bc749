#!/usr/bin/env bash
# Runs the `// RUN:` lines of one blucomp test file, the way LLVM's lit does (lit itself is not
# packaged with Debian's LLVM): %s is the file, %t a fresh scratch directory for this test; each
# line runs under `bash -o pipefail`, so any failing command in a pipe fails the test. The tools
# (blu-opt, blu-ptx, FileCheck, not, ptxas) come from PATH, which ctest sets (filecheck.cmake).
set -euo pipefail
file=$1
scratch=$2
rm -rf "$scratch"
mkdir -p "$scratch"
mapfile -t runs < <(sed -n 's|^// RUN: *||p' "$file")
if [ ${#runs[@]} -eq 0 ]; then
  echo "no RUN lines in $file" >&2
  exit 1
fi
for run in "${runs[@]}"; do
  cmd=${run//%s/$file}
  cmd=${cmd//%t/$scratch}
  echo "RUN: $cmd"
  if ! bash -o pipefail -c "$cmd"; then
    echo "FAILED: $cmd" >&2
    exit 1
  fi
done

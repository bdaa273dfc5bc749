#!/usr/bin/env bash
# initcheck-sites.sh: compute-sanitizer initcheck over one GPU test binary with every report
# printed but never stored: counts the reports per (access site <= kernel) and prints the top 40
# (the full text of 1M+ reports would be gigabytes). For issue 14's open fused_step initcheck.
#   scripts/initcheck-sites.sh <test binary> <gtest filter> [timeout_s]
set -uo pipefail
bin=$1; filter=$2; limit=${3:-300}
timeout -k 10 "$limit" compute-sanitizer --tool initcheck --print-limit 100000000 "$bin" --gtest_filter="$filter" 2>&1 |
  awk '
    /Uninitialized __global__ memory read/ { inrep = 1; site = ""; kern = ""; next }
    inrep && /^=========     at / { s = $0; sub(/^=========     at /, "", s); sub(/\+0x[0-9a-f]+/, "", s); site = s; next }
    inrep && /Device Frame:/ { k = $0; sub(/.*Device Frame: /, "", k); sub(/\+0x[0-9a-f]+.*/, "", k); kern = k; next }
    inrep && /^=========[ ]*$/ { cnt[site " <= " kern]++; total++; inrep = 0; next }
    /ERROR SUMMARY|PASSED|FAILED|\[ RUN|OK \]/ { print }
    END { print "reports counted: " total; for (x in cnt) print cnt[x] "\t" x }' |
  sort -t$'\t' -k1,1 -rn | head -60

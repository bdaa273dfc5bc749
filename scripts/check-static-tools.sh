#!/usr/bin/env bash
# check-static-tools.sh [gz dir]: fails unless the static blucomp tools (scripts/blucomp-static.sh)
# were built from the blucomp sources committed now (include, src, tools: not the runtime), with nothing in it uncommitted then or now. Run it
# before carrying <gz>/blu-plan.gz to the device: a stale blu-plan rejected session 16's record.
set -euo pipefail
cd "$(dirname "$0")/.."
gz=${1:-build-static/blucomp-static/gz}
BLUCOMP_TOOL_SOURCES="blucomp/include blucomp/src blucomp/tools blucomp/CMakeLists.txt"  # as blucomp-static.sh
[ -f "$gz/blucomp-tree.txt" ] || { echo "check-static-tools: $gz/blucomp-tree.txt missing: rebuild with scripts/blucomp-static.sh"; exit 1; }
read -r built dirty_then < "$gz/blucomp-tree.txt"
now=$(git ls-tree -r HEAD $BLUCOMP_TOOL_SOURCES | sha1sum | cut -c1-40)
dirty_now=$(git status --porcelain -- $BLUCOMP_TOOL_SOURCES | wc -l)
if [ "$built" != "$now" ] || [ "$dirty_then" != 0 ] || [ "$dirty_now" != 0 ]; then
  echo "check-static-tools: the static tools are stale (built from blucomp tree $built, $dirty_then uncommitted;" \
       "now $now, $dirty_now uncommitted): run scripts/blucomp-static.sh"
  exit 1
fi
echo "check-static-tools: $gz matches blucomp/ at $now"

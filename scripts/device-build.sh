# device-build.sh (sourced by the device scripts): what they share. Sourcing sets PATH to the CUDA
# toolkit first and BLU_REQUIRE_GPU=1 (a GPU test that cannot see the GPU fails instead of skipping),
# and starts the clock of stamp ("[<seconds since sourcing>s] message").
#   blu_device_build <build-dir> <log-dir> <target>...: the sm_90a Release configure + build.
# Configures with Ninja, sm_90a only, warnings not fatal (a newer toolkit's warning must not cost
# a device call), then builds the targets with every core (-k 0: the others still build when one
# fails), under BLU_BUILD_TIMEOUT seconds (default 330). Logs: <log-dir>/configure.txt, build.txt.
# Returns the build's exit status; prints the first error lines.
# A build directory holding .carried (scripts/pack-carry.sh --unpack: binaries built on the
# developer machine and carried) is not configured or built: the targets it lacks are reported.
blu_device_build() {
  local build=$1 logs=$2 rc
  shift 2
  if [ -f "$build/.carried" ]; then
    echo "carried build $build: not building $*" > "$logs/build.txt"
    for t in "$@"; do
      find "$build" -name "$t" -type f | grep -q . || echo "carried build $build has no $t" | tee -a "$logs/build.txt"
    done
    return 0
  fi
  cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DBLU_CUDA_ARCHS=90a-real \
    -DBLU_WARNINGS_AS_ERRORS=OFF > "$logs/configure.txt" 2>&1
  timeout "${BLU_BUILD_TIMEOUT:-330}" cmake --build "$build" -j "$(nproc)" --target "$@" -- -k 0 \
    > "$logs/build.txt" 2>&1
  rc=$?
  grep -E "error|FAILED" "$logs/build.txt" | head -10
  return $rc
}

export PATH=/usr/local/cuda/bin:$PATH BLU_REQUIRE_GPU=1
blu_t0=$(date +%s)
stamp() { echo "[$(( $(date +%s) - blu_t0 ))s] $*"; }

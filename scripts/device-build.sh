# device-build.sh (sourced by the device scripts): what they share. Sourcing sets PATH to the CUDA
# toolkit first and BLU_REQUIRE_GPU=1 (a GPU test that cannot see the GPU fails instead of skipping),
# and starts the clock of stamp ("[<seconds since sourcing>s] message").
#   blu_device_build <build-dir> <log-dir> <target>...: the sm_90a Release configure + build.
# Configures with Ninja, sm_90a only, warnings not fatal (a newer toolkit's warning must not cost
# a device call), then builds the targets with every core (-k 0: the others still build when one
# fails), under BLU_BUILD_TIMEOUT seconds (default 330). Logs: <log-dir>/configure.txt, build.txt.
# Returns the build's exit status; prints the first error lines.
blu_device_build() {
  local build=$1 logs=$2 rc
  shift 2
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

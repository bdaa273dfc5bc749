#!/usr/bin/env bash
# pack-carry.sh: ships binaries built here to the device machine instead of building them there
# (~200 s of a device call). Strips and gzips each named build output into build-carry/ (git
# ignores /build*/), which the device tool's `carry` brings along (64 MiB in all); the device
# side unpacks them with `scripts/pack-carry.sh --unpack` into build-carry/bin and sets
# LD_LIBRARY_PATH for cuBLAS. Build here with -DBLU_CUDA_ARCHS=90a-real (no embedded PTX: smaller
# binaries, and the device is sm_90): cmake -S . -B build-sm90 -G Ninja -DCMAKE_BUILD_TYPE=Release
# -DBLU_CUDA_ARCHS=90a-real -DBLU_WARNINGS_AS_ERRORS=OFF -DBLU_SHARED_BLUBLAS=ON && cmake --build
# build-sm90 --target ...   With BLU_SHARED_BLUBLAS=ON (Note [Shared blublas for carrying]) the
# kernels live in libblublas.so, packed once (~25 MiB) whichever binaries need it (a library of the
# build tree that a binary needs is added by itself), so one carry holds the trainer, GPU tests and
# benchmarks; a static build's binaries carry every kernel each (gemm_bench 27 MiB, blutrain 37).
#   scripts/pack-carry.sh <build-dir> <relative output path>... [/absolute/lib.so...]
#       e.g. build-sm90 bench/gemm_bench, or build-sm90 blutrain/blutrain /lib/libgloo.so.0 ...
#   eval "$(scripts/pack-carry.sh --unpack)"                         (on the device)
# Unpacking rebuilds the build tree's layout under build-carry/tree (bench/gemm_bench, tests/...,
# blutrain/blutrain; each also in build-carry/bin) with a .carried marker, so the device scripts
# run on it as their build directory without building (blu_device_build in device-build.sh skips
# a carried tree): e.g. `scripts/device-simt-sweep.sh build-carry/tree "default l88"`.
# The shared libraries each binary needs are listed at packing: the device has the CUDA toolkit
# (cuBLAS, NCCL, CUPTI), OpenBLAS, libpng and Python, not every Debian package of this machine (no
# Gloo: blutrain built here needs libgloo.so.0, libhiredis.so.0.14, libibverbs.so.1,
# libnl-3.so.200 and libnl-route-3.so.200 carried too). An absolute path is such a library: it is
# packed as lib-<name>.gz and unpacked into build-carry/lib, which LD_LIBRARY_PATH then holds.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "${1:-}" = --unpack ]; then
  mkdir -p build-carry/bin build-carry/lib build-carry/tree
  touch build-carry/tree/.carried
  for f in build-carry/*.gz; do
    name=$(basename "$f" .gz)
    case $name in
      lib-*) gunzip -c "$f" > "build-carry/lib/${name#lib-}" ;;
      *)
        rel=${name//@//}  # the path in the build tree ('@' for '/')
        mkdir -p "build-carry/tree/$(dirname "$rel")"
        gunzip -c "$f" > "build-carry/tree/$rel" && chmod +x "build-carry/tree/$rel"
        ln -sf "$PWD/build-carry/tree/$rel" "build-carry/bin/$(basename "$rel")" ;;
    esac
  done
  echo "export LD_LIBRARY_PATH=$PWD/build-carry/lib:/usr/local/cuda/lib64:/usr/local/cuda/lib:\${LD_LIBRARY_PATH:-}"
  exit 0
fi
build=$1; shift
mkdir -p build-carry
rm -f build-carry/*.gz
for rel in "$@"; do
  if [ "${rel:0:1}" = / ]; then  # a shared library the device lacks
    gzip -9 -c "$(readlink -f "$rel")" > "build-carry/lib-$(basename "$rel").gz"
    continue
  fi
  tmp=$(mktemp)
  cp "$build/$rel" "$tmp" && strip "$tmp"
  gzip -9 -c "$tmp" > "build-carry/${rel//\//@}.gz"
  rm -f "$tmp"
  echo "$rel needs: $(ldd "$build/$rel" | awk '$3 ~ /^\// {print $1}' | grep -vE '^(libc|libm|libgcc_s|libstdc\+\+|libpthread|libdl|librt)\.' | tr '\n' ' ')"
  # Shared libraries of the build tree itself (libblublas.so with BLU_SHARED_BLUBLAS=ON): packed
  # once, under the name the binary asks for (its SONAME).
  build_abs=$(cd "$build" && pwd)
  ldd "$build/$rel" | awk -v b="$build_abs/" 'index($3, b) == 1 {print $1, $3}' | while read -r soname path; do
    [ -f "build-carry/lib-$soname.gz" ] || { strip -o "build-carry/.tmp-$soname" "$path" &&
      gzip -9 -c "build-carry/.tmp-$soname" > "build-carry/lib-$soname.gz"; rm -f "build-carry/.tmp-$soname"; }
  done
done
total=$(du -cb build-carry/*.gz | tail -1 | cut -f1)
ls -la build-carry/*.gz
echo "total $((total / 1048576)) MiB (carry limit 64 MiB)"
((total < 64 * 1048576)) || { echo "pack-carry: over the carry limit" >&2; exit 1; }

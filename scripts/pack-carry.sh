#!/usr/bin/env bash
# pack-carry.sh: ships binaries built here to the device machine instead of building them there
# (~200 s of a device call). Strips and xz-compresses each named build output into build-carry/ (git
# ignores /build*/), which the device tool's `carry` brings along (64 MiB in all); the device
# side unpacks them with `scripts/pack-carry.sh --unpack` into build-carry/bin and sets
# LD_LIBRARY_PATH for cuBLAS. Build here with -DBLU_CUDA_ARCHS=90a-real (no embedded PTX: smaller
# binaries, and the device is sm_90): cmake -S . -B build-sm90 -G Ninja -DCMAKE_BUILD_TYPE=Release
# -DBLU_CUDA_ARCHS=90a-real -DBLU_WARNINGS_AS_ERRORS=OFF -DBLU_SHARED_BLUBLAS=ON && cmake --build
# build-sm90 --target ...   With BLU_SHARED_BLUBLAS=ON (Note [Shared blublas for carrying]) the
# kernels live in libblublas.so, packed once (16 MiB as xz) whichever binaries need it (a library of the
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
# packed as lib-<name>.xz and unpacked into build-carry/lib, which LD_LIBRARY_PATH then holds.
# bin:/absolute/path is a program built elsewhere (scripts/blucomp-static.sh's blu-plan): unpacked
# into build-carry/bin. xz -9 halves gzip's size on these binaries (libblublas.so 34 -> 16 MiB,
# blu-plan 27 -> 17 MiB); compressed files are cached in build-carry-cache/ by path, size and mtime.
# The device unpacks with xz, or Python's lzma where xz is missing.
set -euo pipefail
cd "$(dirname "$0")/.."
unxz_to() {  # unxz_to <file.xz> <out>
  if command -v xz >/dev/null 2>&1; then xz -dc "$1" > "$2"
  else python3 -c 'import lzma, shutil, sys; shutil.copyfileobj(lzma.open(sys.argv[1]), open(sys.argv[2], "wb"))' "$1" "$2"; fi
}
if [ "${1:-}" = --unpack ]; then
  mkdir -p build-carry/bin build-carry/lib build-carry/tree
  touch build-carry/tree/.carried
  for f in build-carry/*.xz; do
    [ -e "$f" ] || continue
    name=$(basename "$f" .xz)
    case $name in
      lib-*) unxz_to "$f" "build-carry/lib/${name#lib-}" ;;
      bin-*) unxz_to "$f" "build-carry/bin/${name#bin-}" && chmod +x "build-carry/bin/${name#bin-}" ;;
      *)
        rel=${name//@//}  # the path in the build tree ('@' for '/')
        mkdir -p "build-carry/tree/$(dirname "$rel")"
        unxz_to "$f" "build-carry/tree/$rel" && chmod +x "build-carry/tree/$rel"
        ln -sf "$PWD/build-carry/tree/$rel" "build-carry/bin/$(basename "$rel")" ;;
    esac
  done
  echo "export LD_LIBRARY_PATH=$PWD/build-carry/lib:/usr/local/cuda/lib64:/usr/local/cuda/lib:\${LD_LIBRARY_PATH:-}"
  exit 0
fi
build=$1; shift
mkdir -p build-carry build-carry-cache
rm -f build-carry/*.gz build-carry/*.xz
# pack <source file> <name in build-carry> <strip 0/1>: xz through the cache.
pack() {
  local src key cached
  src=$(readlink -f "$1")
  key=$(echo "$src $(stat -c '%s %Y' "$src") $3" | md5sum | cut -c1-16)
  cached=build-carry-cache/$key.xz
  if [ ! -f "$cached" ]; then
    if [ "$3" = 1 ]; then strip -o "$cached.in" "$src"; else cp "$src" "$cached.in"; fi
    xz -9 -T2 -c "$cached.in" > "$cached.tmp" && mv "$cached.tmp" "$cached"; rm -f "$cached.in"
  fi
  cp "$cached" "build-carry/$2.xz"
}
for rel in "$@"; do
  case $rel in
    bin:*) pack "${rel#bin:}" "bin-$(basename "${rel#bin:}")" 0; continue ;;
    /*) pack "$rel" "lib-$(basename "$rel")" 0; continue ;;  # a shared library the device lacks
  esac
  pack "$build/$rel" "${rel//\//@}" 1
  deps=$(ldd "$build/$rel")
  echo "$rel needs: $(echo "$deps" | awk '$3 ~ /^\// {print $1}' | grep -vE '^(libc|libm|libgcc_s|libstdc\+\+|libpthread|libdl|librt)\.' | tr '\n' ' ')"
  # Shared libraries of the build tree itself (libblublas.so with BLU_SHARED_BLUBLAS=ON): packed
  # once, under the name the binary asks for (its SONAME).
  build_abs=$(cd "$build" && pwd)
  echo "$deps" | awk -v b="$build_abs/" 'index($3, b) == 1 {print $1, $3}' | while read -r soname path; do
    [ -f "build-carry/lib-$soname.xz" ] || pack "$path" "lib-$soname" 1
  done
done
total=$(du -cb build-carry/*.xz | tail -1 | cut -f1)
ls -la build-carry/*.xz
echo "total $((total / 1048576)) MiB (carry limit 64 MiB)"
((total < 64 * 1048576)) || { echo "pack-carry: over the carry limit" >&2; exit 1; }

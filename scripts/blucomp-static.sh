#!/usr/bin/env bash
# blucomp-static.sh: self-contained blu-opt, blu-ptx, blu-import and blu-plan for the device machine, which has
# no MLIR (blucomp/README.md, Note [Deployment]): MLIR's and LLVM's component archives, static
# libstdc++/libgcc/zlib/zstd; the binaries need only libc and libm.
#   scripts/blucomp-static.sh [out-dir]       default build-static/blucomp-static
# Debian's MLIR CMake targets link the LLVM shared library even with BLUCOMP_LINK_STATIC=ON (their
# interface names the `LLVM` dylib target), so this builds the tools that way and then links each
# again from the same objects and MLIR archives, with LLVM's archives (llvm-config --link-static)
# in place of libLLVM.so. Measured 2026-11-26: blu-ptx 87 MB stripped, 26 MB gzipped, 6 s per link
# on 2 cores. The carry limit is 64 MiB: carry only what the device needs from <out>/gz (blu-plan.gz
# for device-check's compiled-step run: BLU_STATIC_TOOLS=<that folder>). Needs libzstd-dev and zlib1g-dev
# (their static archives).
set -euo pipefail
SRC="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="${BLU_STATIC_BUILD:-$SRC/build-static}"
OUT="${1:-$BUILD/blucomp-static}"
LLVM_CONFIG="${LLVM_CONFIG:-llvm-config-19}"
for a in libzstd.a libz.a; do
  [ -e "/usr/lib/x86_64-linux-gnu/$a" ] || { echo "blucomp-static.sh: needs $a (apt-get install libzstd-dev zlib1g-dev)"; exit 1; }
done
mkdir -p "$BUILD"
cmake -S "$SRC" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DBLU_WITH_CUDA=OFF -DBLUCOMP_LINK_STATIC=ON \
  -DBLU_BUILD_TESTS=OFF -DBLU_BUILD_BENCH=OFF > "$BUILD/blucomp-static.configure.log" 2>&1 || { cat "$BUILD/blucomp-static.configure.log"; exit 1; }
ninja -C "$BUILD" blu-opt blu-ptx blu-import blu-plan
mkdir -p "$OUT"
libdir=$("$LLVM_CONFIG" --libdir)
# Every LLVM component but Polly (not shipped as an archive) and WindowsManifest (needs libxml2).
llvm_libs=$("$LLVM_CONFIG" --link-static --libs all | tr ' ' '\n' | grep -v -E 'Polly|WindowsManifest' | tr '\n' ' ')
for tool in blu-opt blu-ptx blu-import blu-plan; do
  cmd=$(ninja -C "$BUILD" -t commands "blucomp/$tool" | tail -1)
  inputs=$(echo "$cmd" | tr ' ' '\n' | grep -E '\.(o|a)$' | sed "s|^blucomp/|$BUILD/blucomp/|" | tr '\n' ' ')
  archives=$(echo "$inputs" | tr ' ' '\n' | grep '\.a$' | tr '\n' ' ')
  objects=$(echo "$inputs" | tr ' ' '\n' | grep '\.o$' | tr '\n' ' ')
  # shellcheck disable=SC2086
  c++ -O3 -static-libstdc++ -static-libgcc -Wl,--gc-sections -o "$OUT/$tool" $objects -L"$libdir" \
    -Wl,--start-group $archives $llvm_libs -Wl,--end-group -Wl,-Bstatic -lz -lzstd -Wl,-Bdynamic -lrt -ldl -lm -lpthread \
    2> >(grep -v 'warning' >&2)
  strip "$OUT/$tool"
  if ldd "$OUT/$tool" | grep -q -E 'libLLVM|libMLIR|libstdc'; then
    echo "blucomp-static.sh: $tool still links a shared LLVM/MLIR/libstdc++:"; ldd "$OUT/$tool"; exit 1
  fi
  mkdir -p "$OUT/gz"
  gzip -c "$OUT/$tool" > "$OUT/gz/$tool.gz"
  echo "$tool: $(du -h "$OUT/$tool" | cut -f1) ($(du -h "$OUT/gz/$tool.gz" | cut -f1) gzipped): $(ldd "$OUT/$tool" | awk '{print $1}' | tr '\n' ' ')"
done
# What the tools were built from (the sources they link, not blucomp/runtime; session 16: a blu-plan
# older than the capture format failed on the device): scripts/check-static-tools.sh compares it
# with the working tree before a carry.
BLUCOMP_TOOL_SOURCES="blucomp/include blucomp/src blucomp/tools blucomp/CMakeLists.txt"
(cd "$SRC" && echo "$(git ls-tree -r HEAD $BLUCOMP_TOOL_SOURCES | sha1sum | cut -c1-40) $(git status --porcelain -- $BLUCOMP_TOOL_SOURCES | wc -l)") \
  > "$OUT/gz/blucomp-tree.txt"

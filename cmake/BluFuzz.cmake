# BluFuzz.cmake: the BLU_FUZZ configuration (tests/fuzz, issue 14). Included by the top-level
# CMakeLists.txt before any library, because the libraries themselves must be built with
# libFuzzer's coverage instrumentation and the sanitizers: a fuzzer only steers by the coverage of
# the code it calls, and a bug in a parser is only a finding when ASan/UBSan see it.
#
# Note [Fuzz build]
#   BLU_FUZZ=ON is its own build directory (scripts/fuzz.sh: build-fuzz), never mixed with the
#   normal one: every object gets -fsanitize=fuzzer-no-link,address,undefined, which the normal
#   tests and benchmarks must not carry. It needs clang (libFuzzer ships with it) and the CPU-only
#   configuration (Note [CPU-only build]): the parsers are host code, and nvcc cannot compile with
#   libFuzzer's instrumentation. UBSan is fatal (-fno-sanitize-recover), so undefined behaviour is
#   a crash the fuzzer records like any other. Optimisation -O1 keeps the instrumented build fast
#   to compile and the sanitizer reports readable; -g gives the reports line numbers.
if(NOT BLU_FUZZ)
  return()
endif()
if(NOT CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
  message(FATAL_ERROR "BLU_FUZZ needs clang (libFuzzer): configure with CC=clang CXX=clang++ "
                      "(found ${CMAKE_CXX_COMPILER_ID} ${CMAKE_CXX_COMPILER})")
endif()
if(BLU_WITH_CUDA)
  message(FATAL_ERROR "BLU_FUZZ builds host code only: configure with -DBLU_WITH_CUDA=OFF "
                      "(Note [Fuzz build] in cmake/BluFuzz.cmake)")
endif()
set(BLU_FUZZ_SANITIZERS "-fsanitize=address,undefined -fno-sanitize-recover=undefined")
string(APPEND CMAKE_CXX_FLAGS " -fsanitize=fuzzer-no-link ${BLU_FUZZ_SANITIZERS} -fno-omit-frame-pointer -O1 -g")
string(APPEND CMAKE_EXE_LINKER_FLAGS " ${BLU_FUZZ_SANITIZERS}")
string(APPEND CMAKE_SHARED_LINKER_FLAGS " ${BLU_FUZZ_SANITIZERS}")
message(STATUS "BluTrain: fuzz build (libFuzzer + ASan + UBSan), targets in tests/fuzz")

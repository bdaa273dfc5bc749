// Compile-time architecture guards for kernels. Every kernel file is compiled for every target in
// BLU_CUDA_ARCHS (Note [CUDA architectures] in the top CMakeLists); bodies that use sm_90a-only
// instructions (wgmma, setmaxnreg) compile to a trap on other targets, and the launcher checks the
// run-time arch before it ever launches them.
#pragma once

#if defined(__CUDA_ARCH__) && (__CUDA_ARCH__ == 900) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define BLUBLAS_SM90A_ENABLED 1
#else
#define BLUBLAS_SM90A_ENABLED 0
#endif

#if defined(__CUDA_ARCH__) && (__CUDA_ARCH__ >= 800)
#define BLUBLAS_SM80_ENABLED 1
#else
#define BLUBLAS_SM80_ENABLED 0
#endif

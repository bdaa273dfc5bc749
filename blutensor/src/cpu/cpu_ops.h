// blutensor/src/cpu/cpu_ops.h: the kernel-level CPU backend, blu::cpu_ops: the functions listed in
// backend_ops.def (contracts there, Note [Backend mirror]), declared from that one list so that
// cuda/cuda_ops.h, which declares the same list in blu::cuda_ops, cannot drift from it.
#pragma once

#include <cstdint>
#include <vector>

#include "blutensor/tensor.h"
#include "../kernel_args.h"  // relative: also found from tests that include this header by path

namespace blu::cpu_ops {

#define BLU_BACKEND_OP(ret, name, params) ret name params;
#include "../backend_ops.def"

}  // namespace blu::cpu_ops

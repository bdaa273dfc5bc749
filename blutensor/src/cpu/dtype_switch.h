// blutensor/src/cpu/dtype_switch.h: run a statement with `T` bound to the C++ type of a dtype.
#pragma once

#include "blutensor/dtype.h"
#include "blutensor/error.h"

#define BLU_DTYPE_CASE(enumerator, T, ...)                     \
  case ::blu::DType::enumerator: {                             \
    using T = typename ::blu::dtype_traits<::blu::DType::enumerator>::type; \
    __VA_ARGS__;                                               \
    break;                                                     \
  }

#define BLU_SWITCH_FLOAT_DTYPES(dtype, T, op, ...)                                     \
  switch (dtype) {                                                                     \
    BLU_DTYPE_CASE(F64, T, __VA_ARGS__)                                                \
    BLU_DTYPE_CASE(F32, T, __VA_ARGS__)                                                \
    BLU_DTYPE_CASE(BF16, T, __VA_ARGS__)                                               \
    BLU_DTYPE_CASE(F16, T, __VA_ARGS__)                                                \
    default: BLU_THROW(op, ": unsupported dtype ", ::blu::dtype_name(dtype), " (floating only)"); \
  }

#define BLU_SWITCH_ALL_DTYPES(dtype, T, op, ...)                                       \
  switch (dtype) {                                                                     \
    BLU_DTYPE_CASE(F64, T, __VA_ARGS__)                                                \
    BLU_DTYPE_CASE(F32, T, __VA_ARGS__)                                                \
    BLU_DTYPE_CASE(BF16, T, __VA_ARGS__)                                               \
    BLU_DTYPE_CASE(F16, T, __VA_ARGS__)                                                \
    BLU_DTYPE_CASE(I32, T, __VA_ARGS__)                                                \
    BLU_DTYPE_CASE(I64, T, __VA_ARGS__)                                                \
    BLU_DTYPE_CASE(U16, T, __VA_ARGS__)                                                \
    default: BLU_THROW(op, ": unsupported dtype ", ::blu::dtype_name(dtype));           \
  }

#define BLU_SWITCH_INDEX_DTYPES(dtype, T, op, ...)                                     \
  switch (dtype) {                                                                     \
    BLU_DTYPE_CASE(I32, T, __VA_ARGS__)                                                \
    BLU_DTYPE_CASE(I64, T, __VA_ARGS__)                                                \
    BLU_DTYPE_CASE(U16, T, __VA_ARGS__)                                                \
    default: BLU_THROW(op, ": indices must be i32, i64 or u16, got ", ::blu::dtype_name(dtype)); \
  }

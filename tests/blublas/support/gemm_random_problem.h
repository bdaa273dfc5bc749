// gemm_random_problem.h: seeded random GEMM problems for the property tests (the CPU part,
// gemm_property_test.cpp, and the GPU part, gemm_property_gpu_test.cu, draw the same ones).
// Problem `index` of `seed` is a pure function of the two, so one failing case reruns alone.
//
// Each problem is a valid blublas::GemmDesc without pointers, plus where each matrix lies in its
// own buffer (offset, ld, batch stride, buffer length). The distribution aims at the corners:
// sizes 1, 2, around and off every tile size (64, 128, 192, 256), K from 1 up (below one k-block,
// one TMA box, one 16-byte chunk), padded and tight and odd leading dimensions, base pointers off
// 16-byte alignment, strided and broadcast (stride 0) batches, beta != 0 with D aliasing C, every
// epilogue, every dtype pair and compute mode, small-magnitude inputs whose f16 results underflow,
// and on the forced sm_90a run a random tile / split-K / epilogue variant.
#pragma once

#include <blublas/gemm.h>

#include <cstdint>
#include <string>

namespace blu::test {

// The report's name of a problem's precision: "fp32" (strict), "tf32", "bf16", "f16" (inputs).
const char* gemm_precision_name(blublas::Dtype ab, blublas::ComputeMode compute);

// Where one matrix lies in its buffer (elements of its dtype). Stored shape rows x cols as in
// memory (before op); element (b, r, c) at offset + b * stride + (row-major ? r * ld + c :
// c * ld + r). elems covers every batch; stride 0 (inputs only) repeats one matrix.
struct MatrixPlace {
  int64_t rows = 0, cols = 0;
  int64_t ld = 0, stride = 0, offset = 0, elems = 0;
  bool col_major = false;
  int64_t index(int b, int64_t r, int64_t c) const {
    return offset + b * stride + (col_major ? c * ld + r : r * ld + c);
  }
};

struct RandomGemm {
  uint64_t seed = 0;
  int index = 0;
  blublas::GemmDesc desc;        // pointers null; bind_buffers() sets them
  MatrixPlace a, b, c, d, aux;   // c unused unless beta != 0; aux unless an aux epilogue
  bool c_aliases_d = false;      // then c is d's place and C lives in D's buffer
  bool aux_written = false;      // kGelu with aux, kBiasGelu
  bool aux_read = false;         // kGeluGrad
  int64_t bias_offset = 0;       // elements (bias has N elements of cd_type)
  float input_scale = 1.0f;      // A, B, C, bias, aux values are uniform in [-scale, scale]
  int64_t workspace_offset = 0;  // bytes added to an aligned workspace pointer
  // The forced sm_90a run's variant (environment BLUBLAS_SM90_TILE / _SPLITS / _GENERIC_EPILOGUE):
  // tile name or "" for the heuristic's, splits (0: heuristic's), generic epilogue.
  std::string sm90_tile;
  int sm90_splits = 0;
  bool sm90_generic_epilogue = false;
  // The forced sm80 mma.sync run's split-K count (BLUBLAS_SM80_SPLITS; 0: the heuristic's).
  int sm80_splits = 0;
  // The forced sm_90a run's stream-K (BLUBLAS_SM90_STREAMK=1 where the tile takes it and no
  // splits are forced; -1: the cost model's).
  int sm90_stream_k = -1;

  // Every field, on one line: enough to rebuild the problem by hand.
  std::string describe() const;
};

RandomGemm random_gemm(uint64_t seed, int index);

// The problem issue 11 reported (f16 -> f16, T,T row-major, alpha 0.5, beta 0, tight leading
// dimensions): which = 0: 64 x 1536, K = 1; which = 1: 4099 x 500, K = 2, batch 3.
RandomGemm issue11_gemm(int which);

// Points desc.a/b/c/d/aux/bias/bias_grad at element 0 of each matrix in the given buffers (bytes;
// null for a buffer the problem does not use). c is ignored when c_aliases_d.
void bind_buffers(RandomGemm* g, void* a, void* b, void* c, void* d, void* aux, void* bias,
                  float* bias_grad);

// Bytes of each buffer (0 when unused); bias_grad in floats.
struct GemmBufferBytes {
  std::size_t a = 0, b = 0, c = 0, d = 0, aux = 0, bias = 0, bias_grad = 0;
};
GemmBufferBytes buffer_bytes(const RandomGemm& g);

}  // namespace blu::test

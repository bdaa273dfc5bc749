// Test support: tensor- and context-parallel checks against the unsharded ops (float64), run by
// the Gloo thread-rank tests (tensor_parallel_test, context_parallel_test) on the CPU and by
// bludist_test_worker under blurun on GPUs (nccl_gpu_test). Every rank builds the same full
// tensors from a fixed seed on the CPU, moves them to `device`, runs the unsharded op and the
// sharded one, and compares its own output chunk and gradients. Each returns "" when everything
// matches, else the first mismatch ("what: element i: got vs want").
#pragma once

#include <string>

#include "bludist/process_group.h"

namespace bludist::test {

// Column- then row-parallel Linear-GELU-Linear (hidden 12: 2, 3, 4 or 6 ranks).
std::string check_tp_mlp(ProcessGroup& pg, blu::Device device);
// The same MLP through tp_column_linear_overlapped / tp_row_linear_overlapped (Note [Async TP]) on
// a [2, 5, 6] input, with 1, 3, 4 and 16 row chunks (16 > the 10 rows: empty chunks).
std::string check_tp_mlp_overlapped(ProcessGroup& pg, blu::Device device);
// Vocabulary-parallel embedding and cross-entropy (vocabulary 12).
std::string check_vocab_parallel(ProcessGroup& pg, blu::Device device);
// A GPT-2 attention sub-block with its 6 heads split across the ranks.
std::string check_tp_attention_block(ProcessGroup& pg, blu::Device device);
// Ring attention against whole-sequence attention (4 positions a rank; balanced: 2 + 2).
std::string check_ring_attention(ProcessGroup& pg, blu::Device device, bool causal, bool balanced);

}  // namespace bludist::test

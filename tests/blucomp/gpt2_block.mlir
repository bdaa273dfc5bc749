// One GPT-2 transformer block's forward (B*T = 8192 rows, C = 768, pre-LN) in blu ops: what the
// compiler does with a real block (the README's compiler section shows this IR before and after).
// GEMMs stay blu.matmul and attention a blu.kernel (Note [Opaque kernels]): fusion boundaries.
// Before fusion the block is 14 kernels (2 layernorm, 4 GEMM, attention, 7 elementwise); after,
// 11: the qkv bias add stays alone (its one user is the attention kernel), and three groups form
// (proj bias + residual add, fc bias + GELU, fc_proj bias + residual add).
// RUN: blu-opt %s | FileCheck %s --check-prefix=ROUND
// RUN: blu-opt %s --blu-fuse-pipeline | FileCheck %s --check-prefix=FUSED
// RUN: blu-opt %s --blu-fuse-pipeline --blu-plan-memory | FileCheck %s --check-prefix=PLAN
// RUN: blu-opt %s --blu-plan-memory | FileCheck %s --check-prefix=EAGER
// RUN: blu-opt %s --blu-count-kernels | FileCheck %s --check-prefix=COUNT-BEFORE
// RUN: blu-opt %s --blu-fuse-pipeline --blu-count-kernels | FileCheck %s --check-prefix=COUNT-AFTER
// RUN: blu-opt %s --blu-fuse-epilogue --blu-fuse-pipeline --blu-count-kernels | FileCheck %s --check-prefix=COUNT-EPI

// COUNT-BEFORE: func.func @gpt2_block{{.*}}blu.kernels = 14 : i64
// COUNT-AFTER: func.func @gpt2_block{{.*}}blu.kernels = 11 : i64
// With the GEMM epilogues first (blu-fuse-epilogue): 7, every elementwise op inside a GEMM.
// COUNT-EPI: func.func @gpt2_block{{.*}}blu.kernels = 7 : i64
// COUNT-EPI-NOT: blu.fused
// COUNT-EPI-NOT: blu.bias_add

// ROUND: blu.kernel "attention_forward"(%{{.*}}) : (tensor<8192x2304xf32>) -> (tensor<8192x768xf32>, tensor<96x1024xf32>)

// FUSED-LABEL: func.func @gpt2_block
// FUSED: blu.layernorm
// FUSED-NEXT: blu.matmul
// FUSED-NEXT: %[[QKV:.*]] = blu.bias_add
// FUSED-NEXT: blu.kernel "attention_forward"(%[[QKV]])
// FUSED-NEXT: blu.matmul
// FUSED-NEXT: blu.fused
// FUSED: blu.bias_add
// FUSED-NEXT: blu.add
// FUSED-NEXT: blu.yield
// FUSED: blu.layernorm
// FUSED-NEXT: blu.matmul
// FUSED-NEXT: blu.fused
// FUSED: blu.bias_add
// FUSED-NEXT: blu.gelu_tanh
// FUSED-NEXT: blu.yield
// FUSED: blu.matmul
// FUSED-NEXT: blu.fused
// FUSED: blu.bias_add
// FUSED-NEXT: blu.add
// FUSED-NEXT: blu.yield
// FUSED-NOT: blu.fused
// FUSED: return

// The planned peak is the same with and without fusion (the fc output and the GELU output, 2 x
// 100.7 MB, and the residual stream, 25.2 MB, are live together either way); what fusion removes
// is three intermediates: 529 MB allocated one by one instead of 680 MB.
// PLAN: blu.arena_bytes = 226492416 : i64, blu.arena_lower_bound_bytes = 226492416 : i64, blu.unplanned_bytes = 529006592 : i64
// EAGER: blu.arena_bytes = 226492416 : i64, blu.arena_lower_bound_bytes = 226492416 : i64, blu.unplanned_bytes = 680001536 : i64

func.func @gpt2_block(%x: tensor<8192x768xf32>, %ln1_w: tensor<768xf32>, %ln1_b: tensor<768xf32>,
                      %w_qkv: tensor<2304x768xf32>, %b_qkv: tensor<2304xf32>,
                      %w_proj: tensor<768x768xf32>, %b_proj: tensor<768xf32>,
                      %ln2_w: tensor<768xf32>, %ln2_b: tensor<768xf32>,
                      %w_fc: tensor<3072x768xf32>, %b_fc: tensor<3072xf32>,
                      %w_fcp: tensor<768x3072xf32>, %b_fcp: tensor<768xf32>) -> tensor<8192x768xf32> {
  %h1, %m1, %r1 = blu.layernorm %x, %ln1_w, %ln1_b : tensor<8192x768xf32>, tensor<768xf32>, tensor<768xf32> -> tensor<8192x768xf32>, tensor<8192xf32>, tensor<8192xf32>
  %qkv = blu.matmul %h1, %w_qkv {transpose_rhs = true} : tensor<8192x768xf32>, tensor<2304x768xf32> -> tensor<8192x2304xf32>
  %qkvb = blu.bias_add %qkv, %b_qkv : tensor<8192x2304xf32>, tensor<2304xf32>
  %att, %lse = blu.kernel "attention_forward"(%qkvb) : (tensor<8192x2304xf32>) -> (tensor<8192x768xf32>, tensor<96x1024xf32>)
  %proj = blu.matmul %att, %w_proj {transpose_rhs = true} : tensor<8192x768xf32>, tensor<768x768xf32> -> tensor<8192x768xf32>
  %projb = blu.bias_add %proj, %b_proj : tensor<8192x768xf32>, tensor<768xf32>
  %x2 = blu.add %x, %projb : tensor<8192x768xf32>
  %h2, %m2, %r2 = blu.layernorm %x2, %ln2_w, %ln2_b : tensor<8192x768xf32>, tensor<768xf32>, tensor<768xf32> -> tensor<8192x768xf32>, tensor<8192xf32>, tensor<8192xf32>
  %fc = blu.matmul %h2, %w_fc {transpose_rhs = true} : tensor<8192x768xf32>, tensor<3072x768xf32> -> tensor<8192x3072xf32>
  %fcb = blu.bias_add %fc, %b_fc : tensor<8192x3072xf32>, tensor<3072xf32>
  %g = blu.gelu_tanh %fcb : tensor<8192x3072xf32>
  %mp = blu.matmul %g, %w_fcp {transpose_rhs = true} : tensor<8192x3072xf32>, tensor<768x3072xf32> -> tensor<8192x768xf32>
  %mpb = blu.bias_add %mp, %b_fcp : tensor<8192x768xf32>, tensor<768xf32>
  %x3 = blu.add %x2, %mpb : tensor<8192x768xf32>
  return %x3 : tensor<8192x768xf32>
}

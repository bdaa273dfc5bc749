// One GPT-2 block's training step in blu ops (B*T = 8192, C = 768): the forward, then the backward
// from the block output's gradient %d_x3 (GEMM dX / dW as blu.matmul with transposes, the bias
// gradients, layernorm backward and attention backward as blu.kernel). What a training step leaves
// the elementwise fusion: the forward's pre-activations (qkv + bias, fc + bias) are read again by
// the backward, so the fusion rule (a producer joins only when every user is in the group: no
// recompute) keeps them apart; only proj bias + residual add fuses. 29 kernels -> 28. The backward's
// elementwise ops (GELU gradient, two residual-gradient adds) have kernels or GEMMs on both sides.
// What removes launches here is fusion into the GEMMs' epilogues (blu-fuse-epilogue: bias, bias +
// residual, bias + GELU keeping the pre-activation, GELU gradient, the bias gradients into the dW
// GEMMs): 19. Still separate: the residual gradients' adds (beside layernorm backward kernels).
// RUN: blu-opt %s --blu-count-kernels | FileCheck %s --check-prefix=BEFORE
// RUN: blu-opt %s --blu-fuse-pipeline --blu-count-kernels | FileCheck %s --check-prefix=AFTER
// RUN: blu-opt %s --blu-fuse-pipeline --blu-plan-memory | FileCheck %s --check-prefix=PLAN
// RUN: blu-opt %s --blu-fuse-epilogue --blu-fuse-pipeline --blu-count-kernels | FileCheck %s --check-prefix=EPI
// RUN: blu-opt %s --blu-fuse-epilogue --blu-fuse-pipeline --blu-plan-memory | FileCheck %s --check-prefix=PLAN-EPI
// RUN: blu-opt %s --blu-fuse-epilogue | FileCheck %s --check-prefix=EPIGRAD

// BEFORE: func.func @gpt2_block_step{{.*}}blu.kernels = 29 : i64
// AFTER: func.func @gpt2_block_step{{.*}}blu.kernels = 28 : i64
// AFTER-COUNT-1: blu.fused
// AFTER: blu.gelu_tanh %
// AFTER: blu.gelu_tanh_grad
// blu-fuse-epilogue first (Note [Epilogue fusion]): qkv bias, proj bias + residual, fc bias + GELU
// (keeping the pre-activation for the backward), the GELU gradient in the dX GEMM, four bias
// gradients in the dW GEMMs: 19 kernels.
// EPI: func.func @gpt2_block_step{{.*}}blu.kernels = 19 : i64
// EPI: blu.matmul_epilogue "bias"
// EPI: blu.matmul_epilogue "bias_residual"
// EPI: %[[FC:.*]]:2 = blu.matmul_epilogue "bias_gelu"
// EPI: blu.matmul_epilogue "gelu_grad"({{.*}}, %[[FC]]#1)
// EPIGRAD-COUNT-4: blu.matmul_epilogue "bias_grad"
// EPIGRAD-NOT: "column_sum"
// The arena: 488.1 MB planned against 1060.7 MB allocated one by one (1085.8 MB before fusion).
// With the epilogues the bias-added intermediates vanish: 387.5 MB planned, 758.7 MB one by one.
// PLAN-EPI: blu.arena_bytes = 387451904 : i64, blu.arena_lower_bound_bytes = 387451904 : i64, blu.unplanned_bytes = 758684672 : i64
// PLAN: blu.arena_bytes = 488115200 : i64, blu.arena_lower_bound_bytes = 488115200 : i64, blu.unplanned_bytes = 1060674560 : i64

func.func @gpt2_block_step(%x: tensor<8192x768xf32>, %ln1_w: tensor<768xf32>, %ln1_b: tensor<768xf32>,
                           %w_qkv: tensor<2304x768xf32>, %b_qkv: tensor<2304xf32>,
                           %w_proj: tensor<768x768xf32>, %b_proj: tensor<768xf32>,
                           %ln2_w: tensor<768xf32>, %ln2_b: tensor<768xf32>,
                           %w_fc: tensor<3072x768xf32>, %b_fc: tensor<3072xf32>,
                           %w_fcp: tensor<768x3072xf32>, %b_fcp: tensor<768xf32>,
                           %d_x3: tensor<8192x768xf32>)
    -> (tensor<8192x768xf32>, tensor<8192x768xf32>, tensor<2304x768xf32>, tensor<2304xf32>,
        tensor<768x768xf32>, tensor<768xf32>, tensor<3072x768xf32>, tensor<3072xf32>,
        tensor<768x3072xf32>, tensor<768xf32>, tensor<768xf32>, tensor<768xf32>, tensor<768xf32>, tensor<768xf32>) {
  // forward
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
  // (the block's output x3 = x2 + g w_fcp^T + b_fcp is the next block's input; its gradient d_x3 comes in)
  // backward: MLP
  %d_b_fcp = blu.kernel "column_sum"(%d_x3) : (tensor<8192x768xf32>) -> tensor<768xf32>
  %d_g = blu.matmul %d_x3, %w_fcp : tensor<8192x768xf32>, tensor<768x3072xf32> -> tensor<8192x3072xf32>
  %d_w_fcp = blu.matmul %d_x3, %g {transpose_lhs = true} : tensor<8192x768xf32>, tensor<8192x3072xf32> -> tensor<768x3072xf32>
  %d_fcb = blu.gelu_tanh_grad %d_g, %fcb : tensor<8192x3072xf32>
  %d_b_fc = blu.kernel "column_sum"(%d_fcb) : (tensor<8192x3072xf32>) -> tensor<3072xf32>
  %d_h2 = blu.matmul %d_fcb, %w_fc : tensor<8192x3072xf32>, tensor<3072x768xf32> -> tensor<8192x768xf32>
  %d_w_fc = blu.matmul %d_fcb, %h2 {transpose_lhs = true} : tensor<8192x3072xf32>, tensor<8192x768xf32> -> tensor<3072x768xf32>
  %d_x2_ln, %d_ln2_w, %d_ln2_b = blu.kernel "layernorm_backward"(%d_h2, %x2, %m2, %r2, %ln2_w) : (tensor<8192x768xf32>, tensor<8192x768xf32>, tensor<8192xf32>, tensor<8192xf32>, tensor<768xf32>) -> (tensor<8192x768xf32>, tensor<768xf32>, tensor<768xf32>)
  %d_x2 = blu.add %d_x3, %d_x2_ln : tensor<8192x768xf32>
  // backward: attention
  %d_b_proj = blu.kernel "column_sum"(%d_x2) : (tensor<8192x768xf32>) -> tensor<768xf32>
  %d_att = blu.matmul %d_x2, %w_proj : tensor<8192x768xf32>, tensor<768x768xf32> -> tensor<8192x768xf32>
  %d_w_proj = blu.matmul %d_x2, %att {transpose_lhs = true} : tensor<8192x768xf32>, tensor<8192x768xf32> -> tensor<768x768xf32>
  %d_qkvb = blu.kernel "attention_backward"(%qkvb, %att, %lse, %d_att) : (tensor<8192x2304xf32>, tensor<8192x768xf32>, tensor<96x1024xf32>, tensor<8192x768xf32>) -> tensor<8192x2304xf32>
  %d_b_qkv = blu.kernel "column_sum"(%d_qkvb) : (tensor<8192x2304xf32>) -> tensor<2304xf32>
  %d_h1 = blu.matmul %d_qkvb, %w_qkv : tensor<8192x2304xf32>, tensor<2304x768xf32> -> tensor<8192x768xf32>
  %d_w_qkv = blu.matmul %d_qkvb, %h1 {transpose_lhs = true} : tensor<8192x2304xf32>, tensor<8192x768xf32> -> tensor<2304x768xf32>
  %d_x_ln, %d_ln1_w, %d_ln1_b = blu.kernel "layernorm_backward"(%d_h1, %x, %m1, %r1, %ln1_w) : (tensor<8192x768xf32>, tensor<8192x768xf32>, tensor<8192xf32>, tensor<8192xf32>, tensor<768xf32>) -> (tensor<8192x768xf32>, tensor<768xf32>, tensor<768xf32>)
  %d_x = blu.add %d_x2, %d_x_ln : tensor<8192x768xf32>
  return %d_x, %x2, %d_w_qkv, %d_b_qkv, %d_w_proj, %d_b_proj, %d_w_fc, %d_b_fc, %d_w_fcp, %d_b_fcp, %d_ln1_w, %d_ln1_b, %d_ln2_w, %d_ln2_b
    : tensor<8192x768xf32>, tensor<8192x768xf32>, tensor<2304x768xf32>, tensor<2304xf32>, tensor<768x768xf32>, tensor<768xf32>,
      tensor<3072x768xf32>, tensor<3072xf32>, tensor<768x3072xf32>, tensor<768xf32>, tensor<768xf32>, tensor<768xf32>, tensor<768xf32>, tensor<768xf32>
}

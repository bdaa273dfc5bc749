// The verifiers reject malformed blu IR with messages that name the operand, the types and the
// expected type (Note [Verifier messages] in blucomp/src/blu_ops.cpp).
// RUN: blu-opt %s -split-input-file -verify-diagnostics

func.func @bias_wrong_length(%x: tensor<4x8xf32>, %b: tensor<6xf32>) -> tensor<4x8xf32> {
  // expected-error @+1 {{bias 'tensor<6xf32>' does not match the last dimension of input 'tensor<4x8xf32>': expected 'tensor<8xf32>'}}
  %0 = blu.bias_add %x, %b : tensor<4x8xf32>, tensor<6xf32>
  return %0 : tensor<4x8xf32>
}

// -----

func.func @bias_wrong_dtype(%x: tensor<4x8xf32>, %b: tensor<8xbf16>) -> tensor<4x8xf32> {
  // expected-error @+1 {{bias element type 'bf16' differs from the input's 'f32'}}
  %0 = blu.bias_add %x, %b : tensor<4x8xf32>, tensor<8xbf16>
  return %0 : tensor<4x8xf32>
}

// -----

// expected-note @+1 {{prior use here}}
func.func @add_shapes_differ(%a: tensor<4x8xf32>, %b: tensor<4x9xf32>) -> tensor<4x8xf32> {
  // expected-error @+1 {{use of value '%b' expects different type than prior uses: 'tensor<4x8xf32>' vs 'tensor<4x9xf32>'}}
  %0 = blu.add %a, %b : tensor<4x8xf32>
  return %0 : tensor<4x8xf32>
}

// -----

func.func @f16_rejected(%a: tensor<4x8xf16>) -> tensor<4x8xf16> {
  // expected-error @+1 {{must be statically shaped tensor of 32-bit float or bfloat16 type values}}
  %0 = blu.gelu_tanh %a : tensor<4x8xf16>
  return %0 : tensor<4x8xf16>
}

// -----

func.func @dynamic_shape_rejected(%a: tensor<?x8xf32>) -> tensor<?x8xf32> {
  // expected-error @+1 {{must be statically shaped tensor of 32-bit float or bfloat16 type values}}
  %0 = blu.gelu_tanh %a : tensor<?x8xf32>
  return %0 : tensor<?x8xf32>
}

// -----

func.func @matmul_k_mismatch(%a: tensor<4x8xf32>, %b: tensor<7x16xf32>) -> tensor<4x16xf32> {
  // expected-error @+1 {{contraction sizes differ: lhs 'tensor<4x8xf32>' has K = 8, rhs 'tensor<7x16xf32>' has K = 7}}
  %0 = blu.matmul %a, %b : tensor<4x8xf32>, tensor<7x16xf32> -> tensor<4x16xf32>
  return %0 : tensor<4x16xf32>
}

// -----

func.func @matmul_transposed_k_mismatch(%a: tensor<4x8xf32>, %b: tensor<16x4xf32>) -> tensor<4x16xf32> {
  // expected-error @+1 {{rhs 'tensor<16x4xf32>' (transposed) has K = 4}}
  %0 = blu.matmul %a, %b {transpose_rhs = true} : tensor<4x8xf32>, tensor<16x4xf32> -> tensor<4x16xf32>
  return %0 : tensor<4x16xf32>
}

// -----

func.func @matmul_result_shape(%a: tensor<4x8xf32>, %b: tensor<8x16xf32>) -> tensor<4x15xf32> {
  // expected-error @+1 {{result 'tensor<4x15xf32>' must be 4x16}}
  %0 = blu.matmul %a, %b : tensor<4x8xf32>, tensor<8x16xf32> -> tensor<4x15xf32>
  return %0 : tensor<4x15xf32>
}

// -----

func.func @layernorm_weight(%x: tensor<4x8xf32>, %w: tensor<4xf32>, %b: tensor<8xf32>) -> tensor<4x8xf32> {
  // expected-error @+1 {{weight 'tensor<4xf32>' does not match input 'tensor<4x8xf32>': expected 'tensor<8xf32>'}}
  %y, %m, %r = blu.layernorm %x, %w, %b : tensor<4x8xf32>, tensor<4xf32>, tensor<8xf32> -> tensor<4x8xf32>, tensor<4xf32>, tensor<4xf32>
  return %y : tensor<4x8xf32>
}

// -----

func.func @layernorm_stats(%x: tensor<4x8xbf16>, %w: tensor<8xbf16>) -> tensor<4x8xbf16> {
  // expected-error @+1 {{mean 'tensor<4xbf16>' and rstd 'tensor<4xbf16>' must both be 'tensor<4xf32>' (f32, one per row)}}
  %y, %m, %r = blu.layernorm %x, %w, %w : tensor<4x8xbf16>, tensor<8xbf16>, tensor<8xbf16> -> tensor<4x8xbf16>, tensor<4xbf16>, tensor<4xbf16>
  return %y : tensor<4x8xbf16>
}

// -----

func.func @layernorm_epsilon(%x: tensor<4x8xf32>, %w: tensor<8xf32>) -> tensor<4x8xf32> {
  // expected-error @+1 {{epsilon must be > 0, got 0}}
  %y, %m, %r = blu.layernorm %x, %w, %w {epsilon = 0.0 : f32} : tensor<4x8xf32>, tensor<8xf32>, tensor<8xf32> -> tensor<4x8xf32>, tensor<4xf32>, tensor<4xf32>
  return %y : tensor<4x8xf32>
}

// -----

func.func @fused_input_not_broadcastable(%x: tensor<4x8xf32>, %c: tensor<4xf32>) -> tensor<4x8xf32> {
  // expected-error @+1 {{input #1 'tensor<4xf32>' is neither of the result's shape 'tensor<4x8xf32>' nor a rank-1 tensor of its last dimension}}
  %0 = blu.fused(%x, %c) : (tensor<4x8xf32>, tensor<4xf32>) -> tensor<4x8xf32> {
  ^bb0(%a: tensor<4x8xf32>, %b: tensor<4xf32>):
    blu.yield %a : tensor<4x8xf32>
  }
  return %0 : tensor<4x8xf32>
}

// -----

func.func @fused_holds_matmul(%x: tensor<8x8xf32>) -> tensor<8x8xf32> {
  %0 = blu.fused(%x) : (tensor<8x8xf32>) -> tensor<8x8xf32> {
  ^bb0(%a: tensor<8x8xf32>):
    // expected-error @+1 {{is not elementwise and may not be inside blu.fused}}
    %1 = blu.matmul %a, %a : tensor<8x8xf32>, tensor<8x8xf32> -> tensor<8x8xf32>
    blu.yield %1 : tensor<8x8xf32>
  }
  return %0 : tensor<8x8xf32>
}

// -----

func.func @fused_yield_type(%x: tensor<4x8xf32>, %b: tensor<8xf32>) -> tensor<4x8xf32> {
  // expected-error @+1 {{yields 'tensor<8xf32>' as value #0 but result #0 is 'tensor<4x8xf32>'}}
  %0 = blu.fused(%x, %b) : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32> {
  ^bb0(%a: tensor<4x8xf32>, %c: tensor<8xf32>):
    blu.yield %c : tensor<8xf32>
  }
  return %0 : tensor<4x8xf32>
}

// -----

func.func @fused_yield_count(%x: tensor<4x8xf32>) -> tensor<4x8xf32> {
  // expected-error @+1 {{yields 2 values for 1 results}}
  %0 = blu.fused(%x) : (tensor<4x8xf32>) -> tensor<4x8xf32> {
  ^bb0(%a: tensor<4x8xf32>):
    blu.yield %a, %a : tensor<4x8xf32>, tensor<4x8xf32>
  }
  return %0 : tensor<4x8xf32>
}

// -----

func.func @fused_results_of_two_shapes(%x: tensor<4x8xf32>, %b: tensor<8xf32>) -> tensor<4x8xf32> {
  // expected-error @+1 {{result #1 'tensor<8xf32>' does not have the first result's shape 'tensor<4x8xf32>'}}
  %0:2 = blu.fused(%x, %b) : (tensor<4x8xf32>, tensor<8xf32>) -> (tensor<4x8xf32>, tensor<8xf32>) {
  ^bb0(%a: tensor<4x8xf32>, %c: tensor<8xf32>):
    blu.yield %a, %c : tensor<4x8xf32>, tensor<8xf32>
  }
  return %0#0 : tensor<4x8xf32>
}

// -----

func.func @broadcast_not_a_suffix(%c: tensor<8x16xf32>) -> tensor<2x16x8xf32> {
  // expected-error @+1 {{cannot broadcast 'tensor<8x16xf32>' to 'tensor<2x16x8xf32>'}}
  %0 = blu.broadcast %c : tensor<8x16xf32> to tensor<2x16x8xf32>
  return %0 : tensor<2x16x8xf32>
}

// -----

func.func @kernel_unknown_callee(%x: tensor<4x8xf32>) -> tensor<4x8xf32> {
  // expected-error @+1 {{unknown callee 'flash_attention' (known: attention_forward, attention_backward}}
  %0 = blu.kernel "flash_attention"(%x) : (tensor<4x8xf32>) -> tensor<4x8xf32>
  return %0 : tensor<4x8xf32>
}

// -----

func.func @epilogue_unknown(%x: tensor<4x8xf32>, %w: tensor<8x6xf32>, %b: tensor<6xf32>) -> tensor<4x6xf32> {
  // expected-error @+1 {{unknown epilogue 'bias_relu' (bias, bias_residual, bias_gelu, gelu_grad, bias_grad)}}
  %0 = blu.matmul_epilogue "bias_relu"(%x, %w, %b) : (tensor<4x8xf32>, tensor<8x6xf32>, tensor<6xf32>) -> tensor<4x6xf32>
  return %0 : tensor<4x6xf32>
}

// -----

func.func @epilogue_operand_count(%x: tensor<4x8xf32>, %w: tensor<8x6xf32>, %b: tensor<6xf32>) -> tensor<4x6xf32> {
  // expected-error @+1 {{epilogue 'bias_residual' takes 4 operands, got 3}}
  %0 = blu.matmul_epilogue "bias_residual"(%x, %w, %b) : (tensor<4x8xf32>, tensor<8x6xf32>, tensor<6xf32>) -> tensor<4x6xf32>
  return %0 : tensor<4x6xf32>
}

// -----

func.func @epilogue_bias_grad_shape(%dy: tensor<16x6xf32>, %x: tensor<16x8xf32>) -> (tensor<6x8xf32>, tensor<8xf32>) {
  // expected-error @+1 {{bias gradient 'tensor<8xf32>' must be a vector of 6}}
  %0:2 = blu.matmul_epilogue "bias_grad"(%dy, %x) {transpose_lhs = true} : (tensor<16x6xf32>, tensor<16x8xf32>) -> (tensor<6x8xf32>, tensor<8xf32>)
  return %0#0, %0#1 : tensor<6x8xf32>, tensor<8xf32>
}

// -----

func.func @epilogue_swapped_bias(%x: tensor<4x8xf32>, %w: tensor<8x6xf32>, %b: tensor<6xf32>, %r: tensor<4x6xf32>) -> tensor<4x6xf32> {
  // expected-error @+1 {{operand #2 (the bias) 'tensor<4x6xf32>' must be a vector of 6}}
  %0 = blu.matmul_epilogue "bias_residual"(%x, %w, %r, %b) : (tensor<4x8xf32>, tensor<8x6xf32>, tensor<4x6xf32>, tensor<6xf32>) -> tensor<4x6xf32>
  return %0 : tensor<4x6xf32>
}

// -----

func.func @reshape_count(%x: tensor<6xf32>) -> tensor<2x4xf32> {
  // expected-error @+1 {{input 'tensor<6xf32>' has 6 elements, result 'tensor<2x4xf32>' has 8}}
  %0 = blu.reshape %x : tensor<6xf32> -> tensor<2x4xf32>
  return %0 : tensor<2x4xf32>
}

// -----

func.func @view_out_of_bounds(%x: tensor<64xf32>) -> tensor<4x2xf32> {
  // expected-error @+1 {{window 'tensor<4x2xf32>' at offset 40 reaches element 65 of 'tensor<64xf32>' (64 elements)}}
  %0 = blu.view %x {offset = 40 : i64, strides = array<i64: 8, 1>} : tensor<64xf32> -> tensor<4x2xf32>
  return %0 : tensor<4x2xf32>
}

// -----

func.func @view_rank(%x: tensor<64xf32>) -> tensor<4x2xf32> {
  // expected-error @+1 {{has 1 strides for the window 'tensor<4x2xf32>' of rank 2}}
  %0 = blu.view %x {offset = 0 : i64, strides = array<i64: 8>} : tensor<64xf32> -> tensor<4x2xf32>
  return %0 : tensor<4x2xf32>
}

// -----

func.func @insert_view_dtype(%s: tensor<8xi32>, %d: tensor<64xf32>) -> tensor<64xf32> {
  // expected-error @+1 {{element type 'i32' differs from 'f32'}}
  %0 = blu.insert_view %s into %d {offset = 0 : i64, strides = array<i64: 1>} : tensor<8xi32> into tensor<64xf32>
  return %0 : tensor<64xf32>
}

// -----

func.func @kernel_unknown(%x: tensor<4xi64>) -> tensor<4xi64> {
  // expected-error @+1 {{unknown callee 'sort'}}
  %0 = blu.kernel "sort"(%x) : (tensor<4xi64>) -> tensor<4xi64>
  return %0 : tensor<4xi64>
}

// -----

func.func @ew_unknown(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{unknown function 'cosh'}}
  %0 = blu.ew "cosh"(%x) : tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

func.func @ew_arity(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{'sub' takes 2 input(s), got 1}}
  %0 = blu.ew "sub"(%x) : tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

func.func @ew_pow(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{pow_scalar exponent 3.000000e+00 (2, 0.5, -0.5 or -1 only: no powf in the PTX)}}
  %0 = blu.ew "pow_scalar"(%x) {alpha = 3.0 : f64} : tensor<4xf32>
  return %0 : tensor<4xf32>
}

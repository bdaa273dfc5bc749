# Included by tests/CMakeLists.txt: tests that start the blutrain program (under blurun) get the
# paths of both compiled in and build after them; with gloo = ON, CPU ranks need bludist's Gloo
# backend (its PUBLIC BLUDIST_HAVE_GLOO=1): without it those tests skip.
function(blutrain_program_test target gloo)
  if(NOT (TARGET ${target} AND TARGET blutrain-cli AND TARGET blurun))
    return()
  endif()
  add_dependencies(${target} blutrain-cli blurun)
  target_compile_definitions(${target} PRIVATE
    BLUTRAIN_EXE="$<TARGET_FILE:blutrain-cli>" BLURUN_EXE="$<TARGET_FILE:blurun>")
  get_target_property(_bludist_defs bludist INTERFACE_COMPILE_DEFINITIONS)
  if(gloo AND "BLUDIST_HAVE_GLOO=1" IN_LIST _bludist_defs)
    target_compile_definitions(${target} PRIVATE BLUTRAIN_TEST_HAVE_GLOO=1)
  endif()
endfunction()

blutrain_program_test(blutrain_data_parallel_test ON)
# Sharded checkpoints written and resharded by CPU ranks (Note [Sharded checkpoints]).
blutrain_program_test(blutrain_sharded_checkpoint_test ON)
# The fused engine's data parallelism on two GPUs (blutrain --engine fused --dp 2 under blurun).
blutrain_program_test(blutrain_fused_dp_gpu_test OFF)
# The fused engine's --nonfinite stop on one GPU (a weight poisoned by the test hook).
blutrain_program_test(blutrain_fused_nonfinite_gpu_test OFF)
# The program killed with SIGKILL at a random moment and resumed (issue 14).
blutrain_program_test(blutrain_kill_resume_test OFF)
# blutrain train --tp 2 / --cp 2 as CPU ranks under blurun.
blutrain_program_test(blutrain_tensor_parallel_test ON)
blutrain_program_test(blutrain_context_parallel_test ON)
# GPT2 on a tensor-parallel group of thread ranks (bludist's Gloo test support).
if(TARGET blutrain_tp_model_test AND TARGET bludist_test_support)
  target_link_libraries(blutrain_tp_model_test PRIVATE bludist_test_support blu::dist)
endif()
# blutrain train --compile (Note [blutrain --compile]) runs blu-plan where the build has MLIR.
if(TARGET blutrain_captured_engine_test AND TARGET blu-plan)
  add_dependencies(blutrain_captured_engine_test blu-plan)
  target_compile_definitions(blutrain_captured_engine_test PRIVATE BLU_PLAN_EXE="$<TARGET_FILE:blu-plan>")
endif()

# Included by tests/CMakeLists.txt: tests that start the blutrain program (under blurun) get the
# paths of both compiled in and build after them.
if(TARGET blutrain_data_parallel_test AND TARGET blutrain-cli AND TARGET blurun)
  add_dependencies(blutrain_data_parallel_test blutrain-cli blurun)
  target_compile_definitions(blutrain_data_parallel_test PRIVATE
    BLUTRAIN_EXE="$<TARGET_FILE:blutrain-cli>" BLURUN_EXE="$<TARGET_FILE:blurun>")
  # CPU ranks need bludist's Gloo backend (its PUBLIC BLUDIST_HAVE_GLOO=1); without it they skip.
  get_target_property(_bludist_defs bludist INTERFACE_COMPILE_DEFINITIONS)
  if("BLUDIST_HAVE_GLOO=1" IN_LIST _bludist_defs)
    target_compile_definitions(blutrain_data_parallel_test PRIVATE BLUTRAIN_TEST_HAVE_GLOO=1)
  endif()
endif()
# The fused engine's data parallelism on two GPUs (blutrain --engine fused --dp 2 under blurun).
if(TARGET blutrain_fused_dp_gpu_test AND TARGET blutrain-cli AND TARGET blurun)
  add_dependencies(blutrain_fused_dp_gpu_test blutrain-cli blurun)
  target_compile_definitions(blutrain_fused_dp_gpu_test PRIVATE
    BLUTRAIN_EXE="$<TARGET_FILE:blutrain-cli>" BLURUN_EXE="$<TARGET_FILE:blurun>")
endif()
# GPT2 on a tensor-parallel group of thread ranks (bludist's Gloo test support).
if(TARGET blutrain_tp_model_test AND TARGET bludist_test_support)
  target_link_libraries(blutrain_tp_model_test PRIVATE bludist_test_support blu::dist)
endif()
# blutrain train --tp 2 as two CPU ranks under blurun.
if(TARGET blutrain_tensor_parallel_test AND TARGET blutrain-cli AND TARGET blurun)
  add_dependencies(blutrain_tensor_parallel_test blutrain-cli blurun)
  target_compile_definitions(blutrain_tensor_parallel_test PRIVATE
    BLUTRAIN_EXE="$<TARGET_FILE:blutrain-cli>" BLURUN_EXE="$<TARGET_FILE:blurun>")
  get_target_property(_bludist_defs bludist INTERFACE_COMPILE_DEFINITIONS)
  if("BLUDIST_HAVE_GLOO=1" IN_LIST _bludist_defs)
    target_compile_definitions(blutrain_tensor_parallel_test PRIVATE BLUTRAIN_TEST_HAVE_GLOO=1)
  endif()
endif()

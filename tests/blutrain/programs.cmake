# Included by tests/CMakeLists.txt: tests that start the blutrain program (under blurun) get the
# paths of both compiled in and build after them.
if(TARGET blutrain_data_parallel_test AND TARGET blutrain-cli AND TARGET blurun)
  add_dependencies(blutrain_data_parallel_test blutrain-cli blurun)
  target_compile_definitions(blutrain_data_parallel_test PRIVATE
    BLUTRAIN_EXE="$<TARGET_FILE:blutrain-cli>" BLURUN_EXE="$<TARGET_FILE:blurun>")
endif()

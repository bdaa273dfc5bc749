# The blucomp tests: every tests/blucomp/*.mlir is one ctest (label cpu) running its `// RUN:`
# lines through run_lit_test.sh with blu-opt, blu-ptx, FileCheck and `not` on PATH. A test whose
# RUN lines name ptxas (the PTX assembles for sm_90) is registered only when ptxas is found, one
# that runs blutrain (captured_step) only when the blutrain program is built.
find_program(BLU_FILECHECK FileCheck HINTS ${LLVM_TOOLS_BINARY_DIR} NO_DEFAULT_PATH)
find_program(BLU_FILECHECK FileCheck)
find_program(BLU_PTXAS ptxas HINTS ${CUDAToolkit_BIN_DIR} /usr/local/cuda/bin)
if(NOT BLU_FILECHECK)
  message(STATUS "blucomp tests: no FileCheck (apt-get install llvm-19-tools): not registered")
  return()
endif()
get_filename_component(blu_filecheck_dir ${BLU_FILECHECK} DIRECTORY)
set(blu_lit_path "$<TARGET_FILE_DIR:blu-opt>:${blu_filecheck_dir}")
string(APPEND blu_lit_path ":$<TARGET_FILE_DIR:capture_llama_step>")  # llama_block_step.mlir
if(TARGET blutrain-cli)  # captured_step.mlir captures with `blutrain capture`
  string(APPEND blu_lit_path ":$<TARGET_FILE_DIR:blutrain-cli>")
endif()
if(BLU_PTXAS)
  get_filename_component(blu_ptxas_dir ${BLU_PTXAS} DIRECTORY)
  string(APPEND blu_lit_path ":${blu_ptxas_dir}")
else()
  message(STATUS "blucomp tests: no ptxas: the PTX assembly check is not registered")
endif()
file(GLOB blu_lit_tests CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/blucomp/*.mlir)
foreach(test_file ${blu_lit_tests})
  get_filename_component(name ${test_file} NAME_WE)
  file(READ ${test_file} contents)
  if(contents MATCHES "RUN:[^\n]*ptxas" AND NOT BLU_PTXAS)
    continue()
  endif()
  if(contents MATCHES "RUN: blutrain" AND NOT TARGET blutrain-cli)
    continue()
  endif()
  add_test(NAME blucomp.${name}
           COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/blucomp/run_lit_test.sh ${test_file}
                   ${CMAKE_CURRENT_BINARY_DIR}/blucomp/${name})
  set_tests_properties(blucomp.${name} PROPERTIES LABELS cpu TIMEOUT 120
                       ENVIRONMENT "PATH=${blu_lit_path}:$ENV{PATH}")
endforeach()

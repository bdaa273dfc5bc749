# Included by tests/CMakeLists.txt: the worker program that bludist's tests start under blurun,
# and the paths of both, compiled into those tests.
add_executable(bludist_test_worker ${CMAKE_CURRENT_LIST_DIR}/worker/test_worker.cpp
               ${CMAKE_CURRENT_LIST_DIR}/support/mlp_ddp.cpp ${CMAKE_CURRENT_LIST_DIR}/support/parallel_checks.cpp)
target_link_libraries(bludist_test_worker PRIVATE blu::dist)
target_include_directories(bludist_test_worker PRIVATE ${CMAKE_CURRENT_LIST_DIR} ${CMAKE_CURRENT_LIST_DIR}/..)  # tests/common
blu_set_warnings(bludist_test_worker)
# The watchdog's deadline timer is internal (bludist/src): its test and the worker's CPU watchdog
# mode use it directly.
set(_bludist_src ${CMAKE_CURRENT_LIST_DIR}/../../bludist/src)
target_include_directories(bludist_test_worker PRIVATE ${_bludist_src})
if(TARGET bludist_watchdog_timer_test)
  target_include_directories(bludist_watchdog_timer_test PRIVATE ${_bludist_src})
endif()
file(GLOB _bludist_tests CONFIGURE_DEPENDS ${CMAKE_CURRENT_LIST_DIR}/*_test.cpp)
foreach(_src ${_bludist_tests})
  get_filename_component(_name ${_src} NAME_WE)
  if(TARGET bludist_${_name})
    add_dependencies(bludist_${_name} bludist_test_worker blurun)
    target_compile_definitions(bludist_${_name} PRIVATE
      BLUDIST_TEST_WORKER="$<TARGET_FILE:bludist_test_worker>" BLURUN_EXE="$<TARGET_FILE:blurun>")
  endif()
endforeach()

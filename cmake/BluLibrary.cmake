# Shared CMake helpers: warnings, the per-library version header and install/export of a layer.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

# blu_set_warnings(<target>): strict warnings for C++ and CUDA, errors where BLU_WARNINGS_AS_ERRORS.
function(blu_set_warnings target)
  set(cxx_flags -Wall -Wextra -Wno-unused-parameter)
  if(BLU_WARNINGS_AS_ERRORS)
    list(APPEND cxx_flags -Werror)
  endif()
  target_compile_options(${target} PRIVATE
    $<$<COMPILE_LANGUAGE:CXX>:${cxx_flags}>
    $<$<COMPILE_LANGUAGE:CUDA>:-Xcompiler=-Wall -Xptxas=--warn-on-spills -lineinfo
      --expt-relaxed-constexpr>)
  if(BLU_WARNINGS_AS_ERRORS)
    target_compile_options(${target} PRIVATE
      $<$<COMPILE_LANGUAGE:CUDA>:-Werror=all-warnings>)
  endif()
endfunction()

# blu_version_header(<target> <macro-prefix> <version> <include-subdir>): writes
# <binary>/include/<subdir>/version.h with <PREFIX>_VERSION_{MAJOR,MINOR,PATCH} and a string.
function(blu_version_header target prefix version subdir)
  string(REPLACE "." ";" parts ${version})
  list(GET parts 0 BLU_V_MAJOR)
  list(GET parts 1 BLU_V_MINOR)
  list(GET parts 2 BLU_V_PATCH)
  set(BLU_V_PREFIX ${prefix})
  set(BLU_V_STRING ${version})
  set(BLU_V_LIB ${subdir})
  configure_file(${PROJECT_SOURCE_DIR}/cmake/version.h.in
                 ${CMAKE_CURRENT_BINARY_DIR}/include/${subdir}/version.h @ONLY)
  target_include_directories(${target} PUBLIC
    $<BUILD_INTERFACE:${CMAKE_CURRENT_BINARY_DIR}/include>)
endfunction()

# blu_install_library(<target> <package> <version> <config.in>): installs the target, its headers
# and an exported package config so that find_package(<package> CONFIG) works from outside.
function(blu_install_library target package version config_in)
  install(TARGETS ${target} EXPORT ${package}Targets
          ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
          LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
          RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR}
          INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
  install(DIRECTORY ${CMAKE_CURRENT_SOURCE_DIR}/include/ DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
  install(DIRECTORY ${CMAKE_CURRENT_BINARY_DIR}/include/ DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
  install(EXPORT ${package}Targets NAMESPACE blu::
          DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/${package})
  configure_package_config_file(${config_in}
    ${CMAKE_CURRENT_BINARY_DIR}/${package}Config.cmake
    INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/${package})
  write_basic_package_version_file(${CMAKE_CURRENT_BINARY_DIR}/${package}ConfigVersion.cmake
    VERSION ${version} COMPATIBILITY SameMajorVersion)
  install(FILES ${CMAKE_CURRENT_BINARY_DIR}/${package}Config.cmake
                ${CMAKE_CURRENT_BINARY_DIR}/${package}ConfigVersion.cmake
          DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/${package})
endfunction()

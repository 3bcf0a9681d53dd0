# CPack pre-build script (cmake/kcachePackaging.cmake): the static library in
# the package loses its debug sections, as CPACK_STRIP_FILES does for the
# executables and modules (a RelWithDebInfo build's libkcache.a is mostly
# DWARF). Its symbol table stays: consumers link against it.
find_program(kcache_strip NAMES strip REQUIRED)
file(GLOB_RECURSE kcache_archives "${CPACK_TEMPORARY_INSTALL_DIRECTORY}/*.a")
foreach(a IN LISTS kcache_archives)
  execute_process(COMMAND "${kcache_strip}" --strip-debug "${a}" RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "strip --strip-debug ${a} failed")
  endif()
endforeach()

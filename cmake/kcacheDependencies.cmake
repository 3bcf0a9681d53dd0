# Checks, before the rest of the project is configured, that every library
# kcache builds against is there, and names each one that is missing with the
# Debian package that brings it, in one message. This is what a user sees who
# builds from the sdist (`pip install kcache-*.tar.gz`), `pip install .` or a
# checkout on a machine that lacks some of them (docs/install.md); the binary
# wheel and the Debian package need none of them.
#
# Runs after OPENSSL_USE_STATIC_LIBS is decided (the found libcrypto is cached).
set(kcache_missing_dependencies "")
macro(kcache_check_package package debian)
  find_package(${package} ${ARGN} QUIET)
  if(NOT ${package}_FOUND)
    list(APPEND kcache_missing_dependencies "${package} (Debian: ${debian})")
  endif()
endmacro()
if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU" AND CMAKE_CXX_COMPILER_VERSION VERSION_LESS 12)
  list(APPEND kcache_missing_dependencies
    "a C++20 compiler: GCC 12 or newer (this is GCC ${CMAKE_CXX_COMPILER_VERSION}; Debian: g++-12 or build-essential)")
endif()
if(NOT PKG_CONFIG_FOUND)
  list(APPEND kcache_missing_dependencies "pkg-config (Debian: pkg-config)")
endif()
if(OPENSSL_USE_STATIC_LIBS)
  kcache_check_package(OpenSSL "libssl-dev, for its static libcrypto.a")
else()
  kcache_check_package(OpenSSL libssl-dev)
endif()
kcache_check_package(nlohmann_json nlohmann-json3-dev 3.10)
kcache_check_package(fmt libfmt-dev)
kcache_check_package(tl-expected libexpected-dev)
kcache_check_package(CLI11 libcli11-dev)
kcache_check_package(tomlplusplus libtomlplusplus-dev)
# protobuf and ONNX by their files: src/plan/ makes their imported targets
# global, which it can only do for targets found in its own directory.
find_path(kcache_protobuf_include google/protobuf/message.h)
find_library(kcache_protobuf_library protobuf)
find_program(kcache_protoc protoc)
if(NOT kcache_protobuf_include OR NOT kcache_protobuf_library OR NOT kcache_protoc)
  list(APPEND kcache_missing_dependencies "Protobuf (Debian: libprotobuf-dev and protobuf-compiler)")
endif()
find_file(kcache_onnx_config NAMES ONNXConfig.cmake onnx-config.cmake
  PATH_SUFFIXES lib/cmake/ONNX lib/${CMAKE_LIBRARY_ARCHITECTURE}/cmake/ONNX share/cmake/ONNX)
if(NOT kcache_onnx_config OR CMAKE_DISABLE_FIND_PACKAGE_ONNX)
  list(APPEND kcache_missing_dependencies "ONNX (Debian: libonnx-dev)")
endif()
if(PKG_CONFIG_FOUND)
  pkg_check_modules(kcache_xxhash_probe QUIET libxxhash)
  if(NOT kcache_xxhash_probe_FOUND)
    list(APPEND kcache_missing_dependencies "xxHash (Debian: libxxhash-dev)")
  endif()
endif()
find_path(kcache_zstd_include zstd.h)
find_library(kcache_zstd_library zstd)
if(NOT kcache_zstd_include OR NOT kcache_zstd_library)
  list(APPEND kcache_missing_dependencies "zstd (Debian: libzstd-dev)")
endif()
if(KCACHE_BUILD_TESTS)
  kcache_check_package(GTest "libgtest-dev and libgmock-dev, or configure with -DKCACHE_BUILD_TESTS=OFF")
endif()
if(KCACHE_BUILD_BENCH)
  kcache_check_package(benchmark "libbenchmark-dev, or configure with -DKCACHE_BUILD_BENCH=OFF")
endif()
if(kcache_missing_dependencies)
  list(JOIN kcache_missing_dependencies "\n  " kcache_missing_text)
  message(FATAL_ERROR "kcache cannot be built here: missing\n  ${kcache_missing_text}\n"
    "On Debian or Ubuntu, scripts/bootstrap.sh installs everything the build needs. "
    "The binary wheel (pip install kcache-*.whl) and the Debian package need none of these.")
endif()

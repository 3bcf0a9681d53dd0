# The Debian package of kcache, made by CPack from any build tree of this
# project (scripts/build-deb.sh; docs/install.md):
#   cpack --config <build>/CPackConfig.cmake      -> kcache_<version>_<arch>.deb
# It holds everything `cmake --install` installs, under /usr: the kcache
# command, the stand-in library of `kcache run` and the ONNX module
# (/usr/lib/kcache/), the static library, the headers, and the CMake and
# pkg-config files. The version is the project's (CMakeLists.txt), the one
# version of the wheel, `kcache --version` and the CMake package too.
set(CPACK_GENERATOR "DEB")
set(CPACK_PACKAGE_NAME "kcache")
set(CPACK_PACKAGE_VENDOR "kcache")
set(CPACK_PACKAGE_CONTACT "kcache maintainers <kcache@localhost>")
set(CPACK_PACKAGE_VERSION "${PROJECT_VERSION}")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "${PROJECT_DESCRIPTION}")
set(CPACK_PACKAGE_DESCRIPTION "kcache makes sure GPU code is compiled once per process, machine and team, and never
returns a wrong binary: a verified cache for NVRTC, nvJitLink and NVVM compiles, nvcc
builds and inference-engine plans. This package holds the kcache command (kcache
compile, run, stats, verify, prune, bundle, remote, ...), the stand-in JIT library
behind `kcache run`, the ONNX module, and the C++ library with its headers, CMake
package (find_package(kcache)) and pkg-config file. The CUDA libraries (NVRTC,
nvJitLink, libNVVM) are loaded at run time from the CUDA toolkit.")
set(CPACK_PACKAGING_INSTALL_PREFIX "/usr")
# Only the FHS install rules (the default component): not the wheel's "python"
# component, where the tree is also a Python build.
set(CPACK_INSTALL_CMAKE_PROJECTS "${PROJECT_BINARY_DIR};kcache;Unspecified;/")
set(CPACK_STRIP_FILES ON)
set(CPACK_PRE_BUILD_SCRIPTS "${CMAKE_CURRENT_LIST_DIR}/kcacheDebStrip.cmake")
set(CPACK_DEBIAN_COMPRESSION_TYPE "xz")  # scripts/build-deb.sh: KCACHE_DEB_COMPRESSION=gzip is faster
set(CPACK_DEBIAN_FILE_NAME "DEB-DEFAULT")  # kcache_<version>_<arch>.deb
set(CPACK_DEBIAN_PACKAGE_SECTION "devel")
set(CPACK_DEBIAN_PACKAGE_PRIORITY "optional")
# The run-time libraries the binaries link (libc6, libstdc++6, libgcc-s1,
# libzstd1, protobuf's) are found by dpkg-shlibdeps; what a consumer of the
# C++ library links besides (the CMake package's find_dependency and the .pc
# file's Requires.private and Libs.private) comes from the -dev packages.
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
set(CPACK_DEBIAN_PACKAGE_DEPENDS "libexpected-dev, libssl-dev, libzstd-dev")
# dlopened at run time: libcurl for HTTP and S3 remotes, libssl for Redis over TLS.
set(CPACK_DEBIAN_PACKAGE_RECOMMENDS "libcurl4, libssl3 | libssl3t64, pkg-config, cmake")
set(CPACK_DEBIAN_PACKAGE_SUGGESTS "nvidia-cuda-toolkit, redis-server")
include(CPack)

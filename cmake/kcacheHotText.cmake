# The kcache command's hot path, side by side in its text (issue 40 item 5).
#
# A cache hit is a new process: each 64 KiB window of code it runs is a page
# fault (the kernel maps 16 cached pages per fault, ~5 µs each here), and the
# functions a hit runs were spread over the command's 6 MB of text: ~50 such
# faults. src/cli/hot-functions.txt (made by scripts/order-hot-functions.sh
# from callgrind runs of hits) lists them; lld's --symbol-ordering-file puts
# them first, which takes ~40 faults off a hit. That needs every function in a
# section of its own (-ffunction-sections, here for the library and the
# command; libstdc++.a is built so) and lld 15 or newer, the first to tag DT_RELR
# with glibc's GLIBC_ABI_DT_RELR (the command keeps its packed relocations).
# Without such an lld the command links as before, with the system's ld.
#
# Sets KCACHE_HOT_TEXT_LLD_DIR (a directory whose ld.lld is that linker, for
# `-B DIR -fuse-ld=lld`: GCC 12 has no --ld-path) when the order is used.
option(KCACHE_HOT_TEXT "Link the kcache command with its hot path's functions side by side (needs lld 15+)" ON)
set(KCACHE_HOT_TEXT_LLD_DIR "")
if(KCACHE_HOT_TEXT AND KCACHE_STATIC_DEPS AND NOT KCACHE_SANITIZE AND NOT KCACHE_PORTABLE
   AND CMAKE_CXX_COMPILER_ID MATCHES "GNU|Clang")
  find_program(KCACHE_LLD NAMES ld.lld-19 ld.lld-18 ld.lld-17 ld.lld-16 ld.lld-15 ld.lld
               DOC "lld 15 or newer, for the kcache command's hot-text order")
  set(kcache_lld_major 0)
  if(KCACHE_LLD)
    execute_process(COMMAND ${KCACHE_LLD} --version OUTPUT_VARIABLE kcache_lld_version ERROR_QUIET)
    if(kcache_lld_version MATCHES "LLD ([0-9]+)")
      set(kcache_lld_major ${CMAKE_MATCH_1})
    endif()
  endif()
  if(kcache_lld_major GREATER_EQUAL 15)
    set(KCACHE_HOT_TEXT_LLD_DIR ${PROJECT_BINARY_DIR}/hot-text-linker)
    file(MAKE_DIRECTORY ${KCACHE_HOT_TEXT_LLD_DIR})
    file(CREATE_LINK ${KCACHE_LLD} ${KCACHE_HOT_TEXT_LLD_DIR}/ld.lld SYMBOLIC)
    message(STATUS "kcache: the kcache command links its hot path side by side (${KCACHE_LLD}, lld ${kcache_lld_major})")
  else()
    message(STATUS "kcache: no lld 15 or newer (Debian: lld-16): the kcache command links without its hot-text "
                   "order (correct, ~10 % slower to start)")
  endif()
endif()

# How fast a clean build is: on the 2-core machines the README targets, `./ulysses test` spends
# most of its time compiling (README "Tests" gives the figures).
#
# Debug info of RelWithDebInfo builds. "lines" (-g1, the default) keeps file:line in backtraces,
# gdb, perf and sanitizer reports and compiles ~22% faster than -g (measured on engine, profiler,
# studio and test sources alike); "full" (-g) adds variables and types for a debugger.
set(ULYSSES_DEBUG_INFO "lines" CACHE STRING "Debug info of RelWithDebInfo builds: lines (-g1) or full (-g)")
set_property(CACHE ULYSSES_DEBUG_INFO PROPERTY STRINGS lines full)
if(ULYSSES_DEBUG_INFO STREQUAL "lines")
  string(REGEX REPLACE "(^| )-g( |$)" "\\1-g1\\2" CMAKE_CXX_FLAGS_RELWITHDEBINFO "${CMAKE_CXX_FLAGS_RELWITHDEBINFO}")
elseif(NOT ULYSSES_DEBUG_INFO STREQUAL "full")
  message(FATAL_ERROR "ULYSSES_DEBUG_INFO must be lines or full, not '${ULYSSES_DEBUG_INFO}'")
endif()

# The gold linker (binutils, so on every machine with build-essential) links the libtorch
# test programs ~3x faster than the default ld.bfd. GCC only, and never with sanitizers:
# clang's sanitizer runtimes make gold warn on every link, and a ThreadSanitizer program that
# gold linked died of SIGBUS under a file-size limit (ulimit -f) where the ld.bfd one ran
# (Reliability.AFileSizeLimitEndsTheRunWithAFinalStatusAndNoTornLine under ci-tsan).
# ULYSSES_GOLD=OFF keeps the default linker.
option(ULYSSES_GOLD "Link with gold (GCC builds without sanitizers)" ON)
if(ULYSSES_GOLD AND CMAKE_CXX_COMPILER_ID STREQUAL "GNU" AND NOT "${CMAKE_CXX_FLAGS} ${CMAKE_EXE_LINKER_FLAGS}" MATCHES
                                                               "-fsanitize")
  include(CheckLinkerFlag)
  check_linker_flag(CXX "-fuse-ld=gold" ULYSSES_HAVE_GOLD)
  if(ULYSSES_HAVE_GOLD)
    add_link_options(-fuse-ld=gold)
  endif()
endif()

# libFuzzer targets in this build (the ci-asan preset; clang only): every source gets the
# fuzzer's coverage instrumentation, which the fuzz targets need from the libraries they link.
option(ULYSSES_FUZZ "Build the libFuzzer targets (clang) and run each in CTest" OFF)
set(ULYSSES_FUZZ_SECONDS 10 CACHE STRING "seconds per fuzz target in CTest (0: no fuzz test)")
if(ULYSSES_FUZZ)
  add_compile_options(-fsanitize=fuzzer-no-link)
endif()

# Unity builds: each target's sources are compiled in batches of up to 8 (CMake's
# CMAKE_UNITY_BUILD), so shared headers are parsed and their templates instantiated and
# optimised once per batch instead of once per file. The libtorch sources gain most: the
# engine's 13 sources in two batches compile 3.2-3.4x faster than one by one (see
# docs/CODING.md). Sources of one target must therefore not define two file-local (anonymous
# namespace or static) names alike. ULYSSES_UNITY=OFF compiles file by file.
option(ULYSSES_UNITY "Compile each target's sources in batches (CMAKE_UNITY_BUILD)" ON)
if(ULYSSES_UNITY)
  set(CMAKE_UNITY_BUILD ON)
  # A test fixture in an anonymous namespace used by TEST_F is, inside a batch, "from another
  # file" to GCC, which then warns (-Wsubobject-linkage) although the program is the same.
  if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
    target_compile_options(ulysses_warnings INTERFACE -Wno-subobject-linkage)
  endif()
endif()

# Optional dependencies: libtorch, Qt 6, CUDA parts (NVTX3 headers, CUPTI, NCCL).
# Each is detected once here and reported in one printed summary.
set(ULYSSES_FEATURES "")
macro(ulysses_feature name on detail)
  list(APPEND ULYSSES_FEATURES "${name}|${on}|${detail}")
endmacro()

# --- libtorch -----------------------------------------------------------------
set(ULYSSES_HAVE_TORCH OFF)
set(ULYSSES_CUDA_ROOT "/usr/local/cuda" CACHE PATH "CUDA toolkit root (NVTX3, CUPTI, NCCL)")
if(ULYSSES_BUILD_ENGINE)
  # A CUDA libtorch's config enables CUDA and, unless told to use the toolkit's header-only
  # NVTX3, looks for libnvToolsExt, which CUDA >= 12.9 no longer ships (some 2.x releases then
  # fail). The toolkit's nvtx3 headers serve every version.
  if(NOT DEFINED USE_SYSTEM_NVTX AND NOT ULYSSES_CUDA STREQUAL "off" AND EXISTS
                                                                     "${ULYSSES_CUDA_ROOT}/include/nvtx3/nvToolsExt.h")
    set(USE_SYSTEM_NVTX ON CACHE BOOL "libtorch's CUDA config: the toolkit's header-only NVTX3")
  endif()
  find_package(Torch QUIET)
  if(Torch_FOUND AND "${TORCH_CXX_FLAGS}" MATCHES "_GLIBCXX_USE_CXX11_ABI=0")
    # Wheels before 2.7 are built with the pre-C++11 std::string; Debian's GoogleTest, Qt and
    # every library here use the C++11 one, and the two do not link together.
    message(FATAL_ERROR "libtorch at ${TORCH_INSTALL_PREFIX} (Torch ${Torch_VERSION}) uses the pre-C++11 ABI "
                        "(_GLIBCXX_USE_CXX11_ABI=0), which Debian's libraries cannot link with. Use a libtorch built "
                        "with the C++11 ABI: PyTorch 2.7 or later (pip), the cxx11-abi libtorch archive, or Debian's "
                        "libtorch-dev.")
  endif()
  if(Torch_FOUND)
    set(ULYSSES_HAVE_TORCH ON)
    ulysses_feature("engine (libtorch)" ON "Torch ${Torch_VERSION}")
  else()
    ulysses_feature("engine (libtorch)" OFF "libtorch not found: apt install libtorch-dev, or set CMAKE_PREFIX_PATH")
  endif()
endif()

# --- Qt 6 -----------------------------------------------------------------------
set(ULYSSES_HAVE_QT OFF)
if(ULYSSES_BUILD_UI)
  find_package(Qt6 6.2 QUIET COMPONENTS Core Gui Widgets Charts Test)
  if(Qt6_FOUND)
    set(ULYSSES_HAVE_QT ON)
    ulysses_feature("studio (Qt 6)" ON "Qt ${Qt6_VERSION}")
  else()
    ulysses_feature("studio (Qt 6)" OFF "Qt 6 not found: apt install qt6-base-dev qt6-charts-dev")
  endif()
endif()

# --- CUDA parts -------------------------------------------------------------------
set(ULYSSES_HAVE_NVTX OFF)
set(ULYSSES_HAVE_CUPTI OFF)
if(NOT ULYSSES_CUDA STREQUAL "off")
  find_path(ULYSSES_NVTX3_INCLUDE nvtx3/nvToolsExt.h HINTS ${ULYSSES_CUDA_ROOT}/include)
  # CUPTI as the toolkit ships it (lib64/libcupti.so) and as pip's nvidia-cuda-cupti-cu12 /
  # nvidia-cuda-cupti (cu13) wheels do: only the soname (libcupti.so.12 / .so.13), no libcupti.so
  # link, under site-packages/nvidia/cuda_cupti or nvidia/cu13 (give that folder as ULYSSES_CUPTI_ROOT).
  set(ULYSSES_CUPTI_ROOT "" CACHE PATH "Folder holding CUPTI's include/ and lib/ when not in the toolkit (pip wheels)")
  find_path(ULYSSES_CUPTI_INCLUDE cupti.h HINTS ${ULYSSES_CUPTI_ROOT}/include ${ULYSSES_CUDA_ROOT}/include
            ${ULYSSES_CUDA_ROOT}/extras/CUPTI/include)
  find_library(ULYSSES_CUPTI_LIB NAMES cupti libcupti.so.13 libcupti.so.12 NAMES_PER_DIR
               HINTS ${ULYSSES_CUPTI_ROOT}/lib ${ULYSSES_CUPTI_ROOT}/lib64 ${ULYSSES_CUDA_ROOT}/lib64
                     ${ULYSSES_CUDA_ROOT}/lib ${ULYSSES_CUDA_ROOT}/extras/CUPTI/lib64)
  if(ULYSSES_NVTX3_INCLUDE)
    set(ULYSSES_HAVE_NVTX ON)
  endif()
  if(ULYSSES_CUPTI_INCLUDE AND ULYSSES_CUPTI_LIB)
    set(ULYSSES_HAVE_CUPTI ON)
  endif()
  if(ULYSSES_CUDA STREQUAL "on" AND NOT (ULYSSES_HAVE_NVTX AND ULYSSES_HAVE_CUPTI))
    message(FATAL_ERROR "ULYSSES_CUDA=on but NVTX3/CUPTI were not found under ${ULYSSES_CUDA_ROOT}")
  endif()
endif()
if(ULYSSES_HAVE_NVTX)
  ulysses_feature("NVTX ranges" ON "${ULYSSES_NVTX3_INCLUDE}")
else()
  ulysses_feature("NVTX ranges" OFF "no nvtx3 headers under ${ULYSSES_CUDA_ROOT} (or ULYSSES_CUDA=off): ranges are host-only")
endif()
if(ULYSSES_HAVE_CUPTI)
  ulysses_feature("CUPTI activity" ON "${ULYSSES_CUPTI_LIB}")
else()
  ulysses_feature("CUPTI activity" OFF "no CUPTI under ${ULYSSES_CUDA_ROOT} (or ULYSSES_CUDA=off): no GPU kernel tracing")
endif()

function(ulysses_feature_summary)
  message(STATUS "")
  message(STATUS "Ulysses Studio feature summary")
  foreach(f ${ULYSSES_FEATURES})
    string(REPLACE "|" ";" parts "${f}")
    list(GET parts 0 name)
    list(GET parts 1 state)
    list(GET parts 2 detail)
    if(state)
      message(STATUS "  [on ] ${name}  ${detail}")
    else()
      message(STATUS "  [off] ${name}  ${detail}")
    endif()
  endforeach()
  message(STATUS "")
endfunction()

# The libraries lwcl's headers use, gathered into one interface target `lwcl_deps`. Shared by the
# source tree and the installed package config, so both resolve dependencies the same way.
#
# OpenBLAS: the OpenMP build is preferred. lwcl's host kernels run in OpenMP parallel regions between
# GEMMs; with the pthreads build, OpenMP's spinning workers and OpenBLAS's own threads compete for the
# cores and a 2-block GPT-2 step ran about 2x slower (bench/peer, docs/benchmarks.md).
include_guard(GLOBAL)
find_package(OpenMP REQUIRED COMPONENTS CXX)
find_package(nlohmann_json 3 REQUIRED)
find_package(PkgConfig REQUIRED)
find_package(ICU REQUIRED COMPONENTS uc)  # Unicode classes for the tokenizers
pkg_check_modules(LWCL_ZSTD REQUIRED IMPORTED_TARGET GLOBAL libzstd)  # the feature cache's zstd codec
find_package(PNG REQUIRED)  # the run reports' plots (include/lwcl/report/plot.hpp)
find_package(ZLIB REQUIRED)  # CRC-32 of the disk cache's records (include/lwcl/cache/disk_store.hpp)
find_package(Pagmo REQUIRED)  # GeLaCo's NSGA-II, genetic operators and hypervolume (include/lwcl/gelaco/search.hpp)

set(LWCL_OPENBLAS_OPENMP_DIR "/usr/lib/${CMAKE_LIBRARY_ARCHITECTURE}/openblas-openmp")
find_library(LWCL_OPENBLAS_LIBRARY NAMES openblas PATHS ${LWCL_OPENBLAS_OPENMP_DIR} NO_DEFAULT_PATH)
find_path(LWCL_OPENBLAS_INCLUDE_DIR cblas.h PATHS /usr/include/${CMAKE_LIBRARY_ARCHITECTURE}/openblas-openmp NO_DEFAULT_PATH)

# The optional GEMM providers that gemm::chosen (include/lwcl/backend/host/gemm_chosen.hpp) measures
# against OpenBLAS at run time: oneDNN (dnnl_sgemm) and BLIS. Each one found is linked into lwcl_deps with
# LWCL_HAVE_ONEDNN=1 / LWCL_HAVE_BLIS=1, so every program carries the same set; without them gemm::chosen
# is OpenBLAS alone. -DLWCL_WITH_ONEDNN=OFF / -DLWCL_WITH_BLIS=OFF leave one out.
#  - oneDNN is found by header and library: Debian's dnnl CMake package insists on OpenCL (a hard error
#    when absent, even under QUIET), which dnnl_sgemm does not need.
#  - BLIS has no .pc file on Debian. Its OpenMP build keeps blis.h in .../blis-openmp beside a cblas.h of
#    its own, so that directory comes after OpenBLAS's, whose cblas.h must win; and libblis is linked
#    after libopenblas, because BLIS exports the CBLAS and Fortran BLAS symbols too and the first library
#    on the link line serves cblas_sgemm.
option(LWCL_WITH_ONEDNN "Build oneDNN into gemm::chosen when it is found (Debian: libdnnl-dev)" ON)
option(LWCL_WITH_BLIS "Build BLIS into gemm::chosen when it is found (Debian: libblis-dev)" ON)
set(LWCL_HAVE_ONEDNN OFF)
set(LWCL_HAVE_BLIS OFF)
if(LWCL_WITH_ONEDNN)
  find_path(LWCL_ONEDNN_INCLUDE_DIR oneapi/dnnl/dnnl.h)
  find_library(LWCL_ONEDNN_LIBRARY dnnl)
  if(LWCL_ONEDNN_INCLUDE_DIR AND LWCL_ONEDNN_LIBRARY)
    set(LWCL_HAVE_ONEDNN ON)
  endif()
endif()
if(LWCL_WITH_BLIS AND LWCL_OPENBLAS_LIBRARY AND LWCL_OPENBLAS_INCLUDE_DIR)  # (the order needs OpenBLAS's own directory)
  find_path(LWCL_BLIS_INCLUDE_DIR blis.h PATH_SUFFIXES blis-openmp blis)
  find_library(LWCL_BLIS_LIBRARY blis PATH_SUFFIXES blis-openmp)
  if(LWCL_BLIS_INCLUDE_DIR AND LWCL_BLIS_LIBRARY)
    set(LWCL_HAVE_BLIS ON)
  endif()
endif()

if(NOT TARGET lwcl_deps)
  add_library(lwcl_deps INTERFACE)
  target_link_libraries(lwcl_deps INTERFACE OpenMP::OpenMP_CXX nlohmann_json::nlohmann_json ICU::uc PkgConfig::LWCL_ZSTD
                                           PNG::PNG ZLIB::ZLIB)
  if(LWCL_OPENBLAS_LIBRARY AND LWCL_OPENBLAS_INCLUDE_DIR)
    target_link_libraries(lwcl_deps INTERFACE ${LWCL_OPENBLAS_LIBRARY})
    target_include_directories(lwcl_deps SYSTEM INTERFACE ${LWCL_OPENBLAS_INCLUDE_DIR})
  else()
    message(WARNING "lwcl: OpenBLAS's OpenMP build was not found (Debian: libopenblas-openmp-dev); "
                    "using the default OpenBLAS, whose threads compete with lwcl's OpenMP kernels")
    find_package(PkgConfig REQUIRED)
    pkg_check_modules(LWCL_OPENBLAS REQUIRED IMPORTED_TARGET GLOBAL openblas)
    target_link_libraries(lwcl_deps INTERFACE PkgConfig::LWCL_OPENBLAS)
  endif()
  # After OpenBLAS, for the include and link order explained above.
  set(lwcl_gemm_providers openblas)
  if(LWCL_HAVE_ONEDNN)
    target_include_directories(lwcl_deps SYSTEM INTERFACE ${LWCL_ONEDNN_INCLUDE_DIR})
    target_link_libraries(lwcl_deps INTERFACE ${LWCL_ONEDNN_LIBRARY})
    target_compile_definitions(lwcl_deps INTERFACE LWCL_HAVE_ONEDNN=1)
    string(APPEND lwcl_gemm_providers ", onednn")
  endif()
  if(LWCL_HAVE_BLIS)
    target_include_directories(lwcl_deps SYSTEM INTERFACE ${LWCL_BLIS_INCLUDE_DIR})
    target_link_libraries(lwcl_deps INTERFACE ${LWCL_BLIS_LIBRARY})
    target_compile_definitions(lwcl_deps INTERFACE LWCL_HAVE_BLIS=1)
    string(APPEND lwcl_gemm_providers ", blis")
  endif()
  message(STATUS "lwcl: host GEMM providers for gemm::chosen: ${lwcl_gemm_providers}")
endif()

# GeLaCo's search (include/lwcl/gelaco/search.hpp) links pagmo2; only what includes it needs this.
if(NOT TARGET lwcl_gelaco_deps)
  add_library(lwcl_gelaco_deps INTERFACE)
  target_link_libraries(lwcl_gelaco_deps INTERFACE Pagmo::pagmo)
endif()

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
endif()

# GeLaCo's search (include/lwcl/gelaco/search.hpp) links pagmo2; only what includes it needs this.
if(NOT TARGET lwcl_gelaco_deps)
  add_library(lwcl_gelaco_deps INTERFACE)
  target_link_libraries(lwcl_gelaco_deps INTERFACE Pagmo::pagmo)
endif()

# The libraries lwcl's headers use, gathered into one interface target `lwcl_deps`. Shared by the
# source tree and the installed package config, so both resolve dependencies the same way.
include_guard(GLOBAL)
find_package(OpenMP REQUIRED COMPONENTS CXX)
find_package(nlohmann_json 3 REQUIRED)
find_package(PkgConfig REQUIRED)
pkg_check_modules(LWCL_OPENBLAS REQUIRED IMPORTED_TARGET GLOBAL openblas)

if(NOT TARGET lwcl_deps)
  add_library(lwcl_deps INTERFACE)
  target_link_libraries(lwcl_deps INTERFACE OpenMP::OpenMP_CXX nlohmann_json::nlohmann_json PkgConfig::LWCL_OPENBLAS)
endif()

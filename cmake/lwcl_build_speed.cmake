# Build-speed settings for lwcl's own tests, experiments and benchmarks (never forced on a consumer of
# lwcl::lwcl): ccache when it is installed, and the precompiled headers the programs share.
# docs/building.md has the measurements behind each choice.
include_guard(GLOBAL)

# ccache, when present and no launcher was chosen: a rebuild of an unchanged translation unit is a
# cache hit. The sloppiness lets it cache units compiled with a precompiled header; the base directory
# (this source tree) makes the paths it hashes relative, so that another clone of the same sources hits
# the same entries. LWCL_CCACHE=OFF turns it off.
option(LWCL_CCACHE "Compile through ccache when it is installed" ON)
find_program(LWCL_CCACHE_PROGRAM ccache)
if(LWCL_CCACHE AND LWCL_CCACHE_PROGRAM)
  set(lwcl_launcher ${CMAKE_COMMAND} -E env CCACHE_SLOPPINESS=pch_defines,time_macros,include_file_mtime,include_file_ctime
                    CCACHE_BASEDIR=${PROJECT_SOURCE_DIR} ${LWCL_CCACHE_PROGRAM})
  if(NOT CMAKE_CXX_COMPILER_LAUNCHER)
    set(CMAKE_CXX_COMPILER_LAUNCHER ${lwcl_launcher})
  endif()
  if(NOT CMAKE_CUDA_COMPILER_LAUNCHER)
    set(CMAKE_CUDA_COMPILER_LAUNCHER ${lwcl_launcher})
  endif()
  message(STATUS "lwcl: compiling through ${LWCL_CCACHE_PROGRAM}")
endif()

# Precompiled headers: what nearly every test or program includes (the standard library, the JSON and
# test or command-line libraries, and lwcl's lower floors), parsed once per target family instead of
# once per translation unit. LWCL_PCH=OFF builds without them (every unit then parses its own includes,
# which also checks that each includes what it uses).
option(LWCL_PCH "Precompile the headers shared by the tests and by the experiments" ON)

# Under ccache, the flags that let it cache units built with a precompiled header: GCC must show it
# the header's use in the preprocessed output (-fpch-preprocess); clang must not stamp the header with
# its build time.
set(lwcl_pch_ccache_flags "")
if(LWCL_CCACHE AND LWCL_CCACHE_PROGRAM)
  set(lwcl_pch_ccache_flags "$<$<CXX_COMPILER_ID:GNU>:-fpch-preprocess>"
                            "$<$<CXX_COMPILER_ID:Clang>:SHELL:-Xclang -fno-pch-timestamp>")
endif()

# lwcl_precompile(<target> <header>...): gives <target> a precompiled header of the listed headers.
function(lwcl_precompile target)
  if(LWCL_PCH)
    target_precompile_headers(${target} PRIVATE ${ARGN})
    target_compile_options(${target} PRIVATE ${lwcl_pch_ccache_flags})
  endif()
endfunction()

# lwcl_reuse_precompiled(<target> <from>): <target> uses <from>'s precompiled header (same flags).
function(lwcl_reuse_precompiled target from)
  if(LWCL_PCH)
    target_precompile_headers(${target} REUSE_FROM ${from})
    target_compile_options(${target} PRIVATE ${lwcl_pch_ccache_flags})
  endif()
endfunction()

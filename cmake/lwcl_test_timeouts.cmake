# Every ctest test bounded: a test registered without a TIMEOUT gets its label's default, applied at the
# end of the directory that registered it (CMake 3.25 can set a test's properties only from there). A
# directory with tests calls lwcl_bound_tests() once, near its top; tools/check_test_timeouts.py (the
# ctest test `test_timeouts`) fails on any registered test that still has none. A test whose measured
# time needs more than its label allows sets TIMEOUT itself, with the measurement beside it.
include_guard(GLOBAL)

# Seconds per label, the first label of a test that is listed here wins (cuda and slow before the
# rest, since a test labelled unit;slow is slow). Sized from tools/test.sh's runs on the 2-core machine
# (docs/building.md): the slowest unit test under ASan took about 150 s, the slowest program test
# about 200 s.
set(LWCL_TEST_TIMEOUT_cuda 1800)
set(LWCL_TEST_TIMEOUT_slow 3600)
set(LWCL_TEST_TIMEOUT_fuzz 600)
set(LWCL_TEST_TIMEOUT_unit 900)
set(LWCL_TEST_TIMEOUT_program 900)
set(LWCL_TEST_TIMEOUT_dist 300)
set(LWCL_TEST_TIMEOUT_consumer 600)
set(LWCL_TEST_TIMEOUT_compile_fail 300)
set(LWCL_TEST_TIMEOUT_default 300)  # no label: the scripted checks (layering, interop)
set(lwcl_timeout_label_order cuda slow fuzz unit program dist consumer compile_fail)

function(lwcl_apply_test_timeouts)
  get_property(tests DIRECTORY PROPERTY TESTS)
  foreach(t IN LISTS tests)
    get_test_property(${t} TIMEOUT have)
    if(have)
      continue()
    endif()
    get_test_property(${t} LABELS labels)
    set(seconds ${LWCL_TEST_TIMEOUT_default})
    if(labels)
      foreach(l IN LISTS lwcl_timeout_label_order)
        if(l IN_LIST labels)
          set(seconds ${LWCL_TEST_TIMEOUT_${l}})
          break()
        endif()
      endforeach()
    endif()
    set_tests_properties(${t} PROPERTIES TIMEOUT ${seconds})
  endforeach()
endfunction()

# Call once in a CMakeLists.txt that registers tests: the defaults are applied when its directory ends,
# after every add_test and set_tests_properties of it.
macro(lwcl_bound_tests)
  cmake_language(DEFER CALL lwcl_apply_test_timeouts)
endmacro()

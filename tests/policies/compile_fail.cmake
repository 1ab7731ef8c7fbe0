# Builds TARGET in BUILD_DIR and passes only if the build fails with the text of SOURCE's
# `// expect: ` line in the compiler's output: a failure for any other reason is a test failure too.
file(STRINGS ${SOURCE} expect_lines REGEX "^// expect: ")
list(LENGTH expect_lines n)
if(NOT n EQUAL 1)
  message(FATAL_ERROR "${SOURCE}: expected exactly one `// expect: <text>` line, found ${n}")
endif()
string(REGEX REPLACE "^// expect: " "" expected "${expect_lines}")
execute_process(COMMAND ${CMAKE_COMMAND} --build ${BUILD_DIR} --target ${TARGET}
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
if(rc EQUAL 0)
  message(FATAL_ERROR "${SOURCE} compiled, but it must fail with: ${expected}")
endif()
string(FIND "${out}" "${expected}" at)
if(at EQUAL -1)
  message(FATAL_ERROR "${SOURCE} failed to compile, but its output lacks the expected text '${expected}':\n${out}")
endif()
message(STATUS "${SOURCE} failed to compile, as expected, with: ${expected}")

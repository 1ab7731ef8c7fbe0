// lwcl::error, fail and check: the message is the pieces streamed together, and check throws only when
// its condition is false (and then with that message).
#include <doctest/doctest.h>

#include <new>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "lwcl/core/error.hpp"
#include "lwcl/core/program.hpp"

using namespace lwcl;

TEST_CASE("fail streams its pieces into the message of an lwcl::error") {
  static_assert(std::is_base_of_v<std::runtime_error, error>);
  try {
    fail("layernorm_forward: weight has ", 23, " elements, expected ", 24, " (eps ", 1e-5, ")");
    FAIL("fail returned");
  } catch (const error& e) {
    CHECK(std::string(e.what()) == "layernorm_forward: weight has 23 elements, expected 24 (eps 1e-05)");
  }
  CHECK_THROWS_AS(fail("x"), std::runtime_error);
}

TEST_CASE("check throws exactly when its condition is false") {
  CHECK_NOTHROW(check(true, "never shown"));
  CHECK_THROWS_WITH_AS(check(false, "shard '", std::string("a.bin"), "' has ", 3u, " tokens"),
                       "shard 'a.bin' has 3 tokens", lwcl::error);
  int evaluated = 0;
  auto cond = [&] { return ++evaluated > 0; };
  CHECK_NOTHROW(check(cond(), "message"));
  CHECK(evaluated == 1);
}

TEST_CASE("report_failure: what is not an lwcl::error ends a program with code 2 and one line, not an abort") {
  CHECK(lwcl::report_failure(std::bad_alloc()) == 2);
  CHECK(lwcl::report_failure(std::length_error("vector::reserve")) == 2);
  CHECK(noexcept(lwcl::report_failure(std::bad_alloc())));
}

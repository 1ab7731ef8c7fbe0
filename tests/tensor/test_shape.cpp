// shape: the rank limit and negative extents are errors, numel/inner/last, printing, and axis checks.
#include <doctest/doctest.h>

#include <sstream>
#include <vector>

#include "lwcl/tensor/shape.hpp"

using namespace lwcl;

TEST_CASE("shape rejects more than six axes and negative extents") {
  CHECK_NOTHROW(shape{1, 2, 3, 4, 5, 6});
  CHECK_THROWS_WITH_AS((shape{1, 2, 3, 4, 5, 6, 7}), "shape: rank 7 exceeds the maximum of 6", lwcl::error);
  shape s{1, 2, 3, 4, 5, 6};
  CHECK_THROWS_WITH_AS(s.push(7), "shape: rank exceeds the maximum of 6", lwcl::error);
  CHECK(s.rank() == 6);
  CHECK_THROWS_WITH_AS((shape{2, -1}), "shape: negative extent -1", lwcl::error);
  const std::vector<long> seven(7, 1);
  CHECK_THROWS_WITH_AS(shape::from_range(seven.begin(), seven.end()), doctest::Contains("exceeds the maximum of 6"),
                       lwcl::error);
}

TEST_CASE("shape numel, inner, last and rank") {
  CHECK(shape{}.numel() == 1);
  CHECK(shape{}.rank() == 0);
  CHECK(shape{}.last() == 1);
  CHECK(shape{2, 3, 4}.numel() == 24);
  CHECK(shape{2, 3, 4}.inner() == 12);
  CHECK(shape{2, 3, 4}.last() == 4);
  CHECK(shape{3, 0, 2}.numel() == 0);
  CHECK(shape{7}.inner() == 1);
  CHECK(shape{100000, 100000, 1000}.numel() == 10000000000000LL);  // 64-bit extents
  const std::vector<int> dims = {5, 6};
  CHECK(shape::from_range(dims.begin(), dims.end()) == shape{5, 6});
}

TEST_CASE("shape prints, compares and checks its axes") {
  CHECK(shape{2, 3, 4}.str() == "[2, 3, 4]");
  CHECK(shape{}.str() == "[]");
  CHECK(shape{0}.str() == "[0]");
  std::ostringstream os;
  os << shape{8, 1};
  CHECK(os.str() == "[8, 1]");
  CHECK(shape{2, 3} == shape{2, 3});
  CHECK(shape{2, 3} != shape{3, 2});
  CHECK(shape{2, 3} != shape{2, 3, 1});
  const shape s{2, 3, 4};
  CHECK(s[0] == 2);
  CHECK(s[2] == 4);
  CHECK_THROWS_WITH_AS(s[3], "shape: axis 3 out of range for rank 3", lwcl::error);
  CHECK_THROWS_WITH_AS(s[-1], "shape: axis -1 out of range for rank 3", lwcl::error);
}

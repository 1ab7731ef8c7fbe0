// Element-wise ops (add, accumulate, scale, copy): exact results against the same arithmetic written out,
// aliasing, their use as each other's backward checked by finite differences, and argument checks.
// No PyTorch fixture: each output element is one IEEE operation, so the expected values are exact.
#include <doctest/doctest.h>

#include <cstdint>

#include "lwcl/backend/host/host.hpp"
#include "lwcl/ops/elementwise.hpp"
#include "support/check.hpp"

using namespace lwcl;

namespace {

template <class T>
struct ew_case {
  shape s{3, 5, 7};
  std::size_t n = static_cast<std::size_t>(s.numel());
  std::vector<T> a = test::random_normal<T>(n, 1), b = test::random_normal<T>(n, 2), out = std::vector<T>(n);
  backend::cpu be;
  tensor t(std::vector<T>& v) { return tensor(v.data(), s); }
};

}  // namespace

TEST_CASE_TEMPLATE("add, accumulate, scale and copy compute exactly what they say", T, float, double) {
  ew_case<T> c;
  ops::add(c.be, c.t(c.out), c.t(c.a), c.t(c.b));
  for (std::size_t i = 0; i < c.n; ++i) CHECK(c.out[i] == c.a[i] + c.b[i]);

  auto dst = c.a;
  ops::accumulate(c.be, c.t(dst), c.t(c.b));
  for (std::size_t i = 0; i < c.n; ++i) CHECK(dst[i] == c.a[i] + c.b[i]);

  auto x = c.a;
  ops::scale(c.be, c.t(x), 0.37);
  for (std::size_t i = 0; i < c.n; ++i) CHECK(x[i] == c.a[i] * static_cast<T>(0.37));

  std::vector<T> copied(c.n);
  ops::copy(c.be, c.t(copied), c.t(c.a));
  CHECK(copied == c.a);

  std::vector<T> m(c.n);
  ops::mix(c.be, c.t(m), c.t(c.a), c.t(c.b), 0.25);
  for (std::size_t i = 0; i < c.n; ++i) CHECK(m[i] == static_cast<T>(0.75) * c.a[i] + static_cast<T>(0.25) * c.b[i]);
  ops::mix(c.be, c.t(m), c.t(c.a), c.t(c.b), 0.0);  // the ends of a ramp give either input bit for bit
  CHECK(m == c.a);
  ops::mix(c.be, c.t(m), c.t(c.a), c.t(c.b), 1.0);
  CHECK(m == c.b);
}

TEST_CASE("add may write into either of its inputs") {
  ew_case<float> c;
  ops::add(c.be, c.t(c.out), c.t(c.a), c.t(c.b));
  auto a = c.a, b = c.b;
  ops::add(c.be, c.t(a), c.t(a), c.t(c.b));
  ops::add(c.be, c.t(b), c.t(c.a), c.t(b));
  CHECK(a == c.out);
  CHECK(b == c.out);
  auto self = c.a;
  ops::copy(c.be, c.t(self), c.t(self));  // a no-op, not undefined behaviour
  CHECK(self == c.a);
}

TEST_CASE("copy moves any dtype bit for bit") {
  backend::cpu be;
  std::vector<std::int32_t> ids = {3, -1, 70000, 0}, ids_out(4);
  ops::copy(be, tensor(ids_out.data(), {4}), tensor(ids.data(), {4}));
  CHECK(ids_out == ids);
  std::vector<bf16> h = {bf16::from_float(1.5f), bf16::from_float(-2.25f)}, h_out(2);
  ops::copy(be, tensor(h_out.data(), {2}), tensor(h.data(), {2}));
  CHECK(h_out[0].bits == h[0].bits);
  CHECK(h_out[1].bits == h[1].bits);
}

TEST_CASE("accumulate and scale are the backward of add and scale (finite differences)") {
  // loss = sum w * (alpha * (a + b)): its gradient for a and for b is alpha * w, built from the ops as a
  // residual block's backward would build it.
  ew_case<double> c;
  const double alpha = -1.7;
  const auto w = test::random_normal<double>(c.n, 3);
  auto loss = [&] {
    ops::add(c.be, c.t(c.out), c.t(c.a), c.t(c.b));
    ops::scale(c.be, c.t(c.out), alpha);
    return test::dot(c.out, w);
  };
  auto dout = w;
  ops::scale(c.be, c.t(dout), alpha);
  std::vector<double> da(c.n), db(c.n);
  ops::accumulate(c.be, c.t(da), c.t(dout));
  ops::accumulate(c.be, c.t(db), c.t(dout));
  CHECK(test::gradcheck(c.a, da, loss) < 1e-6);
  CHECK(test::gradcheck(c.b, db, loss) < 1e-6);
}

TEST_CASE("element-wise ops reject mismatched shapes, dtypes, empty input and partial overlap") {
  ew_case<float> c;
  const shape flat{c.s.numel()};
  CHECK_THROWS_WITH_AS(ops::add(c.be, c.t(c.out), c.t(c.a), tensor(c.b.data(), flat)),
                       doctest::Contains("add: b has shape [105], expected [3, 5, 7]"), lwcl::error);
  std::vector<double> d(c.n);
  CHECK_THROWS_WITH_AS(ops::add(c.be, tensor(d.data(), c.s), c.t(c.a), c.t(c.b)),
                       doctest::Contains("add: out has dtype f64, expected f32 (the dtype of a)"), lwcl::error);
  CHECK_THROWS_WITH_AS(ops::add(c.be, c.t(c.out), tensor(), c.t(c.b)), doctest::Contains("add: a is empty"), lwcl::error);
  CHECK_THROWS_WITH_AS(ops::accumulate(c.be, tensor(c.a.data(), flat), c.t(c.b)),
                       doctest::Contains("accumulate: dst has shape [105], expected [3, 5, 7]"), lwcl::error);
  CHECK_THROWS_WITH_AS(ops::accumulate(c.be, tensor(d.data(), c.s), c.t(c.b)),
                       doctest::Contains("accumulate: dst has dtype f64, expected f32"), lwcl::error);
  CHECK_THROWS_WITH_AS(ops::accumulate(c.be, c.t(c.a), tensor()), doctest::Contains("accumulate: src is empty"), lwcl::error);
  CHECK_THROWS_WITH_AS(ops::scale(c.be, tensor(), 2.0), doctest::Contains("scale: x is empty"), lwcl::error);
  std::vector<std::int32_t> ids(c.n);
  CHECK_THROWS_WITH_AS(ops::scale(c.be, tensor(ids.data(), c.s), 2.0), doctest::Contains("scale: dtype i32 is not supported here"),
                       lwcl::error);
  CHECK_THROWS_WITH_AS(ops::copy(c.be, tensor(c.out.data(), flat), c.t(c.a)),
                       doctest::Contains("copy: dst has shape [105], expected [3, 5, 7]"), lwcl::error);
  CHECK_THROWS_WITH_AS(ops::copy(c.be, tensor(d.data(), c.s), c.t(c.a)), doctest::Contains("copy: dst has dtype f64, expected f32"),
                       lwcl::error);
  CHECK_THROWS_WITH_AS(ops::copy(c.be, c.t(c.out), tensor()), doctest::Contains("copy: src is empty"), lwcl::error);
  CHECK_THROWS_WITH_AS(ops::mix(c.be, c.t(c.out), c.t(c.a), c.t(c.b), 1.5),
                       doctest::Contains("mix: ratio 1.5, expected a value in [0, 1]"), lwcl::error);
  CHECK_THROWS_WITH_AS(ops::mix(c.be, c.t(c.out), c.t(c.a), tensor(c.b.data(), flat), 0.5),
                       doctest::Contains("mix: b has shape [105], expected [3, 5, 7]"), lwcl::error);
  CHECK_THROWS_WITH_AS(ops::copy(c.be, tensor(c.a.data() + 1, {10}), tensor(c.a.data(), {10})),
                       doctest::Contains("copy: dst and src overlap partly (40 bytes each, 4 bytes apart)"), lwcl::error);
}

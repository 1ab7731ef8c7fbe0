// Token + position embedding: PyTorch oracle (f32 and f64, with and without a position table),
// finite-difference gradients, accumulation, and argument and token-range checks.
#include <doctest/doctest.h>

#include <cstdint>

#include "lwcl/backend/host/host.hpp"
#include "lwcl/ops/embedding.hpp"
#include "support/check.hpp"
#include "support/fixture.hpp"

using namespace lwcl;
using lwcl::test::rel_error;

namespace {

template <class T>
struct embed_case {
  test::fixture fx{"ops/embedding.lwfx"};
  shape ts = fx.dims("tokens"), es = fx.dims("wte"), ps = fx.dims("wpe"), os = fx.dims("out");
  std::vector<std::int32_t> tokens = to_i32(fx.ints("tokens"));
  std::vector<T> wte = fx.as<T>("wte"), wpe = fx.as<T>("wpe"), dout = fx.as<T>("dout");
  std::vector<T> out = std::vector<T>(static_cast<std::size_t>(os.numel()));
  std::vector<T> dwte = std::vector<T>(wte.size()), dwpe = std::vector<T>(wpe.size());
  backend::cpu be;

  static std::vector<std::int32_t> to_i32(const std::vector<std::int64_t>& v) { return {v.begin(), v.end()}; }

  tensor tok() { return tensor(tokens.data(), ts); }
  void forward(bool with_positions = true) {
    ops::embedding_forward(be, tensor(out.data(), os), tok(), tensor(wte.data(), es), with_positions ? tensor(wpe.data(), ps) : tensor());
  }
  void backward(bool with_positions = true) {
    ops::embedding_backward(be, tensor(dwte.data(), es), with_positions ? tensor(dwpe.data(), ps) : tensor(), tensor(dout.data(), os),
                            tok());
  }
};

}  // namespace

TEST_CASE_TEMPLATE("embedding matches PyTorch forward and backward", T, float, double) {
  embed_case<T> c;
  REQUIRE(c.ps[0] > c.ts[1]);  // the position table is longer than the sequence
  c.forward();
  c.backward();
  const double tol = std::is_same_v<T, float> ? 1e-5 : 1e-12;
  CHECK(rel_error(c.out, c.fx.f64("out")) < tol);
  CHECK(rel_error(c.dwte, c.fx.f64("dwte")) < 10 * tol);
  CHECK(rel_error(c.dwpe, c.fx.f64("dwpe")) < 10 * tol);
}

TEST_CASE_TEMPLATE("embedding without a position table", T, float, double) {
  embed_case<T> c;
  c.forward(false);
  c.backward(false);
  const double tol = std::is_same_v<T, float> ? 1e-5 : 1e-12;
  CHECK(rel_error(c.out, c.fx.f64("out_nopos")) < tol);
  // The token-table gradient does not depend on the position table.
  CHECK(rel_error(c.dwte, c.fx.f64("dwte")) < 10 * tol);
}

TEST_CASE("embedding gradients match finite differences") {
  embed_case<double> c;
  c.forward();
  c.backward();
  auto loss = [&] {
    c.forward();
    return test::dot(c.out, c.dout);
  };
  CHECK(test::gradcheck(c.wte, c.dwte, loss) < 1e-6);
  CHECK(test::gradcheck(c.wpe, c.dwpe, loss) < 1e-6);
  // Rows of unused tokens and positions past T get no gradient at all.
  const index_t C = c.es[1], T = c.ts[1];
  for (index_t p = T; p < c.ps[0]; ++p)
    for (index_t i = 0; i < C; ++i) CHECK(c.dwpe[static_cast<std::size_t>(p * C + i)] == 0.0);
}

TEST_CASE("embedding backward accumulates into existing gradients") {
  embed_case<float> c;
  c.backward();
  const auto dwte1 = c.dwte, dwpe1 = c.dwpe;
  c.backward();
  auto twice = [](std::vector<float> v) {
    for (auto& e : v) e *= 2;
    return v;
  };
  CHECK(rel_error(c.dwte, twice(dwte1)) < 1e-6);
  CHECK(rel_error(c.dwpe, twice(dwpe1)) < 1e-6);
}

TEST_CASE("embedding backward sums repeated tokens in a fixed order, whatever the thread count") {
  // Large enough for the host backend to split channels across threads; every id repeats ~40 times.
  const index_t B = 4, T = 256, V = 25, C = 64;
  std::vector<std::int32_t> tokens(static_cast<std::size_t>(B * T));
  for (std::size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<std::int32_t>((i * 7919 + i / 3) % V);
  const auto dout = test::random_normal<float>(static_cast<std::size_t>(B * T * C), 5);
  std::vector<float> dwte(static_cast<std::size_t>(V * C));
  backend::cpu be;
  ops::embedding_backward(be, tensor(dwte.data(), {V, C}), tensor(), tensor(dout.data(), {B, T, C}), tensor(tokens.data(), {B, T}));
  std::vector<float> serial(dwte.size());
  for (std::size_t r = 0; r < tokens.size(); ++r)
    for (std::size_t i = 0; i < static_cast<std::size_t>(C); ++i)
      serial[static_cast<std::size_t>(tokens[r]) * static_cast<std::size_t>(C) + i] += dout[r * static_cast<std::size_t>(C) + i];
  CHECK(dwte == serial);
}

TEST_CASE("embedding rejects out-of-range token ids, naming the position") {
  embed_case<float> c;
  const index_t V = c.es[0];
  c.tokens[1 * static_cast<std::size_t>(c.ts[1]) + 4] = static_cast<std::int32_t>(V);
  CHECK_THROWS_WITH_AS(c.forward(), doctest::Contains("embedding_forward: token id 11 at tokens[1, 4] is outside the vocabulary [0, 11)"),
                       lwcl::error);
  CHECK_THROWS_WITH_AS(c.backward(), doctest::Contains("embedding_backward: token id 11 at tokens[1, 4] is outside the vocabulary"),
                       lwcl::error);
  c.tokens[1 * static_cast<std::size_t>(c.ts[1]) + 4] = 0;
  c.tokens[2] = -1;
  CHECK_THROWS_WITH_AS(c.forward(), doctest::Contains("token id -1 at tokens[0, 2]"), lwcl::error);
}

TEST_CASE("embedding rejects mismatched shapes, dtypes and empty input") {
  embed_case<float> c;
  const index_t B = c.ts[0], T = c.ts[1], C = c.es[1];
  CHECK_THROWS_WITH_AS(ops::embedding_forward(c.be, tensor(c.out.data(), {B * T, C}), c.tok(), tensor(c.wte.data(), c.es), tensor()),
                       doctest::Contains("embedding_forward: out has shape [18, 8], expected [3, 6, 8]"), lwcl::error);
  CHECK_THROWS_WITH_AS(ops::embedding_forward(c.be, tensor(c.out.data(), c.os), c.tok(), tensor(c.wte.data(), c.es),
                                              tensor(c.wpe.data(), {T - 1, C})),
                       doctest::Contains("embedding_forward: wpe has shape [5, 8], which holds 5 positions, fewer than the sequence length T = 6"),
                       lwcl::error);
  CHECK_THROWS_WITH_AS(ops::embedding_forward(c.be, tensor(c.out.data(), c.os), c.tok(), tensor(c.wte.data(), c.es),
                                              tensor(c.wpe.data(), {c.ps[0] * 2, C / 2})),
                       doctest::Contains("embedding_forward: wpe has shape [18, 4], expected (P, 8)"), lwcl::error);
  std::vector<double> wpe_d(c.wpe.size());
  CHECK_THROWS_WITH_AS(ops::embedding_forward(c.be, tensor(c.out.data(), c.os), c.tok(), tensor(c.wte.data(), c.es),
                                              tensor(wpe_d.data(), c.ps)),
                       doctest::Contains("embedding_forward: wpe has dtype f64, expected f32"), lwcl::error);
  std::vector<float> ftokens(c.tokens.size());
  CHECK_THROWS_WITH_AS(ops::embedding_forward(c.be, tensor(c.out.data(), c.os), tensor(ftokens.data(), c.ts), tensor(c.wte.data(), c.es),
                                              tensor()),
                       doctest::Contains("embedding_forward: tokens has dtype f32, expected i32"), lwcl::error);
  CHECK_THROWS_WITH_AS(ops::embedding_forward(c.be, tensor(c.out.data(), c.os), tensor(), tensor(c.wte.data(), c.es), tensor()),
                       doctest::Contains("embedding_forward: tokens is empty"), lwcl::error);
  CHECK_THROWS_WITH_AS(ops::embedding_forward(c.be, tensor(c.out.data(), c.os), c.tok(), tensor(), tensor()),
                       doctest::Contains("embedding_forward: wte is empty"), lwcl::error);
  CHECK_THROWS_WITH_AS(ops::embedding_backward(c.be, tensor(c.dwte.data(), c.es), tensor(), tensor(c.dout.data(), {B, T, C - 1}), c.tok()),
                       doctest::Contains("embedding_backward: dout has shape [3, 6, 7], expected [3, 6, 8]"), lwcl::error);
  std::vector<double> dwte_d(c.wte.size());
  CHECK_THROWS_WITH_AS(ops::embedding_backward(c.be, tensor(dwte_d.data(), c.es), tensor(), tensor(c.dout.data(), c.os), c.tok()),
                       doctest::Contains("embedding_backward: dout has dtype f32, expected f64"), lwcl::error);
}

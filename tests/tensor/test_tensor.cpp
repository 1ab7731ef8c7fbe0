// tensor views: typed access names the argument on a dtype mismatch, reshaped and operator[] check
// their arguments, sub-tensors point at the right rows, and owned tensors move their memory.
#include <doctest/doctest.h>

#include <cstdint>
#include <vector>

#include "lwcl/backend/host/host.hpp"
#include "lwcl/core/memory.hpp"
#include "lwcl/tensor/tensor.hpp"

using namespace lwcl;

TEST_CASE("tensor::ptr names the argument when the dtype differs") {
  std::vector<float> x(6);
  const tensor t(x.data(), {2, 3});
  CHECK(t.type == dtype::f32);
  CHECK(t.ptr<float>() == x.data());
  CHECK_THROWS_WITH_AS(t.ptr<double>("linear_forward: weight"), "linear_forward: weight: dtype is f32, expected f64",
                       lwcl::error);
  CHECK_THROWS_WITH_AS(t.ptr<std::int32_t>(), "tensor: dtype is f32, expected i32", lwcl::error);
  CHECK_THROWS_WITH_AS(t.ptr<bf16>(), "tensor: dtype is f32, expected bf16", lwcl::error);
  const std::vector<double> cx(4);
  CHECK(tensor(cx.data(), {4}).type == dtype::f64);  // from a pointer to const
}

TEST_CASE("tensor size queries and description") {
  std::vector<std::uint16_t> raw(6);
  const tensor t(raw.data(), dtype::bf16, {2, 3});
  CHECK(t.numel() == 6);
  CHECK(t.bytes() == 12);
  CHECK(t.describe() == "bf16[2, 3]");
  CHECK_FALSE(t.empty());
  CHECK(tensor().empty());
  CHECK(tensor(raw.data(), dtype::bf16, {0, 3}).empty());
}

TEST_CASE("tensor::reshaped keeps the data and checks the element count") {
  std::vector<float> x(6);
  const tensor t(x.data(), {2, 3});
  const tensor r = t.reshaped({3, 2});
  CHECK(r.data == t.data);
  CHECK(r.shape == shape{3, 2});
  CHECK(t.reshaped({6}).shape == shape{6});
  CHECK_THROWS_WITH_AS(t.reshaped({4, 2}), "tensor::reshaped: cannot view [2, 3] (6 elements) as [4, 2]", lwcl::error);
}

TEST_CASE("tensor::operator[] selects rows along axis 0 and checks the index") {
  std::vector<double> x(24);
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = static_cast<double>(i);
  const tensor t(x.data(), {2, 3, 4});
  const tensor row = t[1];
  CHECK(row.shape == shape{3, 4});
  CHECK(row.type == dtype::f64);
  CHECK(row.ptr<double>()[0] == 12.0);
  CHECK(row[2].ptr<double>()[3] == 23.0);
  CHECK(row[2].shape == shape{4});
  CHECK_THROWS_WITH_AS(t[2], "tensor: index 2 out of range for [2, 3, 4]", lwcl::error);
  CHECK_THROWS_WITH_AS(t[-1], "tensor: index -1 out of range for [2, 3, 4]", lwcl::error);
  const tensor scalar(x.data(), shape{});
  CHECK_THROWS_WITH_AS(scalar[0], "tensor: index 0 out of range for []", lwcl::error);
}

TEST_CASE("a moved-from owned_tensor is empty and the new owner keeps the memory") {
  backend::cpu be;
  const auto before = memory().current(tier::host);
  owned_tensor<backend::cpu> a(be, dtype::f32, {4, 8});
  void* data = a.view().data;
  owned_tensor<backend::cpu> b(std::move(a));
  CHECK(a.view().data == nullptr);
  CHECK(a.view().empty());
  CHECK(b.view().data == data);
  CHECK(b.shape() == shape{4, 8});
  owned_tensor<backend::cpu> c;
  c = std::move(b);
  CHECK(b.view().data == nullptr);
  CHECK(c.view().data == data);
  CHECK(memory().current(tier::host) == before + 4 * 8 * 4);
}

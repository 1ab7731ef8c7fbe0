#pragma once
// weighted_sum<Terms...>: sum_i w_i L_i of losses that compare the same thing (all features or all
// logits), e.g. weighted_sum<mse, cosine>{.weights = {1.0, 0.1}} to match magnitudes and directions.
// The terms share one scratch buffer, used one after the other; each accumulates w_i * grad_scale times
// its gradient, so dstudent receives the gradient of the sum. Weights default to 1.

#include <array>
#include <cmath>
#include <cstddef>
#include <string_view>
#include <tuple>
#include <utility>

#include "lwcl/policies/loss/concept.hpp"
#include "lwcl/policies/loss/cosine.hpp"
#include "lwcl/policies/loss/mse.hpp"
#include "lwcl/policies/name.hpp"

namespace lwcl::policies::loss {

namespace detail {
struct weighted_sum_head {
  static constexpr std::string_view name = "weighted_sum";
};
template <std::size_t N>
constexpr std::array<double, N> ones() {
  std::array<double, N> w{};
  for (auto& x : w) x = 1.0;
  return w;
}
}  // namespace detail

template <loss_policy... Terms>
struct weighted_sum {
  static_assert(sizeof...(Terms) >= 1, "loss::weighted_sum<Terms...>: needs at least one term");
  static constexpr loss_target target = std::get<0>(std::array<loss_target, sizeof...(Terms)>{Terms::target...});
  static_assert(((Terms::target == target) && ...),
                "loss::weighted_sum<Terms...>: every term must compare the same thing, features (mse, nmse, cosine) "
                "or logits (logit_kl)");
  static constexpr std::string_view name = policies::detail::template_name<detail::weighted_sum_head, Terms...>::value;

  std::tuple<Terms...> terms{};
  std::array<double, sizeof...(Terms)> weights = detail::ones<sizeof...(Terms)>();

  template <class Backend>
  double compute(Backend& be, const tensor& dstudent, const tensor& scratch, const tensor& student,
                 const tensor& teacher, double grad_scale = 1.0) const {
    for (std::size_t i = 0; i < weights.size(); ++i)
      check(std::isfinite(weights[i]) && weights[i] >= 0, name, ": weight ", i, " is ", weights[i],
            ", expected a finite value >= 0");
    double total = 0;
    auto add = [&](double w, const auto& term) {
      // A zero weight skips its term: it would add nothing, and its preconditions need not hold.
      if (w > 0) total += w * term.compute(be, dstudent, scratch, student, teacher, grad_scale * w);
    };
    [&]<std::size_t... I>(std::index_sequence<I...>) { (add(weights[I], std::get<I>(terms)), ...); }
    (std::index_sequence_for<Terms...>{});
    return total;
  }
};
static_assert(loss_policy<weighted_sum<mse, cosine>>);
static_assert(weighted_sum<mse, cosine>::name == "weighted_sum<mse,cosine>");

}  // namespace lwcl::policies::loss

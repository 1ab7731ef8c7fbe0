#pragma once
// Taylor pruning criterion (first order): a group is as important as the loss change its removal
// predicts, sum over the group's weights of |g * w|, with g the mean gradient of each block's local
// loss (prune/local_gradients.hpp: one block resident at a time, unlike whole-model Taylor). Groups
// are those of magnitude.hpp: a query head's q rows and o columns, a KV group's k/v rows plus its
// query heads, an FFN channel's fc/gate/up rows and proj/down column, a layer's every parameter.

#include <cmath>
#include <string_view>

#include "lwcl/policies/pruning/concept.hpp"
#include "lwcl/policies/pruning/magnitude.hpp"

namespace lwcl::policies::pruning {

struct taylor {
  static constexpr std::string_view name = "taylor";
  static constexpr bool needs_statistics = false;
  static constexpr bool needs_gradients = true;

  prune::group_scores score(const prune::scoring_input& in) const {
    const auto& g = in.local_gradients_for(name);
    // |g * w| element by element, then the L1 sums of magnitude<1> over each group.
    prune::scoring_input product;
    product.config = in.config;
    product.layout = in.layout;
    product.params.resize(in.params.size());
    for (std::size_t i = 0; i < in.params.size(); ++i) product.params[i] = std::abs(g.grad[i] * in.params[i]);
    auto out = magnitude<1>{}.score(product);
    out.criterion = std::string(name);
    return out;
  }
};
static_assert(pruning_criterion<taylor>);

}  // namespace lwcl::policies::pruning

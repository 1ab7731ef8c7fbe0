#pragma once
// GeLaCo's fitness policies (search/gelaco/fitness.hpp defines the measurements and the concept
// search::gelaco's searcher takes): quality() is maximised; needs() names the measurements it reads.
//   residual_and_kl      the default: residual-update similarity minus kl_weight x KL (full or top-K)
//   residual_similarity  residual-update similarity alone
//   kl_divergence        minus the KL to the teacher (full or top-K)
//   module_cosine        the module-wise cosine (attention, MLP and hidden outputs)

#include <string_view>

#include "lwcl/search/gelaco/fitness.hpp"

namespace lwcl::policies::fitness {

using gelaco::measurements;
namespace need = gelaco::need;

struct residual_similarity {
  static constexpr std::string_view name = "residual";
  unsigned needs() const { return need::residual; }
  double quality(const measurements& m) const { return m.residual_similarity; }
};

struct kl_divergence {
  static constexpr std::string_view name = "kl";
  bool top_k = false;  // the top-K KL instead of the full one
  unsigned needs() const { return top_k ? need::kl_top_k : need::kl; }
  double quality(const measurements& m) const { return -(top_k ? m.kl_top_k : m.kl); }
};

struct residual_and_kl {
  static constexpr std::string_view name = "residual+kl";
  double kl_weight = 1.0;
  bool top_k = false;
  unsigned needs() const { return need::residual | (top_k ? need::kl_top_k : need::kl); }
  double quality(const measurements& m) const { return m.residual_similarity - kl_weight * (top_k ? m.kl_top_k : m.kl); }
};

struct module_cosine {
  static constexpr std::string_view name = "module";
  unsigned needs() const { return need::modules; }
  double quality(const measurements& m) const { return m.module_cosine; }
};

static_assert(gelaco::fitness_policy<residual_similarity> && gelaco::fitness_policy<kl_divergence> &&
              gelaco::fitness_policy<residual_and_kl> && gelaco::fitness_policy<module_cosine>);

}  // namespace lwcl::policies::fitness

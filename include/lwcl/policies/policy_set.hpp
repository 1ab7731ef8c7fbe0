#pragma once
// policy_set: the policies of one program, one member per slot, as make_policies (bundle.hpp) lowers a
// bundle to; and describe(), each slot's policy name. Plain types, no Boost.Hana: this is what the
// pipeline and device code are instantiated with and include.

#include <map>
#include <string>

#include "lwcl/policies/keys.hpp"

namespace lwcl {

// The policies of one program, one member per slot. Plain types only: this is what the pipeline and
// device code are instantiated with.
template <class Segmentation, class Curriculum, class Pruning, class Cache, class Loss, class Backend>
struct policy_set {
  using segmentation_type = Segmentation;
  using curriculum_type = Curriculum;
  using pruning_type = Pruning;
  using cache_type = Cache;
  using loss_type = Loss;
  using backend_policy_type = Backend;
  using backend_type = typename Backend::type;  // the backend class the pipeline runs on

  Segmentation segmentation;
  Curriculum curriculum;
  Pruning pruning;
  Cache cache;
  Loss loss;
  Backend backend;
};

// Slot -> policy name, for config.json and report headers.
template <class Seg, class Cur, class Prune, class Cache, class Loss, class Backend>
std::map<std::string, std::string> describe(const policy_set<Seg, Cur, Prune, Cache, Loss, Backend>&) {
  return {
      {std::string(key::segmentation::name), std::string(Seg::name)},
      {std::string(key::curriculum::name), std::string(Cur::name)},
      {std::string(key::pruning::name), std::string(Prune::name)},
      {std::string(key::cache::name), std::string(Cache::name)},
      {std::string(key::loss::name), std::string(Loss::name)},
      {std::string(key::backend::name), std::string(Backend::name)},
  };
}

}  // namespace lwcl

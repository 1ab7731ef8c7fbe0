#pragma once
// Policy bundles: make_policies(slot<key::X>(policy)...) gathers a program's policies in a
// boost::hana::map keyed by slot, checks each slot with a static_assert a reader can act on, fills the
// documented defaults, and lowers the map to a plain policy_set struct, so no Hana type goes further.
// sweep() runs a function over the cartesian product of alternatives per slot; describe() names them.

#include <boost/hana.hpp>
#include <cstddef>
#include <map>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>

#include "lwcl/policies/backend/host.hpp"
#include "lwcl/policies/cache/host.hpp"
#include "lwcl/policies/concepts.hpp"
#include "lwcl/policies/curriculum/two_stage.hpp"
#include "lwcl/policies/keys.hpp"
#include "lwcl/policies/policy_set.hpp"
#include "lwcl/policies/loss/nmse.hpp"
#include "lwcl/policies/segmentation/uniform.hpp"

namespace lwcl {

// The policy of every optional slot when a bundle leaves it out: DESIGN's two-stage reading of the
// method, one layer per segment, features cached in RAM, normalised MSE, the host backend. The pruning
// criterion has no default: every bundle names one.
struct default_policies {
  using segmentation = policies::segmentation::uniform<1>;
  using curriculum = policies::curriculum::two_stage<>;
  using cache = policies::cache::host;
  using loss = policies::loss::nmse;
  using backend = policies::backend::host<>;
};

// One bundle entry: the policy for slot Key. Same as hana::make_pair(hana::type_c<Key>, policy).
template <class Key, class Policy>
auto slot(Policy policy) {
  return boost::hana::make_pair(boost::hana::type_c<Key>, std::move(policy));
}

// The alternatives a sweep tries for slot Key: a hana::tuple of slot<Key>(p) entries.
template <class Key, class... Policies>
auto alternatives(Policies... policies) {
  return boost::hana::make_tuple(slot<Key>(std::move(policies))...);
}

namespace detail {

template <class K>
inline constexpr bool is_slot_key =
    std::is_same_v<K, key::segmentation> || std::is_same_v<K, key::curriculum> || std::is_same_v<K, key::pruning> ||
    std::is_same_v<K, key::cache> || std::is_same_v<K, key::loss> || std::is_same_v<K, key::backend>;

// Whether E is a hana::pair whose first element is hana::type_c<K> with K a slot key; key is that K.
template <class E>
struct entry_traits {
  static constexpr bool is_entry = false;
  using key = void;
};
template <class First, class Policy>
  requires std::is_same_v<boost::hana::tag_of_t<First>, boost::hana::type_tag>
struct entry_traits<boost::hana::pair<First, Policy>> {
  using key = typename First::type;
  static constexpr bool is_entry = is_slot_key<key>;
};

template <class K, class... Entries>
inline constexpr std::size_t slot_count = (std::size_t{std::is_same_v<K, typename entry_traits<Entries>::key>} + ... +
                                           0);

// What make_policies returns after a failed check, so that one clear static_assert is all a reader sees.
struct invalid_bundle {};

template <class Key, class Default, class Map>
auto policy_or(const Map& map) {
  return boost::hana::find(map, boost::hana::type_c<Key>).value_or(Default{});
}

}  // namespace detail

// Builds the policy_set of a program from slot<key::X>(policy) entries (or hana::make_pair entries) in
// any order. Required: pruning. Optional, with default_policies' choices: segmentation, curriculum,
// cache, loss, backend. A missing required slot, a slot given twice, or a policy of the wrong kind in a
// slot stops compilation with a static_assert naming the slot and the concept it expects.
template <class... Entries>
auto make_policies(Entries... entries) {
  using namespace detail;
  constexpr bool entries_ok = (entry_traits<Entries>::is_entry && ...);
  static_assert(
      entries_ok,
      "make_policies: every argument must be lwcl::slot<key::X>(policy) or "
      "hana::make_pair(hana::type_c<key::X>, policy), with X one of segmentation, curriculum, pruning, cache, "
      "loss, backend (policies/keys.hpp)");
  if constexpr (!entries_ok) {
    return invalid_bundle{};
  } else {
    static_assert(slot_count<key::segmentation, Entries...> <= 1,
                  "make_policies: the segmentation slot is given more than once");
    static_assert(slot_count<key::curriculum, Entries...> <= 1,
                  "make_policies: the curriculum slot is given more than once");
    static_assert(slot_count<key::pruning, Entries...> <= 1, "make_policies: the pruning slot is given more than once");
    static_assert(slot_count<key::cache, Entries...> <= 1, "make_policies: the cache slot is given more than once");
    static_assert(slot_count<key::loss, Entries...> <= 1, "make_policies: the loss slot is given more than once");
    static_assert(slot_count<key::backend, Entries...> <= 1, "make_policies: the backend slot is given more than once");
    static_assert(slot_count<key::pruning, Entries...> >= 1,
                  "make_policies: the pruning slot is required and has no default; add "
                  "lwcl::slot<key::pruning>(a policies::pruning criterion, e.g. magnitude_l2{})");
    constexpr bool slots_ok = slot_count<key::segmentation, Entries...> <= 1 &&
                              slot_count<key::curriculum, Entries...> <= 1 &&
                              slot_count<key::pruning, Entries...> == 1 && slot_count<key::cache, Entries...> <= 1 &&
                              slot_count<key::loss, Entries...> <= 1 && slot_count<key::backend, Entries...> <= 1;
    if constexpr (!slots_ok) {
      return invalid_bundle{};
    } else {
      const auto map = boost::hana::make_map(std::move(entries)...);
      auto seg = policy_or<key::segmentation, default_policies::segmentation>(map);
      auto cur = policy_or<key::curriculum, default_policies::curriculum>(map);
      auto prune = boost::hana::at_key(map, boost::hana::type_c<key::pruning>);
      auto cache = policy_or<key::cache, default_policies::cache>(map);
      auto loss = policy_or<key::loss, default_policies::loss>(map);
      auto backend = policy_or<key::backend, default_policies::backend>(map);
      using Seg = decltype(seg);
      using Cur = decltype(cur);
      using Prune = decltype(prune);
      using Cache = decltype(cache);
      using Loss = decltype(loss);
      using Backend = decltype(backend);
      static_assert(policies::segmentation_policy<Seg>,
                    "make_policies: the policy in the segmentation slot is not a segmentation_policy "
                    "(policies/segmentation/concept.hpp), e.g. policies::segmentation::uniform<N>");
      static_assert(policies::curriculum_policy<Cur>,
                    "make_policies: the policy in the curriculum slot is not a curriculum_policy "
                    "(policies/curriculum/concept.hpp), e.g. policies::curriculum::two_stage<>");
      static_assert(policies::pruning_criterion<Prune>,
                    "make_policies: the policy in the pruning slot is not a pruning_criterion "
                    "(policies/pruning/concept.hpp), e.g. policies::pruning::magnitude_l2");
      static_assert(policies::cache_policy<Cache>,
                    "make_policies: the policy in the cache slot is not a cache_policy (policies/cache/concept.hpp)");
      static_assert(policies::loss_policy<Loss>,
                    "make_policies: the policy in the loss slot is not a loss_policy (policies/loss/concept.hpp), "
                    "e.g. policies::loss::nmse");
      static_assert(policies::backend_policy<Backend>,
                    "make_policies: the policy in the backend slot is not a backend_policy (policies/backend/concept.hpp), "
                    "e.g. policies::backend::host<>");
      constexpr bool kinds_ok = policies::segmentation_policy<Seg> && policies::curriculum_policy<Cur> &&
                                policies::pruning_criterion<Prune> && policies::cache_policy<Cache> &&
                                policies::loss_policy<Loss> && policies::backend_policy<Backend>;
      if constexpr (!kinds_ok)
        return invalid_bundle{};
      else
        return policy_set<Seg, Cur, Prune, Cache, Loss, Backend>{std::move(seg),   std::move(cur),  std::move(prune),
                                                                 std::move(cache), std::move(loss), std::move(backend)};
    }
  }
}

// The most bundles one sweep may instantiate: each is a full pipeline instantiation, and a translation
// unit that builds more compiles for minutes. Split a bigger table across translation units.
inline constexpr std::size_t max_sweep_size = 64;

// sweep(alternatives<key::A>(a1, a2, ...), alternatives<key::B>(b1, ...), ..., f) calls f(policy_set)
// once for every combination, in order (the last slot's alternatives vary fastest). A single
// slot<key::X>(p) entry stands for a slot held fixed. Host code only.
template <class... Args>
void sweep(Args&&... args) {
  namespace hana = boost::hana;
  static_assert(sizeof...(Args) >= 2,
                "sweep: expects at least one slot's alternatives followed by the function to call");
  const auto all = hana::make_tuple(std::addressof(args)...);
  auto& f = *hana::back(all);
  const auto lists = hana::transform(hana::drop_back(all), [](auto p) {
    if constexpr (std::is_same_v<hana::tag_of_t<std::remove_cvref_t<decltype(*p)>>, hana::pair_tag>)
      return hana::make_tuple(*p);
    else
      return *p;
  });
  using lengths = decltype(hana::transform(lists, hana::length));
  constexpr std::size_t size = decltype(hana::fold(std::declval<lengths>(), hana::size_c<1>, hana::mult))::value;
  static_assert(size <= max_sweep_size,
                "sweep: more combinations than max_sweep_size; split the sweep across translation units");
  hana::for_each(hana::cartesian_product(lists), [&](const auto& combination) {
    f(hana::unpack(combination, [](const auto&... e) { return make_policies(e...); }));
  });
}

}  // namespace lwcl

// Policy bundles: make_policies lowers slot entries to a plain policy_set with the documented defaults,
// in any order and in either spelling; describe() names every slot; sweep() walks the cartesian
// product of alternatives. Wrong bundles are compile-fail tests (tests/policies/compile_fail/).
#include <doctest/doctest.h>

#include <string>
#include <type_traits>
#include <vector>

#include "lwcl/policies/backend/cuda.hpp"
#include "lwcl/policies/bundle.hpp"
#include "lwcl/policies/curriculum/curriculum.hpp"
#include "lwcl/policies/curriculum/doubling.hpp"
#include "lwcl/policies/curriculum/easy_to_hard.hpp"
#include "lwcl/policies/curriculum/ramp.hpp"
#include "lwcl/policies/loss/cosine.hpp"
#include "lwcl/policies/pruning/magnitude.hpp"
#include "lwcl/policies/pruning/random.hpp"
#include "lwcl/policies/pruning/wanda_sp.hpp"
#include "lwcl/policies/segmentation/explicit_boundaries.hpp"

using namespace lwcl;
namespace p = lwcl::policies;
namespace hana = boost::hana;

TEST_CASE("make_policies fills every optional slot with its documented default") {
  const auto ps = make_policies(slot<key::pruning>(p::pruning::magnitude_l2{}));
  using set = std::remove_cvref_t<decltype(ps)>;
  static_assert(std::is_same_v<set::segmentation_type, p::segmentation::uniform<1>>);
  static_assert(std::is_same_v<set::curriculum_type, p::curriculum::two_stage<>>);
  static_assert(std::is_same_v<set::pruning_type, p::pruning::magnitude_l2>);
  static_assert(std::is_same_v<set::cache_type, p::cache::host>);
  static_assert(std::is_same_v<set::loss_type, p::loss::nmse>);
  static_assert(std::is_same_v<set::backend_policy_type, p::backend::host<>>);
  static_assert(std::is_same_v<set::backend_type, backend::cpu>);
  CHECK_FALSE(ps.curriculum.final_kd);
  CHECK(describe(ps) == std::map<std::string, std::string>{{"segmentation", "uniform<1>"},
                                                           {"curriculum", "two_stage"},
                                                           {"pruning", "magnitude_l2"},
                                                           {"cache", "host"},
                                                           {"loss", "nmse"},
                                                           {"backend", "host<chosen>"}});
}

TEST_CASE("make_policies keeps each given policy with its runtime values, in any order and either spelling") {
  using full = p::curriculum::curriculum<p::curriculum::easy_to_hard, p::curriculum::ramp, p::curriculum::doubling>;
  const auto ps =
      make_policies(slot<key::loss>(p::loss::cosine{}),
                    hana::make_pair(hana::type_c<key::segmentation>, p::segmentation::explicit_boundaries{{2, 5}}),
                    slot<key::curriculum>(full{.inputs = {.start = 10, .end = 30}, .growth = {.final_kd = true}}),
                    slot<key::backend>(p::backend::cuda{}), slot<key::pruning>(p::pruning::random{.seed = 42}));
  using set = std::remove_cvref_t<decltype(ps)>;
  static_assert(std::is_same_v<set::curriculum_type, full>);
  static_assert(std::is_same_v<set::backend_type, backend::cuda>);  // named, never completed, on the host
  CHECK(ps.segmentation.boundaries == std::vector<index_t>{2, 5});
  CHECK(ps.curriculum.inputs.end == 30);
  CHECK(ps.curriculum.has_final_kd());
  CHECK(ps.pruning.seed == 42);
  const auto d = describe(ps);
  CHECK(d.at("segmentation") == "explicit_boundaries");
  CHECK(d.at("curriculum") == "curriculum<easy_to_hard,ramp,doubling>");
  CHECK(d.at("pruning") == "random");
  CHECK(d.at("cache") == "host");
  CHECK(d.at("loss") == "cosine");
  CHECK(d.at("backend") == "cuda");
  CHECK(d.size() == 6);
  // The lowered set is a plain struct: its policies work without Hana.
  const auto model = model::model_config::uniform(model::family::gpt2, 64, 32, 16, 8, 2, 2, 32);
  CHECK(p::segment_model(ps.segmentation, model).size() == 3);
}

TEST_CASE("sweep calls f once per combination of a 2 x 2 sweep, the last slot varying fastest") {
  std::vector<std::string> seen;
  sweep(alternatives<key::pruning>(p::pruning::random{.seed = 1}, p::pruning::magnitude_l1{}),
        alternatives<key::curriculum>(p::curriculum::two_stage<>{},
                                      p::curriculum::curriculum<p::curriculum::easy_to_hard, p::curriculum::ramp>{}),
        slot<key::segmentation>(p::segmentation::uniform<2>{}),  // held fixed
        [&](const auto& ps) {
          const auto d = describe(ps);
          CHECK(d.at("segmentation") == "uniform<2>");
          CHECK(d.at("loss") == "nmse");  // defaults still apply
          seen.push_back(d.at("pruning") + " x " + d.at("curriculum"));
        });
  CHECK(seen == std::vector<std::string>{"random x two_stage", "random x curriculum<easy_to_hard,ramp,as_segmented>",
                                         "magnitude_l1 x two_stage",
                                         "magnitude_l1 x curriculum<easy_to_hard,ramp,as_segmented>"});
}

TEST_CASE("sweep carries each alternative's runtime values") {
  std::vector<std::uint64_t> seeds;
  sweep(alternatives<key::pruning>(p::pruning::random{.seed = 3}, p::pruning::random{.seed = 9}),
        [&](const auto& ps) { seeds.push_back(ps.pruning.seed); });
  CHECK(seeds == std::vector<std::uint64_t>{3, 9});
}

// Every policy satisfies its kind's concept, and no other kind's.
static_assert(p::segmentation_policy<p::segmentation::uniform<4>> &&
              p::segmentation_policy<p::segmentation::explicit_boundaries>);
static_assert(p::pruning_criterion<p::pruning::wanda_sp> && !p::pruning_criterion<p::loss::nmse>);
static_assert(p::cache_policy<p::cache::host> && !p::cache_policy<p::loss::nmse>);
static_assert(p::backend_policy<p::backend::host<>> && p::backend_policy<p::backend::cuda> &&
              !p::backend_policy<p::cache::host>);
static_assert(!p::segmentation_policy<p::pruning::magnitude_l2> && !p::loss_policy<p::curriculum::two_stage<>>);
static_assert(p::backend_interface<backend::cpu> && !p::backend_interface<p::backend::host<>>);

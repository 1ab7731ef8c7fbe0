// distill::compress: the bundle's pruning slot cuts the teacher and the bundle's pipeline recovers the
// student, in one call that gives bitwise the student of the two steps taken by hand; the slot's
// criterion decides what is cut; layer removal hands the recovery the layer map of the kept layers;
// pruning.json records the cut; bad input fails clearly.
#include <doctest/doctest.h>

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "lwcl/backend/host/host.hpp"
#include "lwcl/core/fs.hpp"
#include "lwcl/distill/compress.hpp"
#include "lwcl/policies/bundle.hpp"
#include "lwcl/policies/pruning/block_influence.hpp"
#include "lwcl/policies/pruning/magnitude.hpp"
#include "lwcl/policies/pruning/wanda_sp.hpp"
#include "pruned_fixture.hpp"

using namespace lwcl;
namespace fs = std::filesystem;
namespace pol = lwcl::policies;

namespace {

using net_t = model::transformer<backend::cpu>;

struct compress_setup {
  backend::cpu be;
  model::model_config cfg = test::pruned_fixture_config(4);
  std::vector<double> teacher_params;
  fs::path dir;
  std::unique_ptr<data::shard> shard;

  compress_setup() {
    net_t teacher(be, cfg, dtype::f32);
    test::init_scaled_teacher(teacher);
    teacher_params = prune::detail::host_params(teacher);
    dir = fs::temp_directory_path() / "lwcl_test_compress";
    fs::remove_all(dir);
    fs::create_directories(dir);
    test::write_markov_shard(dir / "train.bin");
    shard = std::make_unique<data::shard>((dir / "train.bin").string());
  }
  ~compress_setup() { fs::remove_all(dir); }

  // The teacher as the programs load it: frozen, no gradient buffer.
  distill::teacher_loader<backend::cpu> source() {
    return [this]() -> std::unique_ptr<model::weights<backend::cpu>> {
      auto t = std::make_unique<net_t>(be, cfg, dtype::f32, model::frozen);
      prune::detail::set_host_params(*t, teacher_params);
      return t;
    };
  }
};

distill::compress_options options(double ratio, double steps) {
  distill::compress_options o;
  o.prune.alloc.ratio = ratio;
  o.prune.calib_batches = 2;
  o.recovery.total = {distill::budget_unit::steps, steps};
  o.recovery.progress_bar = false;
  o.recovery.log = nullptr;
  o.recovery.feature_batches = 3;
  o.recovery.lr = 3e-3;
  o.recovery.min_lr = 3e-4;
  o.recovery.checkpoint_every = 0;
  o.recovery.save_student = false;
  o.recovery.plots = false;
  return o;
}

// The two steps compress takes, by hand: the criterion's cut, then the bundle's pipeline.
template <class Bundle, class Criterion>
distill::student_state by_hand(compress_setup& su, const Bundle& bundle, const Criterion& criterion,
                               const data::batch_loader& loader, const distill::compress_options& o,
                               std::vector<index_t>& boundaries, const fs::path& run) {
  distill::student_state st;
  {
    const auto teacher = su.source()();
    const auto p = pol::pruning::prune_with(criterion, dynamic_cast<const net_t&>(*teacher), loader, o.prune);
    st = distill::student_state::of(*p.student);
    boundaries = p.boundaries();
  }
  (void)distill::make_pipeline(su.be, bundle, o.recovery).run(su.source(), st, boundaries, loader, run);
  return st;
}

nlohmann::json read_json(const fs::path& p) { return nlohmann::json::parse(read_text(p)); }

}  // namespace

TEST_CASE("compress: the bundle's pruning slot cuts the teacher, its pipeline recovers the student, bitwise as by hand") {
  compress_setup su;
  const data::batch_loader loader(*su.shard, 4, 16, 7);
  const auto o = options(0.5, 8);
  const auto wanda = make_policies(slot<key::pruning>(pol::pruning::wanda_sp{}));
  const auto r = distill::compress(su.be, su.source(), wanda, loader, su.dir / "wanda", o);

  std::vector<index_t> b;
  const auto hand = by_hand(su, wanda, pol::pruning::wanda_sp{}, loader, o, b, su.dir / "hand");
  CHECK(r.boundaries == b);
  CHECK(r.boundaries == model::identity_boundaries(4));  // width pruning keeps every layer
  REQUIRE(r.student.params.size() == hand.params.size());
  CHECK(r.student.params == hand.params);
  CHECK(r.recovery.segment_steps == 8);
  CHECK(r.recovery.policies.at("pruning") == "wanda_sp");
  CHECK(r.student_parameters < r.teacher_parameters);
  CHECK(r.student_parameters == static_cast<index_t>(r.student.params.size()));

  const auto pj = read_json(su.dir / "wanda" / "pruning.json");
  CHECK(pj.at("criterion") == "wanda_sp");
  CHECK(pj.at("group_ratio").get<double>() == 0.5);
  CHECK(pj.at("calibration_tokens").get<index_t>() == 2 * 4 * 16);  // wanda_sp reads calibration statistics
  CHECK(pj.at("student_parameters").get<index_t>() == r.student_parameters);
  CHECK(fs::exists(su.dir / "wanda" / "report.json"));

  // The slot's criterion decides the cut: magnitude_l2 keeps other channels than wanda_sp on this teacher,
  // reads no calibration data, and compress follows it bitwise too.
  const auto mag = make_policies(slot<key::pruning>(pol::pruning::magnitude_l2{}));
  const auto m = distill::compress(su.be, su.source(), mag, loader, su.dir / "mag", o);
  const auto mhand = by_hand(su, mag, pol::pruning::magnitude_l2{}, loader, o, b, su.dir / "mhand");
  CHECK(m.student.params == mhand.params);
  CHECK(m.student.params.size() == r.student.params.size());
  CHECK(m.student.params != r.student.params);
  CHECK(m.recovery.policies.at("pruning") == "magnitude_l2");
  CHECK(read_json(su.dir / "mag" / "pruning.json").at("calibration_tokens").get<index_t>() == 0);
}

TEST_CASE("compress: layer removal hands the recovery the layer map of the layers kept") {
  compress_setup su;
  const data::batch_loader loader(*su.shard, 4, 16, 7);
  auto o = options(0.5, 8);
  o.prune.alloc.gran = prune::granularity::layers;
  const auto bundle = make_policies(slot<key::pruning>(pol::pruning::block_influence{}));
  const auto r = distill::compress(su.be, su.source(), bundle, loader, su.dir / "depth", o);
  CHECK(r.student.config.n_layers() == 2);
  REQUIRE(r.boundaries.size() == 3);
  CHECK(r.boundaries.front() == 0);
  CHECK(r.boundaries.back() == 4);
  std::vector<index_t> b;
  const auto hand = by_hand(su, bundle, pol::pruning::block_influence{}, loader, o, b, su.dir / "hand");
  CHECK(r.boundaries == b);
  CHECK(r.student.params == hand.params);
  const auto pj = read_json(su.dir / "depth" / "pruning.json");
  CHECK(pj.at("granularity") == "layers");
  CHECK(pj.at("kept_layers").size() == 2);
}

TEST_CASE("compress: bad input fails clearly") {
  compress_setup su;
  const data::batch_loader loader(*su.shard, 4, 16, 7);
  const auto bundle = make_policies(slot<key::pruning>(pol::pruning::wanda_sp{}));
  CHECK_THROWS_WITH_AS(distill::compress(su.be, su.source(), bundle, loader, su.dir / "r", options(1.5, 8)),
                       doctest::Contains("ratio 1.5 is outside [0, 1)"), lwcl::error);
  const distill::teacher_loader<backend::cpu> none = [] { return std::unique_ptr<model::weights<backend::cpu>>(); };
  CHECK_THROWS_WITH_AS(distill::compress(su.be, none, bundle, loader, su.dir / "n", options(0.5, 8)),
                       doctest::Contains("the teacher source returned no model"), lwcl::error);
  // block_influence scores whole layers: a width allocation is refused before anything is written.
  const auto depth = make_policies(slot<key::pruning>(pol::pruning::block_influence{}));
  CHECK_THROWS_AS(distill::compress(su.be, su.source(), depth, loader, su.dir / "w", options(0.5, 8)), lwcl::error);
  CHECK_FALSE(fs::exists(su.dir / "w" / "pruning.json"));
}

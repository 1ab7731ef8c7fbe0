// Fuzz target: GeLaCo's search checkpoint (search/gelaco/search.hpp, search.json), read by a searcher of
// a tiny two-layer llama the way a rerun of experiments/gelaco reads it: population, archive (genes and
// terms) and counters, checked against the search's seed, shape and settings.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "fuzz_support.hpp"
#include "lwcl/backend/host/host.hpp"
#include "lwcl/policies/fitness/gelaco.hpp"
#include "lwcl/search/gelaco/fitness.hpp"
#include "lwcl/search/gelaco/search.hpp"

namespace {

using namespace lwcl;

struct fixture {
  backend::cpu be;
  std::unique_ptr<model::transformer<backend::cpu>> teacher;
  std::unique_ptr<gelaco::evaluator<backend::cpu>> ev;
  fixture() {
    const auto cfg = model::model_config::uniform(model::family::llama, 16, 8, 8, 2, 2, 1, 12);
    teacher = std::make_unique<model::transformer<backend::cpu>>(be, cfg, dtype::f64);
    teacher->init(3);
    gelaco::calibration_set cal;
    cal.B = 1, cal.T = 4;
    cal.ids = {1, 5, 9, 13};
    ev = std::make_unique<gelaco::evaluator<backend::cpu>>(*teacher, cal);
  }
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static fixture fx;
  gelaco::search_options o;
  o.population = 8;
  o.generations = 0;
  o.seed = 1;
  o.checkpoint = fuzz::write_file("search.json", data, size);
  gelaco::searcher<backend::cpu, policies::fitness::residual_and_kl> s(*fx.ev, {}, o);
  fuzz::refused([&] {
    s.resume_from_checkpoint();
    // What a resumed run reads next: the population's scores (through the archive) and the front.
    std::vector<gelaco::scored> all;
    for (const auto& [k, v] : s.archive()) all.push_back(v);
    (void)gelaco::hypervolume(gelaco::pareto_front(all), -1.0, 0.0);
  });
  return 0;
}

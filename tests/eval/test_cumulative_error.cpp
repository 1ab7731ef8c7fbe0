// eval::cumulative_error: zero for a student equal to its teacher; zero above a perturbed layer and
// positive from it on; the last entry equals the relative error of the two models' last hidden states
// (transformer::last_hidden, an independent path); the layer map places a student with a layer removed.
#include <doctest/doctest.h>

#include <cmath>
#include <vector>

#include "lwcl/backend/host/host.hpp"
#include "lwcl/eval/cumulative_error.hpp"
#include "lwcl/prune/surgery.hpp"

using namespace lwcl;

namespace {
using net_t = model::transformer<backend::cpu>;

std::vector<std::vector<std::int32_t>> token_batches(index_t n, index_t B, index_t T) {
  std::vector<std::vector<std::int32_t>> out;
  for (index_t k = 0; k < n; ++k) {
    std::vector<std::int32_t> ids(static_cast<std::size_t>(B * T));
    for (std::size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<std::int32_t>((7 * i + 3 * static_cast<std::size_t>(k)) % 40);
    out.push_back(ids);
  }
  return out;
}
}  // namespace

TEST_CASE("cumulative_error: zero for the teacher itself, zero above a perturbed layer, last entry from last_hidden") {
  backend::cpu be;
  const auto cfg = model::model_config::uniform(model::family::gpt2, 40, 16, 24, 4, 4, 4, 48);
  net_t teacher(be, cfg, dtype::f64);
  teacher.init(3);
  auto same = prune::apply_plan(teacher, prune::keep_all(cfg));
  const index_t B = 2, T = 8;
  const auto batches = token_batches(2, B, T);
  const auto identity = model::identity_boundaries(4);
  for (double e : eval::cumulative_error(teacher, *same, identity, batches, B, T)) CHECK(e == 0.0);

  auto p = prune::detail::host_params(*same);
  const auto& w = same->layout().find("layers.2.mlp.fc.weight");
  for (index_t i = 0; i < w.shape.numel(); i += 3) p[static_cast<std::size_t>(w.offset + i)] *= 1.5;
  prune::detail::set_host_params(*same, p);
  const auto err = eval::cumulative_error(teacher, *same, identity, batches, B, T);
  CHECK(err[0] == 0.0);
  CHECK(err[1] == 0.0);
  CHECK(err[2] > 1e-3);
  CHECK(err[3] > 1e-3);
  // The last layer's error from the transformers' own forward passes.
  double num = 0, den = 0;
  for (const auto& ids : batches) {
    const tensor tok(const_cast<std::int32_t*>(ids.data()), {B, T});
    teacher.forward_logits(tok);
    const auto* ht = static_cast<const double*>(teacher.last_hidden().data);
    const std::vector<double> hT(ht, ht + B * T * 24);
    same->forward_logits(tok);
    const auto* hs = static_cast<const double*>(same->last_hidden().data);
    for (std::size_t i = 0; i < hT.size(); ++i) {
      num += (hs[i] - hT[i]) * (hs[i] - hT[i]);
      den += hT[i] * hT[i];
    }
  }
  CHECK(err[3] == doctest::Approx(std::sqrt(num / den)).epsilon(1e-12));
}

TEST_CASE("cumulative_error: a student with a layer removed is compared where its layers came from") {
  backend::cpu be;
  const auto cfg = model::model_config::uniform(model::family::llama, 40, 16, 24, 3, 4, 2, 48);
  net_t teacher(be, cfg, dtype::f64);
  teacher.init(4);
  auto plan = prune::keep_all(cfg);
  plan.layers[1].removed = true;
  auto student = prune::apply_plan(teacher, plan);
  REQUIRE(student->config().n_layers() == 2);
  const auto batches = token_batches(1, 2, 6);
  // Student layer 0 as the replacement of teacher layer 0 alone: no error there.
  const auto err = eval::cumulative_error(teacher, *student, {0, 1, 3}, batches, 2, 6);
  CHECK(err[0] == 0.0);
  CHECK(err[1] > 0.0);  // layer 1 (teacher layer 2) now reads layer 0's output instead of layer 1's
  // As the replacement of teacher layers 0 and 1 (the default map of kept layers {0, 2}): compared with h^T_2.
  const auto kept = model::boundaries_of_kept_layers({0, 2}, 3);
  CHECK(kept == std::vector<index_t>{0, 2, 3});
  const auto err2 = eval::cumulative_error(teacher, *student, kept, batches, 2, 6);
  CHECK(err2[0] > 0.0);
  CHECK(err2[1] == err[1]);
  CHECK_THROWS_WITH_AS(eval::cumulative_error(teacher, *student, {0, 1}, batches, 2, 6),
                       doctest::Contains("the layer map has 2 boundaries for a student of 2 layers, expected 3"), lwcl::error);
  CHECK_THROWS_WITH_AS(eval::cumulative_error(teacher, *student, {0, 2, 2}, batches, 2, 6),
                       doctest::Contains("must rise strictly"), lwcl::error);
  CHECK_THROWS_WITH_AS(eval::cumulative_error(teacher, *student, {1, 2, 3}, batches, 2, 6),
                       doctest::Contains("starts at teacher boundary 1, expected 0"), lwcl::error);
  CHECK_THROWS_WITH_AS(eval::cumulative_error(teacher, *student, {0, 1, 2}, batches, 2, 6),
                       doctest::Contains("ends at teacher boundary 2, expected 3"), lwcl::error);
  CHECK_THROWS_WITH_AS(eval::cumulative_error(teacher, *student, {0, 1, 3}, batches, 2, 7),
                       doctest::Contains("a batch of 12 ids, expected 2 x 7"), lwcl::error);
}

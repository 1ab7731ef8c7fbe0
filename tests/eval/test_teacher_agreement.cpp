// Teacher agreement: on the transformers-made gpt2 checkpoint, KL(teacher || student) and top-1 agreement
// equal those computed here from transformers' own float64 teacher logits and the student's training-path
// logits; a model agrees with itself exactly; the recovered share of the pruning loss.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "lwcl/backend/host/host.hpp"
#include "lwcl/eval/teacher_agreement.hpp"
#include "lwcl/model/checkpoint/hf.hpp"
#include "lwcl/model/host_params.hpp"
#include "support/fixture.hpp"

using namespace lwcl;

namespace {

std::vector<double> log_softmax(const double* z, index_t V) {
  double m = z[0], s = 0;
  for (index_t v = 1; v < V; ++v) m = std::max(m, z[v]);
  for (index_t v = 0; v < V; ++v) s += std::exp(z[v] - m);
  std::vector<double> out(static_cast<std::size_t>(V));
  for (index_t v = 0; v < V; ++v) out[static_cast<std::size_t>(v)] = z[v] - m - std::log(s);
  return out;
}

}  // namespace

TEST_CASE("teacher_agreement: KL and top-1 against transformers' teacher logits and the student's own") {
  const auto dir = test::data_path("hf/gpt2");
  test::fixture fx("hf/gpt2_logits.lwfx");
  const auto ids64 = fx.ints("ids");      // (2, 12); row 0 used
  const auto tlogits = fx.f64("logits");  // (2, 12, 64)
  const index_t T = 12, V = 64;
  backend::cpu be;
  const auto cfg = checkpoint::read_hf_config(dir);
  model::transformer<backend::cpu> teacher(be, cfg), student(be, cfg);
  checkpoint::load_hf_weights(teacher, dir);
  checkpoint::load_hf_weights(student, dir);
  // The student: every weight scaled by 1.15, so its distributions differ visibly.
  auto p = model::host_params(student);
  for (auto& x : p) x *= 1.15;
  model::set_host_params(student, p);

  const std::vector<std::int32_t> ids(ids64.begin(), ids64.begin() + T);
  eval::held_out_sample s;
  s.split = "fixture";
  s.window = T - 1;
  s.windows = {ids};
  s.document_of = {0};

  // The reference: teacher from transformers' float64 logits, student through forward_logits.
  std::vector<std::int32_t> inp(ids.begin(), ids.end() - 1);
  const tensor sl = student.forward_logits(tensor(inp.data(), dtype::i32, {1, T - 1}));
  double kl = 0;
  int agree = 0;
  for (index_t t = 0; t + 1 < T; ++t) {
    const double* zt = tlogits.data() + t * V;
    std::vector<double> zs(static_cast<std::size_t>(V));
    for (index_t v = 0; v < V; ++v) zs[static_cast<std::size_t>(v)] = static_cast<const float*>(sl.data)[t * V + v];
    const auto lt = log_softmax(zt, V), ls = log_softmax(zs.data(), V);
    for (index_t v = 0; v < V; ++v) kl += std::exp(lt[static_cast<std::size_t>(v)]) * (lt[static_cast<std::size_t>(v)] - ls[static_cast<std::size_t>(v)]);
    agree += std::max_element(zt, zt + V) - zt == std::max_element(zs.begin(), zs.end()) - zs.begin() ? 1 : 0;
  }
  kl /= static_cast<double>(T - 1);
  const double top1 = agree / static_cast<double>(T - 1);
  MESSAGE("reference: KL ", kl, " nats a token, top-1 ", top1);
  REQUIRE(kl > 1e-3);  // the scaled student does differ

  const auto r = eval::teacher_agreement(teacher, student, s);
  CHECK(r.tokens == T - 1);
  CHECK(r.kl == doctest::Approx(kl).epsilon(1e-4));
  CHECK(r.top1 == doctest::Approx(top1));
  CHECK(r.sample == s.protocol());
  const auto self = eval::teacher_agreement(teacher, teacher, s);
  CHECK(std::abs(self.kl) < 1e-12);
  CHECK(self.top1 == 1.0);
}

TEST_CASE("recovered_share: 1 at the teacher's perplexity, 0 at the pruned model's, none when pruning lost nothing") {
  CHECK(*eval::recovered_share(30, 25, 20) == doctest::Approx(0.5));
  CHECK(*eval::recovered_share(30, 20, 20) == doctest::Approx(1.0));
  CHECK(*eval::recovered_share(30, 35, 20) == doctest::Approx(-0.5));
  CHECK(!eval::recovered_share(20, 25, 20).has_value());
  CHECK(!eval::recovered_share(19, 25, 20).has_value());
}

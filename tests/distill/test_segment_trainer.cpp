// The segment trainer: its gradient is the loss's (finite differences, f64), training a pruned
// student segment on the teacher's boundary features lowers the reconstruction loss, only the
// segment's memory is resident, write_back puts the weights where the student expects them, and a
// diverging run stops with the segment and step named.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "lwcl/backend/host/host.hpp"
#include "lwcl/distill/segment_trainer.hpp"
#include "lwcl/model/transformer.hpp"
#include "lwcl/policies/loss/cosine.hpp"
#include "lwcl/policies/loss/mse.hpp"
#include "lwcl/prune/surgery.hpp"

using namespace lwcl;

namespace {

using net_t = model::transformer<backend::cpu>;

// Teacher boundary features h_0 .. h_L of a (B, T) batch, by running the blocks one at a time.
std::vector<std::vector<double>> boundary_features(backend::cpu& be, net_t& net, const std::vector<std::int32_t>& ids, index_t B,
                                                   index_t T) {
  const auto& cfg = net.config();
  const index_t C = cfg.d_model;
  std::vector<std::vector<double>> h(static_cast<std::size_t>(cfg.n_layers() + 1), std::vector<double>(static_cast<std::size_t>(B * T * C)));
  ops::embedding_forward(be, tensor(h[0].data(), {B, T, C}), tensor(ids.data(), {B, T}), net.param("wte"),
                         cfg.traits().rope ? tensor() : net.param("wpe"));
  for (index_t l = 0; l < cfg.n_layers(); ++l) {
    const auto sh = model::shape_of_layer(cfg, l);
    model::block_acts<backend::cpu> a(be, sh, B, T, dtype::f64);
    model::block_forward(be, sh, model::bind_block(net.layout(), model::layer_prefix(l), net.params().data, dtype::f64), a,
                         tensor(h[static_cast<std::size_t>(l)].data(), {B, T, C}),
                         tensor(h[static_cast<std::size_t>(l + 1)].data(), {B, T, C}));
  }
  return h;
}

std::vector<std::int32_t> ids_for(index_t vocab, index_t n, int mul) {
  std::vector<std::int32_t> ids(static_cast<std::size_t>(n));
  for (index_t i = 0; i < n; ++i) ids[static_cast<std::size_t>(i)] = static_cast<std::int32_t>((i * mul + 3) % vocab);
  return ids;
}

struct fixture {
  backend::cpu be;
  model::model_config cfg = model::model_config::uniform(model::family::llama, 40, 16, 16, 3, 4, 2, 24);
  std::unique_ptr<net_t> teacher, student;
  fixture() {
    teacher = std::make_unique<net_t>(be, cfg, dtype::f64);
    teacher->init(3);
    auto p = prune::detail::host_params(*teacher);
    for (auto& v : p) v *= 10;  // std 0.2: layers that matter
    for (const auto& e : teacher->layout().entries())
      if (e.name.find("norm") != std::string::npos) std::fill_n(p.begin() + e.offset, e.shape.numel(), 1.0);
    prune::detail::set_host_params(*teacher, p);
    auto plan = prune::keep_all(cfg);
    for (auto& l : plan.layers) l.ffn = {0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22};
    student = prune::apply_plan(*teacher, plan);
  }
};

}  // namespace

TEST_CASE("segment_trainer: gradients equal finite differences of the loss (f64)") {
  fixture f;
  const index_t B = 2, T = 8, C = f.cfg.d_model;
  const auto h = boundary_features(f.be, *f.teacher, ids_for(f.cfg.vocab, B * T, 7), B, T);
  auto params = prune::detail::host_params(*f.student);
  auto check_loss = [&](auto loss) {
    using L = decltype(loss);
    CAPTURE(L::name);
    distill::segment_trainer<backend::cpu, L> seg(f.be, f.student->config(), 1, 3, f.student->layout(), params, dtype::f64,
                                                  {}, loss);
    const tensor x(const_cast<double*>(h[1].data()), {B, T, C}), y(const_cast<double*>(h[3].data()), {B, T, C});
    seg.compute_gradients(x, y);
    std::vector<double> g(static_cast<std::size_t>(seg.layout().numel()));
    std::copy_n(static_cast<const double*>(seg.grads().data), g.size(), g.begin());
    double* p = static_cast<double*>(seg.params().data);
    double worst = 0;
    for (index_t i = 0; i < seg.layout().numel(); i += 37) {
      const double keep = p[i], eps = 1e-6;
      p[i] = keep + eps;
      const double up = seg.loss(x, y);
      p[i] = keep - eps;
      const double down = seg.loss(x, y);
      p[i] = keep;
      const double fd = (up - down) / (2 * eps);
      worst = std::max(worst, std::abs(fd - g[static_cast<std::size_t>(i)]) / std::max(1e-6, std::abs(fd)));
    }
    MESSAGE(L::name, ": worst relative FD error ", worst);
    CHECK(worst < 1e-5);
  };
  check_loss(policies::loss::mse{});
  check_loss(policies::loss::nmse{});
  check_loss(policies::loss::cosine{});
}

TEST_CASE("segment_trainer: training a pruned segment on teacher features lowers its loss; only the segment is resident") {
  fixture f;
  const index_t B = 4, T = 16, C = f.cfg.d_model;
  std::vector<std::vector<std::vector<double>>> train;  // 8 batches of boundary features
  for (int k = 0; k < 8; ++k) train.push_back(boundary_features(f.be, *f.teacher, ids_for(f.cfg.vocab, B * T, 3 + 2 * k), B, T));
  const auto held_out = boundary_features(f.be, *f.teacher, ids_for(f.cfg.vocab, B * T, 37), B, T);
  auto params = prune::detail::host_params(*f.student);
  optim::adamw_config oc;
  oc.weight_decay = 0;
  distill::segment_trainer<backend::cpu> seg(f.be, f.student->config(), 0, 2, f.student->layout(), params, dtype::f64, oc);
  auto view = [&](const std::vector<double>& v) { return tensor(const_cast<double*>(v.data()), {B, T, C}); };
  const tensor x = view(train[0][0]), y = view(train[0][2]), hx = view(held_out[0]), hy = view(held_out[2]);
  const double before = seg.loss(x, y), held_before = seg.loss(hx, hy);
  for (int s = 0; s < 80; ++s) seg.step(view(train[s % 8][0]), view(train[s % 8][2]), 2e-3);
  const double after = seg.loss(x, y), held_after = seg.loss(hx, hy);
  MESSAGE("nmse on a training batch ", before, " -> ", after, "; held-out batch ", held_before, " -> ", held_after);
  CHECK(after < 0.5 * before);
  CHECK(held_after < held_before);
  CHECK(seg.steps() == 80);
  // Resident: the segment's 2 layers' parameters, gradients, two moments, activations; less than the
  // whole student's parameters and moments would take.
  const std::size_t seg_param_bytes = static_cast<std::size_t>(seg.layout().numel()) * sizeof(double);
  CHECK(seg.resident_bytes() >= 4 * seg_param_bytes);
  CHECK(seg.layout().numel() == prune::layer_parameters(f.student->config(), f.student->config().layers[0]) +
                                   prune::layer_parameters(f.student->config(), f.student->config().layers[1]));

  // write_back changes exactly the segment's entries.
  auto updated = params;
  seg.write_back(f.student->layout(), updated);
  for (const auto& e : f.student->layout().entries()) {
    bool same = true;
    for (index_t i = 0; i < e.shape.numel(); ++i)
      same = same && updated[static_cast<std::size_t>(e.offset + i)] == params[static_cast<std::size_t>(e.offset + i)];
    const bool in_segment = e.name.rfind("layers.0.", 0) == 0 || e.name.rfind("layers.1.", 0) == 0;
    if (!in_segment) CHECK_MESSAGE(same, e.name);
    if (in_segment && e.name.find("weight") != std::string::npos && e.name.find("norm") == std::string::npos)
      CHECK_MESSAGE(!same, e.name);
  }
}

TEST_CASE("segment_trainer: bad input and divergence raise lwcl::error") {
  fixture f;
  auto params = prune::detail::host_params(*f.student);
  CHECK_THROWS_WITH_AS(distill::segment_trainer<backend::cpu>(f.be, f.student->config(), 2, 4, f.student->layout(), params,
                                                              dtype::f64, {}),
                       doctest::Contains("layers [2, 4) are not inside the student's 3 layers"), lwcl::error);
  params.pop_back();
  CHECK_THROWS_WITH_AS(distill::segment_trainer<backend::cpu>(f.be, f.student->config(), 0, 1, f.student->layout(), params,
                                                              dtype::f64, {}),
                       doctest::Contains("parameters for a layout of"), lwcl::error);
  params = prune::detail::host_params(*f.student);
  distill::segment_trainer<backend::cpu> seg(f.be, f.student->config(), 0, 1, f.student->layout(), params, dtype::f64, {});
  const index_t B = 1, T = 4, C = f.cfg.d_model;
  std::vector<double> x(static_cast<std::size_t>(B * T * C), 1.0), y(x.size(), std::nan(""));
  CHECK_THROWS_WITH_AS(seg.step(tensor(x.data(), {B, T, C}), tensor(y.data(), {B, T, C}), 1e-3),
                       doctest::Contains("segment [0, 1) stopped at its step 1"), lwcl::error);
  // The tensor that holds the NaN or infinity is named: the target, the input, a parameter.
  CHECK_THROWS_WITH_AS(seg.step(tensor(x.data(), {B, T, C}), tensor(y.data(), {B, T, C}), 1e-3),
                       doctest::Contains("its target features hold nan at element 0 of"), lwcl::error);
  std::fill(y.begin(), y.end(), 0.5);
  x[5] = std::numeric_limits<double>::infinity();
  CHECK_THROWS_WITH_AS(seg.step(tensor(x.data(), {B, T, C}), tensor(y.data(), {B, T, C}), 1e-3),
                       doctest::Contains("its input features hold inf at element 5 of"), lwcl::error);
  x[5] = 1.0;
  const auto& w = f.student->layout().find("layers.0.norm2.weight");
  params[static_cast<std::size_t>(w.offset + 3)] = std::nan("");
  distill::segment_trainer<backend::cpu> poisoned(f.be, f.student->config(), 0, 1, f.student->layout(), params,
                                                  dtype::f64, {});
  const std::string named = "parameter 'layers.0.norm2.weight' " + w.shape.str() + " holds nan at element 3";
  CHECK_THROWS_WITH_AS(poisoned.step(tensor(x.data(), {B, T, C}), tensor(y.data(), {B, T, C}), 1e-3),
                       doctest::Contains(named.c_str()), lwcl::error);
  // Finite inputs and parameters: nothing to name.
  CHECK(seg.locate_nonfinite(tensor(x.data(), {B, T, C}), tensor(y.data(), {B, T, C})).empty());
}

// The weight-entangled supernet (search/supernet.hpp): a candidate chosen outright computes what the
// standalone subnet computes (pruned by prune::apply_plan, its weights fake-quantised to the chosen bits,
// its 8-bit sites quantised per token by a hook written here); reorder_ffn keeps the block's function;
// the architecture gradients (hook and weight terms) and the block's input gradient match central
// differences; the expected latency's gradient matches central differences; bad spaces and choices get
// clear errors.
#include <doctest/doctest.h>

#include <cmath>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "lwcl/backend/host/host.hpp"
#include "lwcl/core/rng.hpp"
#include "lwcl/model/block_stack.hpp"
#include "lwcl/model/host_params.hpp"
#include "lwcl/model/transformer.hpp"
#include "lwcl/prune/surgery.hpp"
#include "lwcl/quant/act_quant.hpp"
#include "lwcl/quant/fake_quant.hpp"
#include "lwcl/search/supernet.hpp"
#include "support/check.hpp"

using namespace lwcl;
using lwcl::test::rel_error;

namespace {

// One block (layer `layer` of `cfg`) over f32 parameters in its own layout, run on the host.
struct one_block {
  backend::cpu be;
  model::model_config cfg;
  index_t layer, B = 2, T = 8;
  model::block_shape sh;
  tensor_layout layout;
  std::vector<float> w, g;

  one_block(const model::model_config& c, index_t l, const tensor_layout& src_layout, const std::vector<double>& src)
      : cfg(c), layer(l), sh(model::shape_of_layer(c, l)) {
    model::add_stack_params(layout, cfg, l, l + 1);
    w.assign(static_cast<std::size_t>(layout.numel()), 0.0f);
    g.assign(w.size(), 0.0f);
    for (const auto& e : layout.entries()) {
      const auto& s = src_layout.find(e.name);
      for (index_t i = 0; i < e.shape.numel(); ++i) w[static_cast<std::size_t>(e.offset + i)] = static_cast<float>(src[static_cast<std::size_t>(s.offset + i)]);
    }
  }
  shape xs() const { return {B, T, cfg.d_model}; }
  // y = block(x) with `hook`; with dy, also the backward (grads into g, dx returned).
  std::vector<float> run(const std::vector<float>& x, model::linear_input_hook* hook, const std::vector<float>* dy = nullptr,
                         std::vector<float>* dx = nullptr) {
    model::block_acts<backend::cpu> a(be, sh, B, T, dtype::f32), ga(be, sh, B, T, dtype::f32, true);
    const auto wb = model::bind_block(layout, model::layer_prefix(layer), w.data(), dtype::f32);
    auto gb = model::bind_block(layout, model::layer_prefix(layer), g.data(), dtype::f32);
    std::vector<float> xin(x), y(x.size(), 0.0f);
    model::block_forward(be, sh, wb, a, tensor(xin.data(), xs()), tensor(y.data(), xs()), hook, layer);
    if (dy) {
      std::fill(g.begin(), g.end(), 0.0f);
      std::vector<float> dyc(*dy);
      dx->assign(x.size(), 0.0f);
      model::block_backward(be, sh, wb, gb, a, ga, tensor(xin.data(), xs()), tensor(dx->data(), xs()), tensor(dyc.data(), xs()), hook,
                            layer);
    }
    return y;
  }
};

// The reference for 8-bit activations: quantises the inputs of the named sites per token, nothing else.
struct token_quant_hook : model::linear_input_hook {
  std::map<model::linear_site, int> bits;
  void forward(index_t, model::linear_site site, const tensor& x) override {
    if (bits.at(site) != 8) return;
    const index_t K = x.shape[x.shape.rank() - 1];
    quant::fake_quantize_tokens(x.ptr<float>("token_quant_hook"), x.numel() / K, K);
  }
  void backward(index_t, model::linear_site, const tensor&) override {}
};

std::vector<float> random_vector(std::size_t n, std::uint64_t seed, float scale) {
  const philox_stream s{seed, 7};
  std::vector<float> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = scale * (2 * s.uniform(i) - 1);
  return v;
}

model::model_config small_config(model::family f) {
  // Width 128, head dim 32: four heads (two KV groups for llama), FFN 128; group 32 fits every candidate.
  return model::model_config::uniform(f, 64, 16, 128, 2, 4, f == model::family::llama ? 2 : 4, 128);
}

search::supernet_space small_space(model::family f) {
  search::supernet_space s;
  s.kv_groups = f == model::family::llama ? std::vector<index_t>{2, 1} : std::vector<index_t>{4, 3, 2};
  s.ffn = {128, 96, 64, 32};
  s.group = 32;
  return s;
}

// Host f32 parameters with layer `l`'s FFN reordered.
std::vector<double> reordered(const model::transformer<backend::cpu>& net, index_t l) {
  const auto h = model::host_params(net);
  std::vector<float> f(h.begin(), h.end());
  search::reorder_ffn(net.config(), net.layout(), f, l);
  return std::vector<double>(f.begin(), f.end());
}

}  // namespace

TEST_CASE("reorder_ffn permutes a layer's FFN channels into importance order and keeps the block's function") {
  for (auto fam : {model::family::gpt2, model::family::llama}) {
    CAPTURE(model::family_name(fam));
    backend::cpu be;
    model::transformer<backend::cpu> net(be, small_config(fam), dtype::f32);
    net.init(5);
    const auto before = model::host_params(net);
    const auto after = reordered(net, 1);
    one_block a(net.config(), 1, net.layout(), before), b(net.config(), 1, net.layout(), after);
    const auto x = random_vector(static_cast<std::size_t>(a.B * a.T * a.cfg.d_model), 3, 1.0f);
    CHECK(rel_error(b.run(x, nullptr), a.run(x, nullptr)) < 1e-5);
    CHECK(rel_error(b.w, a.w) > 0.1);  // the weights did move
    const auto imp = search::ffn_importance(net.config(), b.layout, b.w, 1);
    for (std::size_t j = 1; j < imp.size(); ++j) CHECK(imp[j - 1] >= imp[j]);
  }
}

TEST_CASE("a supernet candidate chosen outright computes the standalone pruned and quantised subnet") {
  for (auto fam : {model::family::gpt2, model::family::llama}) {
    CAPTURE(model::family_name(fam));
    backend::cpu be;
    model::transformer<backend::cpu> net(be, small_config(fam), dtype::f32);
    net.init(11);
    const auto params = reordered(net, 1);
    model::set_host_params(net, params);
    one_block super(net.config(), 1, net.layout(), params);
    const auto space = small_space(fam);
    search::supernet_layer sn(net.config(), space, 1, super.layout, super.w);

    search::layer_choice c;
    c.kv_groups = fam == model::family::llama ? 1 : 3;
    c.ffn = 64;
    const bool gated = fam == model::family::llama;
    const std::vector<std::pair<std::string, int>> bits =
        gated ? std::vector<std::pair<std::string, int>>{{"attn.q.weight", 4}, {"attn.k.weight", 8}, {"attn.v.weight", 32},
                                                         {"attn.o.weight", 4}, {"mlp.gate.weight", 8}, {"mlp.up.weight", 4},
                                                         {"mlp.down.weight", 4}}
              : std::vector<std::pair<std::string, int>>{{"attn.q.weight", 4}, {"attn.k.weight", 8}, {"attn.v.weight", 32},
                                                         {"attn.o.weight", 4}, {"mlp.fc.weight", 8}, {"mlp.proj.weight", 4}};
    for (const auto& [n, b] : bits) c.weight_bits[n] = b;
    c.act_bits = {{model::linear_site::qkv, 8}, {model::linear_site::o, 32}, {model::linear_site::mlp_in, 8},
                  {model::linear_site::mlp_out, 8}};
    sn.fix(c);
    sn.sample(philox_stream{1, 2}, 1.0);
    std::vector<float> eff(super.w);
    const std::vector<float> master(super.w);
    sn.mix_weights(super.layout, master, eff);
    super.w = eff;
    const auto x = random_vector(static_cast<std::size_t>(super.B * super.T * super.cfg.d_model), 9, 1.0f);
    const auto y_super = super.run(x, &sn);

    // The standalone subnet: the plan keeps the supernet's ranked KV groups and FFN prefix.
    prune::prune_plan plan = prune::keep_all(net.config());
    plan.layers[1] = sn.plan_of(c);
    CHECK(static_cast<index_t>(plan.layers[1].kv_heads.size()) == c.kv_groups);
    const auto sub = prune::apply_plan(net, plan);
    auto sub_params = model::host_params(*sub);
    for (const auto& [n, b] : bits) {
      if (b == 32) continue;
      const auto& e = sub->layout().find(model::layer_prefix(1) + n);
      std::vector<float> v(sub_params.begin() + e.offset, sub_params.begin() + e.offset + e.shape.numel());
      quant::weight_format f;
      f.bits = b;
      f.group = space.group;
      quant::fake_quantize(v.data(), e.shape[0], e.shape[1], f, e.name);
      std::copy(v.begin(), v.end(), sub_params.begin() + e.offset);
    }
    one_block standalone(sub->config(), 1, sub->layout(), sub_params);
    token_quant_hook ref;
    ref.bits = c.act_bits;
    const auto y_sub = standalone.run(x, &ref);
    CHECK(rel_error(y_super, y_sub) < 1e-5);

    // Another choice differs (the comparison can fail).
    search::layer_choice wider = c;
    wider.ffn = 96;
    sn.fix(wider);
    sn.sample(philox_stream{1, 2}, 1.0);
    std::vector<float> eff2(master);
    sn.mix_weights(super.layout, master, eff2);
    super.w = eff2;
    CHECK(rel_error(super.run(x, &sn), y_sub) > 1e-3);
  }
}

TEST_CASE("supernet architecture gradients and the block's input gradient match central differences") {
  backend::cpu be;
  const auto fam = model::family::gpt2;
  model::transformer<backend::cpu> net(be, small_config(fam), dtype::f32);
  net.init(21);
  const auto params = reordered(net, 0);
  for (int act_case = 0; act_case < 2; ++act_case) {
    CAPTURE(act_case);
    // Case 0: widths and weight bits searched, f32 activations (the loss is smooth in every logit):
    // central differences of every logit and of the block's input.
    // Case 1: 8-bit activations searched too; the mlp_out site's act-bit gradient is checked against
    // the exact loss difference (below).
    auto space = small_space(fam);
    if (act_case == 0) space.act_bits = {32};
    one_block blk(net.config(), 0, net.layout(), params);
    const std::vector<float> master(blk.w);
    search::supernet_layer sn(net.config(), space, 0, blk.layout, blk.w);
    const auto logits = sn.logits();
    const philox_stream init{77, 1};
    for (std::size_t i = 0; i < logits.size(); ++i) *logits[i] = 0.8 * (2.0 * init.uniform(i) - 1.0);
    // Case 1 draws no noise and starts the mlp_out site near p = 1/2.
    const bool noise = act_case == 0;
    if (act_case == 1) {
      *logits[logits.size() - 2] = 0.1;
      *logits[logits.size() - 1] = -0.1;
    }
    const auto x = random_vector(static_cast<std::size_t>(blk.B * blk.T * blk.cfg.d_model), 31, 1.0f);
    const auto R = random_vector(x.size(), 32, 1.0f);
    const double tau = 0.7;
    // loss = sum(y . R), with the Gumbel noise of one fixed draw.
    auto loss = [&](const std::vector<float>& xin) {
      sn.sample(philox_stream{5, 6}, tau, noise);
      std::vector<float> eff(master);
      sn.mix_weights(blk.layout, master, eff);
      blk.w = eff;
      const auto y = blk.run(xin, &sn);
      double s = 0;
      for (std::size_t i = 0; i < y.size(); ++i) s += static_cast<double>(y[i]) * R[i];
      return s;
    };
    sn.sample(philox_stream{5, 6}, tau, noise);
    std::vector<float> eff(master);
    sn.mix_weights(blk.layout, master, eff);
    blk.w = eff;
    std::vector<float> dx;
    blk.run(x, &sn, &R, &dx);
    sn.weight_grads(blk.layout, blk.g.data(), master);
    const auto analytic = sn.logit_grads();
    REQUIRE(analytic.size() == logits.size());
    // The logits of each choice, in logit_grads() order: kv_groups 3, ffn 4, weight bits per linear
    // (6 x 3, names in map order), act bits per site (4 x |act|, sites in enum order).
    const std::size_t n_act = space.act_bits.size();
    const std::size_t act_base = logits.size() - 4 * n_act;
    if (act_case == 1) {
      // The loss is affine in the mlp_out site's mixing weight p8 (nothing downstream of it is quantised),
      // so d(loss)/d(p8) - d(loss)/d(p32) is exactly loss(8-bit) - loss(f32): the two evaluated with the
      // softmax saturated either way. The analytic logit gradient is p8 p32 / tau times that difference.
      REQUIRE(space.act_bits == std::vector<int>{8, 32});
      const std::size_t i8 = logits.size() - 2, i32 = logits.size() - 1;
      const double p8 = 1.0 / (1.0 + std::exp(-(*logits[i8] - *logits[i32]) / tau));
      const double analytic_diff = analytic[i8] * tau / (p8 * (1.0 - p8));
      const double keep8 = *logits[i8], keep32 = *logits[i32];
      *logits[i8] = 40.0;
      *logits[i32] = -40.0;
      const double l8 = loss(x);
      *logits[i8] = -40.0;
      *logits[i32] = 40.0;
      const double l32 = loss(x);
      *logits[i8] = keep8;
      *logits[i32] = keep32;
      MESSAGE("mlp_out 8-bit activations: loss moves by ", l8 - l32, ", the gradient says ", analytic_diff);
      // f32 forward passes: each loss carries a few 1e-6 of rounding against a difference of 1.5e-3 (measured
      // agreement 4e-4).
      CHECK(analytic_diff == doctest::Approx(l8 - l32).epsilon(3e-3));
      CHECK(analytic[i32] == doctest::Approx(-analytic[i8]).epsilon(1e-9));
      CHECK(std::abs(l8 - l32) > 1e-4);  // the 8-bit rounding does move the loss
      continue;
    }
    std::vector<double> fd, an;
    const double h = 1e-2;
    for (std::size_t i = 0; i < act_base; ++i) {
      const double keep = *logits[i];
      *logits[i] = keep + h;
      const double lp = loss(x);
      *logits[i] = keep - h;
      const double lm = loss(x);
      *logits[i] = keep;
      fd.push_back((lp - lm) / (2 * h));
      an.push_back(analytic[i]);
    }
    MESSAGE("architecture gradient: relative error ", rel_error(an, fd), " over ", an.size(), " logits");
    // f32 forward passes: the differences carry about 1e-5 of rounding over 2h = 0.02.
    CHECK(rel_error(an, fd) < 2e-3);
    double norm = 0;
    for (double v : an) norm = std::max(norm, std::abs(v));
    // The gradients are not all zero.
    CHECK(norm > 1e-2);
    {
      // d(loss)/dx through the masks (the hook's dx' . m) at a few input elements.
      std::vector<double> fdx, adx;
      for (std::size_t i = 0; i < x.size(); i += 97) {
        std::vector<float> xp(x), xm(x);
        xp[i] += 1e-2f;
        xm[i] -= 1e-2f;
        fdx.push_back((loss(xp) - loss(xm)) / 2e-2);
        adx.push_back(dx[i]);
      }
      MESSAGE("input gradient: relative error ", rel_error(adx, fdx));
      CHECK(rel_error(adx, fdx) < 2e-3);
    }
  }
}

TEST_CASE("the supernet's expected latency and its gradient") {
  const auto cfg = small_config(model::family::gpt2);
  backend::cpu be;
  model::transformer<backend::cpu> net(be, cfg, dtype::f32);
  net.init(2);
  one_block blk(cfg, 0, net.layout(), model::host_params(net));
  const auto space = small_space(model::family::gpt2);
  search::supernet_layer sn(cfg, space, 0, blk.layout, blk.w);
  // A table in which time grows with the weight bytes and 8-bit activations save a little.
  const search::linear_latency table = [](index_t r, index_t c, int wb, int ab) {
    return 1e-6 * (1.0 + static_cast<double>(r * c) * wb / 8192.0) * (ab == 8 ? 0.9 : 1.0);
  };
  auto logits = sn.logits();
  const philox_stream init{3, 3};
  for (std::size_t i = 0; i < logits.size(); ++i) *logits[i] = 2.0 * init.uniform(i) - 1.0;
  const double tau = 1.3, target = 1e-6;
  auto penalty = [&] {
    sn.sample(philox_stream{8, 8}, tau);
    return std::max(0.0, std::log(sn.expected_latency(table) / target));
  };
  // A chosen candidate's expected latency is its table sum.
  search::layer_choice full;
  full.kv_groups = 4;
  full.ffn = 128;
  for (const auto& l : search::supernet_linears(cfg)) full.weight_bits[l.name] = 32;
  for (auto s : search::all_sites) full.act_bits[s] = 32;
  sn.fix(full);
  sn.sample(philox_stream{8, 8}, tau);
  // q, k, v, o are 128 x 128; the FFN's up is 128 (channels) x 128 (width) and its down 128 x 128.
  const double want = 4 * table(128, 128, 32, 32) + table(128, 128, 32, 32) + table(128, 128, 32, 32);
  CHECK(sn.expected_latency(table) == doctest::Approx(want).epsilon(1e-12));
  sn.clear_fixed();

  sn.sample(philox_stream{8, 8}, tau);
  const double E = sn.expected_latency(table, target, 1.0);
  REQUIRE(E > target);
  // Central differences of f over every logit.
  const auto central = [&](auto&& f) {
    std::vector<double> fd;
    for (double* l : logits) {
      const double keep = *l;
      *l = keep + 1e-5;
      const double p = f();
      *l = keep - 1e-5;
      const double m = f();
      *l = keep;
      fd.push_back((p - m) / 2e-5);
    }
    return fd;
  };
  const auto an = sn.logit_grads();
  CHECK(rel_error(an, central(penalty)) < 1e-6);

  // Two-sided, under a target above E: the gradient of lambda * |log(E / target)| = log(target / E).
  const double high = 4.0 * E;
  auto below = [&] {
    sn.sample(philox_stream{8, 8}, tau);
    return std::abs(std::log(sn.expected_latency(table) / high));
  };
  sn.sample(philox_stream{8, 8}, tau);
  REQUIRE(sn.expected_latency(table, high, 1.0, true) < high);
  const auto an2 = sn.logit_grads();
  const double err2 = rel_error(an2, central(below));
  MESSAGE("two-sided latency gradient under the target: relative error ", err2);
  CHECK(err2 < 1e-6);
  // The one-sided hinge leaves a layer under its target alone.
  sn.sample(philox_stream{8, 8}, tau);
  (void)sn.expected_latency(table, high, 1.0, false);
  for (const double g : sn.logit_grads()) CHECK(g == 0.0);
}

TEST_CASE("bad supernet spaces and choices get clear errors") {
  const auto cfg = small_config(model::family::gpt2);
  backend::cpu be;
  model::transformer<backend::cpu> net(be, cfg, dtype::f32);
  net.init(2);
  one_block blk(cfg, 0, net.layout(), model::host_params(net));
  auto s = small_space(model::family::gpt2);
  s.ffn = {128, 40};
  CHECK_THROWS_WITH_AS(s.validate(cfg), doctest::Contains("FFN candidate 40 is not a multiple of the group 32"), lwcl::error);
  s = small_space(model::family::gpt2);
  s.weight_bits = {4, 16};
  CHECK_THROWS_WITH_AS(s.validate(cfg), doctest::Contains("weight bits 16 (expected 4, 8 or 32)"), lwcl::error);
  s = small_space(model::family::gpt2);
  s.kv_groups = {5};
  CHECK_THROWS_WITH_AS(s.validate(cfg), doctest::Contains("5 KV groups in layer 0, which has 4"), lwcl::error);
  s = small_space(model::family::gpt2);
  s.group = 64;  // does not divide the head dim 32
  CHECK_THROWS_WITH_AS(s.validate(cfg), doctest::Contains("must divide the width 128 and the head dim 32"), lwcl::error);
  s.group = 16;
  CHECK_THROWS_WITH_AS(s.validate(cfg), doctest::Contains("group 16 is not a multiple of 32"), lwcl::error);
  search::supernet_layer sn(cfg, small_space(model::family::gpt2), 0, blk.layout, blk.w);
  search::layer_choice c = sn.chosen();
  c.ffn = 100;
  CHECK_THROWS_WITH_AS(sn.fix(c), doctest::Contains("FFN width 100 is not a candidate"), lwcl::error);
  auto bert = model::model_config::uniform(model::family::bert, 64, 16, 64, 2, 4, 4, 128);
  CHECK_THROWS_WITH_AS(small_space(model::family::gpt2).validate(bert), doctest::Contains("pre-norm blocks"), lwcl::error);
}

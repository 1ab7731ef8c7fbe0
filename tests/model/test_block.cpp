// Transformer blocks of every family against float64 PyTorch fixtures (tools/fixtures/blocks.py):
// forward within 1e-5 and every gradient within 1e-4 relative in f32, much tighter in f64, plus a
// finite-difference check of the block's backward pass in f64.
#include <doctest/doctest.h>

#include <string>
#include <vector>
#include <utility>

#include "lwcl/backend/host/host.hpp"
#include "lwcl/model/block.hpp"
#include "support/check.hpp"
#include "support/fixture.hpp"

using namespace lwcl;
using lwcl::test::rel_error;

namespace {

model::family family_of_case(const std::string& name) {
  return model::parse_family(name.substr(0, name.find('_')));
}

template <class T>
struct block_case {
  test::fixture fx;
  model::block_shape sh;
  index_t B, T_;
  tensor_layout layout;
  std::vector<T> params, grads, x, y, dx, dy;
  backend::cpu be;
  std::unique_ptr<model::block_acts<backend::cpu>> acts, gacts;
  model::block_weights w, dw;

  explicit block_case(const std::string& name) : fx("model/block_" + name + ".lwfx") {
    const auto cfg = fx.ints("config");  // C, H, KVH, D, F, B, T
    sh.tr = model::traits_of(family_of_case(name));
    sh.C = cfg[0];
    sh.H = cfg[1];
    sh.KVH = cfg[2];
    sh.D = cfg[3];
    sh.F = cfg[4];
    B = cfg[5];
    T_ = cfg[6];
    sh.eps = sh.tr.rms_norm ? 1e-6 : 1e-5;
    sh.theta = fx.scalar("theta");
    model::add_block_params(layout, "", sh);
    params.resize(static_cast<std::size_t>(layout.numel()));
    grads.assign(params.size(), T(0));
    for (const auto& e : layout.entries()) {
      const auto v = fx.as<T>("param." + e.name);
      REQUIRE(static_cast<index_t>(v.size()) == e.shape.numel());
      std::copy(v.begin(), v.end(), params.begin() + e.offset);
    }
    x = fx.as<T>("x");
    dy = fx.as<T>("dy");
    y.assign(x.size(), T(0));
    dx.assign(x.size(), T(0));
    acts = std::make_unique<model::block_acts<backend::cpu>>(be, sh, B, T_, dtype_of_v<T>);
    gacts = std::make_unique<model::block_acts<backend::cpu>>(be, sh, B, T_, dtype_of_v<T>, true);
    w = model::bind_block(layout, "", params.data(), dtype_of_v<T>);
    dw = model::bind_block(layout, "", grads.data(), dtype_of_v<T>);
  }
  shape xs() const { return {B, T_, sh.C}; }
  void forward() { model::block_forward(be, sh, w, *acts, tensor(x.data(), xs()), tensor(y.data(), xs())); }
  void backward() {
    model::block_backward(be, sh, w, dw, *acts, *gacts, tensor(x.data(), xs()), tensor(dx.data(), xs()), tensor(dy.data(), xs()));
  }
  std::vector<T> grad_of(const std::string& name) const {
    const auto& e = layout.find(name);
    return std::vector<T>(grads.begin() + e.offset, grads.begin() + e.offset + e.shape.numel());
  }
};

const char* const cases[] = {"gpt2", "bert", "llama_gqa", "qwen2_gqa"};

}  // namespace

TEST_CASE_TEMPLATE("blocks of every family match PyTorch", T, float, double) {
  const double fwd_tol = std::is_same_v<T, float> ? 1e-5 : 1e-11;
  const double bwd_tol = std::is_same_v<T, float> ? 1e-4 : 1e-10;
  for (const char* name : cases) {
    CAPTURE(name);
    block_case<T> c(name);
    c.forward();
    c.backward();
    CHECK(rel_error(c.y, c.fx.f64("y")) < fwd_tol);
    CHECK(rel_error(c.dx, c.fx.f64("dx")) < bwd_tol);
    const auto dx_ref = c.fx.f64("dx");
    double scale = 0;
    for (double d : dx_ref) scale = std::max(scale, std::abs(d));
    for (const auto& e : c.layout.entries()) {
      CAPTURE(e.name);
      const auto ref = c.fx.f64("grad." + e.name);
      const auto got = c.grad_of(e.name);
      if (e.name == "attn.k.bias" && !c.sh.tr.rope) {
        // Without RoPE a key bias shifts a whole score row, which softmax cancels: the true gradient is
        // zero and the reference holds only rounding noise, so check it vanishes on the scale of dx.
        for (T v : got) CHECK(std::abs(static_cast<double>(v)) < bwd_tol * scale);
        continue;
      }
      CHECK(rel_error(got, ref) < bwd_tol);
    }
  }
}

TEST_CASE("block gradients match finite differences") {
  for (const char* name : cases) {
    CAPTURE(name);
    block_case<double> c(name);
    c.forward();
    c.backward();
    auto loss = [&] {
      c.forward();
      return test::dot(c.y, c.dy);
    };
    CHECK(test::gradcheck(c.x, c.dx, loss, 1e-6, 24) < 1e-5);
    CHECK(test::gradcheck(c.params, c.grads, loss, 1e-6, 96) < 1e-5);
  }
}

TEST_CASE("block config errors name the layer and the widths") {
  auto cfg = model::model_config::uniform(model::family::llama, 100, 16, 48, 2, 6, 4, 64);
  CHECK_THROWS_WITH_AS(cfg.validate(), doctest::Contains("layer 0 has 4 KV heads, which does not divide its 6 query heads"),
                       lwcl::error);
  cfg.layers[0].n_kv_heads = 2;
  cfg.layers[1].n_kv_heads = 3;
  cfg.layers[1].ffn = 0;
  CHECK_THROWS_WITH_AS(cfg.validate(), doctest::Contains("layer 1 has FFN width 0"), lwcl::error);
  CHECK_THROWS_WITH_AS(model::parse_family("gpt3"), doctest::Contains("model family 'gpt3' is unknown"), lwcl::error);
}

namespace {

// Scales column c of each linear site's input by that site's factor s[c] (and the gradient likewise):
// the same block as one whose weights at that site have their columns scaled.
struct column_scale_hook : model::linear_input_hook {
  std::vector<double> s[4];
  int forwards = 0, backwards = 0;
  void apply(model::linear_site site, const tensor& x) {
    auto* d = x.ptr<double>("column_scale_hook");
    const auto& f = s[static_cast<int>(site)];
    const index_t K = static_cast<index_t>(f.size());
    REQUIRE(x.numel() % K == 0);
    for (index_t i = 0; i < x.numel(); ++i) d[i] *= f[static_cast<std::size_t>(i % K)];
  }
  void forward(index_t layer, model::linear_site site, const tensor& x) override {
    CHECK(layer == 7);
    ++forwards;
    apply(site, x);
  }
  void backward(index_t layer, model::linear_site site, const tensor& dx) override {
    CHECK(layer == 7);
    ++backwards;
    apply(site, dx);
  }
};

}  // namespace

TEST_CASE("a linear input hook is the same block as scaling the site's weight columns, forward and backward") {
  for (const char* name : {"gpt2", "llama_gqa"}) {
    CAPTURE(name);
    block_case<double> hooked(name), scaled(name);
    column_scale_hook h;
    const index_t widths[4] = {hooked.sh.C, hooked.sh.H * hooked.sh.D, hooked.sh.C, hooked.sh.F};
    for (int s = 0; s < 4; ++s)
      for (index_t c = 0; c < widths[s]; ++c) h.s[s].push_back(c % 3 == 0 ? 0.0 : 0.5 + 0.01 * static_cast<double>((c * 7 + s) % 50));
    const std::vector<std::pair<const char*, int>> site_of = {
        {"attn.q.weight", 0}, {"attn.k.weight", 0}, {"attn.v.weight", 0}, {"attn.o.weight", 1}, {"mlp.fc.weight", 2},
        {"mlp.gate.weight", 2}, {"mlp.up.weight", 2}, {"mlp.proj.weight", 3}, {"mlp.down.weight", 3}};
    for (const auto& [param, site] : site_of) {
      if (!scaled.layout.contains(param)) continue;
      const auto& e = scaled.layout.find(param);
      for (index_t r = 0; r < e.shape[0]; ++r)
        for (index_t c = 0; c < e.shape[1]; ++c) scaled.params[static_cast<std::size_t>(e.offset + r * e.shape[1] + c)] *= h.s[site][static_cast<std::size_t>(c)];
    }
    model::block_forward(hooked.be, hooked.sh, hooked.w, *hooked.acts, tensor(hooked.x.data(), hooked.xs()),
                         tensor(hooked.y.data(), hooked.xs()), &h, 7);
    model::block_backward(hooked.be, hooked.sh, hooked.w, hooked.dw, *hooked.acts, *hooked.gacts, tensor(hooked.x.data(), hooked.xs()),
                          tensor(hooked.dx.data(), hooked.xs()), tensor(hooked.dy.data(), hooked.xs()), &h, 7);
    scaled.forward();
    scaled.backward();
    CHECK(h.forwards == 4);
    CHECK(h.backwards == 4);
    CHECK(rel_error(hooked.y, scaled.y) < 1e-12);
    CHECK(rel_error(hooked.dx, scaled.dx) < 1e-12);
    // The hooked block's weight gradient is taken at the scaled input: the scaled block's, column-scaled.
    for (const auto& ps : site_of) {
      const std::string param = ps.first;
      const int site = ps.second;
      if (!scaled.layout.contains(param)) continue;
      CAPTURE(param);
      const auto& e = scaled.layout.find(param);
      auto want = scaled.grad_of(param);
      for (index_t r = 0; r < e.shape[0]; ++r)
        for (index_t c = 0; c < e.shape[1]; ++c) want[static_cast<std::size_t>(r * e.shape[1] + c)] *= h.s[site][static_cast<std::size_t>(c)];
      CHECK(rel_error(hooked.grad_of(param), want) < 1e-12);
    }
    for (const char* other : {"norm1.weight", "norm2.weight"}) {
      CAPTURE(other);
      CHECK(rel_error(hooked.grad_of(other), scaled.grad_of(other)) < 1e-12);
    }
  }
  block_case<double> bert("bert");
  column_scale_hook h;
  CHECK_THROWS_WITH_AS(model::block_forward(bert.be, bert.sh, bert.w, *bert.acts, tensor(bert.x.data(), bert.xs()),
                                            tensor(bert.y.data(), bert.xs()), &h, 7),
                       doctest::Contains("needs a pre-norm block"), lwcl::error);
}

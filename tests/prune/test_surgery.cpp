// Structured pruning surgery (prune/plan.hpp, prune/surgery.hpp): the cut model equals the masked
// teacher (heads whose o-projection columns are zero, FFN channels whose down-projection columns are
// zero, layers whose outputs are zero), under GQA too; it reloads from a checkpoint; parameter counts
// match the model's; bias compensation lowers the output error; bad plans are refused.
#include <doctest/doctest.h>

#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include "lwcl/backend/host/host.hpp"
#include "lwcl/model/checkpoint/hf.hpp"
#include "lwcl/policies/pruning/magnitude.hpp"
#include "lwcl/prune/allocate.hpp"
#include "lwcl/prune/stats.hpp"
#include "lwcl/prune/surgery.hpp"
#include "support/check.hpp"

using namespace lwcl;

namespace {

using net_t = model::transformer<backend::cpu>;

// A model with weights of standard deviation ~0.4 (0.02 of the usual init times 20), so that every
// layer changes the logits visibly.
std::unique_ptr<net_t> make_model(backend::cpu& be, const model::model_config& cfg, dtype t, std::uint64_t seed) {
  auto net = std::make_unique<net_t>(be, cfg, t);
  net->init(seed);
  auto p = prune::detail::host_params(*net);
  for (const auto& e : net->layout().entries())
    if (e.name.find("norm") == std::string::npos)
      for (index_t i = 0; i < e.shape.numel(); ++i) p[static_cast<std::size_t>(e.offset + i)] *= 20;
  // Non-zero biases, so that copying them is checked too.
  for (const auto& e : net->layout().entries())
    if (e.name.size() > 5 && e.name.compare(e.name.size() - 5, 5, ".bias") == 0)
      for (index_t i = 0; i < e.shape.numel(); ++i) p[static_cast<std::size_t>(e.offset + i)] = 0.05 * std::sin(1.0 + static_cast<double>(i));
  prune::detail::set_host_params(*net, p);
  return net;
}

std::vector<std::int32_t> tokens_for(const model::model_config& cfg, index_t n) {
  std::vector<std::int32_t> t(static_cast<std::size_t>(n));
  for (index_t i = 0; i < n; ++i) t[static_cast<std::size_t>(i)] = static_cast<std::int32_t>((i * 7 + 3) % cfg.vocab);
  return t;
}

std::vector<double> logits_of(net_t& net, const std::vector<std::int32_t>& tok, index_t B, index_t T) {
  const tensor l = net.forward_logits(tensor(tok.data(), {B, T}));
  std::vector<double> out(static_cast<std::size_t>(l.numel()));
  ops::dispatch_float("test", l.type, [&](auto z) {
    using U = decltype(z);
    const U* p = static_cast<const U*>(l.data);
    for (std::size_t i = 0; i < out.size(); ++i) out[i] = static_cast<double>(p[i]);
  });
  return out;
}

double rel_diff(const std::vector<double>& a, const std::vector<double>& b) {
  double num = 0, den = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    num += (a[i] - b[i]) * (a[i] - b[i]);
    den += b[i] * b[i];
  }
  return std::sqrt(num / den);
}

model::model_config llama_gqa() {
  auto c = model::model_config::uniform(model::family::llama, 50, 32, 32, 3, 8, 2, 40);  // head_dim 4, 4 heads per KV group
  c.tie_embeddings = false;
  return c;
}

// Layer 0: both KV groups, two query heads of each; layer 1: KV group 1 with all its heads; layer 2 removed.
prune::prune_plan gqa_plan() {
  prune::prune_plan p;
  p.layers.resize(3);
  p.layers[0] = {false, {0, 1}, {0, 2, 5, 7}, {0, 3, 4, 9, 10, 11, 20, 21, 30, 39}};
  p.layers[1] = {false, {1}, {4, 5, 6, 7}, {1, 2, 3, 5, 8, 13, 21, 34}};
  p.layers[2].removed = true;
  return p;
}

}  // namespace

TEST_CASE("model_parameters equals the parameter count of the model lwcl builds") {
  backend::cpu be;
  auto gpt2 = model::model_config::uniform(model::family::gpt2, 97, 24, 32, 2, 4, 4, 52);
  auto qwen = model::model_config::uniform(model::family::qwen2, 97, 24, 32, 2, 4, 2, 52);
  auto uneven = llama_gqa();
  uneven.layers[1] = {4, 1, 17};
  auto biased = uneven;
  biased.output_bias = true;
  for (const auto& cfg : {gpt2, qwen, uneven, biased, llama_gqa()}) {
    net_t net(be, cfg);
    CHECK(prune::model_parameters(cfg) == net.num_parameters());
  }
}

TEST_CASE("flops_per_token counts every matrix product and attention") {
  // gpt2, C 32, 2 layers of 4 heads x 8, FFN 52, vocab 97, seq 24: per layer q/k/v/o 2*32*128, attention
  // 2*2*12.5*32, MLP 2*2*32*52; head 2*32*97.
  const auto cfg = model::model_config::uniform(model::family::gpt2, 97, 24, 32, 2, 4, 4, 52);
  const double per_layer = 2.0 * 32 * 128 + 2 * 2 * 12.5 * 32 + 2 * 2 * 32 * 52;
  CHECK(prune::flops_per_token(cfg, 24) == doctest::Approx(2 * per_layer + 2 * 32 * 97).epsilon(1e-15));
}

TEST_CASE("surgery under GQA: the cut model's logits equal the masked teacher's, and it reloads") {
  backend::cpu be;
  for (dtype t : {dtype::f64, dtype::f32}) {
    CAPTURE(dtype_name(t));
    const auto cfg = llama_gqa();
    auto teacher = make_model(be, cfg, t, 11);
    const auto plan = gqa_plan();
    auto pruned = prune::apply_plan(*teacher, plan);
    const auto& pc = pruned->config();
    REQUIRE(pc.n_layers() == 2);
    CHECK(pc.layers[0].n_heads == 4);
    CHECK(pc.layers[0].n_kv_heads == 2);
    CHECK(pc.layers[1].n_heads == 4);
    CHECK(pc.layers[1].n_kv_heads == 1);
    CHECK(pc.layers[1].ffn == 8);
    CHECK(pruned->num_parameters() == prune::model_parameters(pc));
    CHECK(pruned->num_parameters() < teacher->num_parameters());
    CHECK(prune::flops_per_token(pc, 16) < prune::flops_per_token(cfg, 16));

    const auto tok = tokens_for(cfg, 2 * 16);
    auto masked = make_model(be, cfg, t, 11);
    prune::mask_plan(*masked, plan);
    const auto want = logits_of(*masked, tok, 2, 16);
    const auto got = logits_of(*pruned, tok, 2, 16);
    const double err = rel_diff(got, want);
    MESSAGE("pruned vs masked logits, ", dtype_name(t), ": ", err);
    CHECK(err < (t == dtype::f64 ? 1e-13 : 1e-6));
    // The masking changed the model: the check above is not trivially true.
    CHECK(rel_diff(logits_of(*teacher, tok, 2, 16), want) > 1e-2);

    const auto dir = (std::filesystem::temp_directory_path() / "lwcl_test_surgery_gqa").string();
    checkpoint::save_hf(*pruned, dir);
    const auto cfg2 = checkpoint::read_hf_config(dir);
    net_t reloaded(be, cfg2, t);
    checkpoint::load_hf_weights(reloaded, dir);
    CHECK(logits_of(reloaded, tok, 2, 16) == got);
    std::filesystem::remove_all(dir);
  }
}

TEST_CASE("GQA 8 heads / 2 KV heads pruned to 50% by a criterion: valid, reloads, equals the masked teacher") {
  backend::cpu be;
  for (auto fam : {model::family::llama, model::family::qwen2}) {
    for (auto mode : {prune::head_mode::kv_groups, prune::head_mode::query_heads}) {
      CAPTURE(model::family_name(fam));
      CAPTURE(static_cast<int>(mode));
      auto cfg = model::model_config::uniform(fam, 50, 32, 32, 2, 8, 2, 40);
      cfg.tie_embeddings = fam == model::family::qwen2;
      auto teacher = make_model(be, cfg, dtype::f64, 21);
      const auto scores = policies::score_groups(policies::pruning::magnitude_l2{}, prune::make_scoring_input(*teacher));
      prune::allocation a;
      a.ratio = 0.5;
      a.heads = mode;
      const auto plan = prune::allocate(cfg, scores, a);
      auto pruned = prune::apply_plan(*teacher, plan);
      for (const auto& L : pruned->config().layers) {
        CHECK(L.n_heads == 4);
        CHECK(L.n_kv_heads == (mode == prune::head_mode::kv_groups ? 1 : 2));
        CHECK(L.ffn == 20);
      }
      const auto dir = (std::filesystem::temp_directory_path() / "lwcl_test_surgery_gqa50").string();
      checkpoint::save_hf(*pruned, dir);
      net_t reloaded(be, checkpoint::read_hf_config(dir), dtype::f64);
      checkpoint::load_hf_weights(reloaded, dir);
      std::filesystem::remove_all(dir);
      const auto tok = tokens_for(cfg, 32);
      prune::mask_plan(*teacher, plan);
      const double err = rel_diff(logits_of(reloaded, tok, 1, 32), logits_of(*teacher, tok, 1, 32));
      CHECK(err < 1e-13);
    }
  }
}

TEST_CASE("surgery on gpt2 (biases everywhere): cut model equals the masked teacher") {
  backend::cpu be;
  const auto cfg = model::model_config::uniform(model::family::gpt2, 61, 20, 24, 2, 4, 4, 30);
  auto teacher = make_model(be, cfg, dtype::f64, 5);
  prune::prune_plan plan = prune::keep_all(cfg);
  plan.layers[0].heads = {1, 3};
  plan.layers[0].kv_heads = {1, 3};
  plan.layers[1].ffn = {0, 1, 2, 7, 8, 29};
  auto pruned = prune::apply_plan(*teacher, plan);
  prune::mask_plan(*teacher, plan);
  const auto tok = tokens_for(cfg, 20);
  const double err = rel_diff(logits_of(*pruned, tok, 1, 20), logits_of(*teacher, tok, 1, 20));
  MESSAGE("gpt2 pruned vs masked logits (f64): ", err);
  CHECK(err < 1e-13);
}

TEST_CASE("bias compensation (FLAP) lowers the output error of the same pruning") {
  backend::cpu be;
  for (auto fam : {model::family::llama, model::family::gpt2}) {
    CAPTURE(model::family_name(fam));
    auto cfg = fam == model::family::llama ? llama_gqa() : model::model_config::uniform(fam, 50, 32, 32, 3, 8, 8, 40);
    auto teacher = make_model(be, cfg, dtype::f64, 3);
    const index_t B = 4, T = 32;
    const auto tok = tokens_for(cfg, B * T);
    // Calibration means of layer 0's o and down/proj inputs, from layer 0 run on the embeddings.
    const auto sh = model::shape_of_layer(cfg, 0);
    const auto w = model::bind_block(teacher->layout(), model::layer_prefix(0), teacher->params().data, dtype::f64);
    model::block_acts<backend::cpu> acts(be, sh, B, T, dtype::f64);
    std::vector<double> x(static_cast<std::size_t>(B * T * cfg.d_model)), y(x.size());
    const tensor xt(x.data(), {B, T, cfg.d_model}), yt(y.data(), {B, T, cfg.d_model});
    ops::embedding_forward(be, xt, tensor(tok.data(), {B, T}), teacher->param("wte"),
                           cfg.traits().rope ? tensor() : teacher->param("wpe"));
    model::block_forward(be, sh, w, acts, xt, yt);
    auto channel_mean = [&](const tensor& a, index_t ch) {
      std::vector<double> m(static_cast<std::size_t>(ch), 0.0);
      const double* p = static_cast<const double*>(a.data);
      for (index_t n = 0; n < B * T; ++n)
        for (index_t c = 0; c < ch; ++c) m[static_cast<std::size_t>(c)] += p[n * ch + c] / static_cast<double>(B * T);
      return m;
    };
    prune::bias_compensation comp;
    comp.attn_mean.assign(3, std::vector<double>(static_cast<std::size_t>(8 * cfg.head_dim), 0.0));
    comp.mlp_mean.assign(3, std::vector<double>(40, 0.0));
    comp.attn_mean[0] = channel_mean(acts.att, 8 * cfg.head_dim);
    comp.mlp_mean[0] = channel_mean(cfg.traits().gated_mlp ? acts.s : acts.g, 40);

    prune::prune_plan plan = prune::keep_all(cfg);
    plan.layers[0].ffn = {0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30, 32, 34, 36, 38};
    if (fam == model::family::llama) {
      plan.layers[0].heads = {0, 1, 4, 5};
    } else {
      plan.layers[0].heads = {0, 1, 4, 5};
      plan.layers[0].kv_heads = {0, 1, 4, 5};
    }
    auto plain = prune::apply_plan(*teacher, plan);
    auto compensated = prune::apply_plan(*teacher, plan, &comp);
    CHECK(compensated->config().output_bias);
    // FLAP's claim is about the pruned layer's output on calibration data: run layer 0 of each model
    // on the same input and compare with the teacher's layer-0 output y.
    auto layer0_error = [&](const net_t& m) {
      const auto s0 = model::shape_of_layer(m.config(), 0);
      const auto w0 = model::bind_block(m.layout(), model::layer_prefix(0), m.params().data, dtype::f64);
      model::block_acts<backend::cpu> a0(be, s0, B, T, dtype::f64);
      std::vector<double> out(y.size());
      model::block_forward(be, s0, w0, a0, xt, tensor(out.data(), {B, T, cfg.d_model}));
      return rel_diff(out, y);
    };
    const double e_plain = layer0_error(*plain), e_comp = layer0_error(*compensated);
    MESSAGE(model::family_name(fam), ": layer-0 output error without compensation ", e_plain, ", with ", e_comp);
    CHECK(e_plain > 1e-2);
    CHECK(e_comp < e_plain);
    const auto want = logits_of(*teacher, tok, B, T);
    // Nothing removed: compensation adds exactly zero.
    auto same = prune::apply_plan(*teacher, prune::keep_all(cfg), &comp);
    CHECK(rel_diff(logits_of(*same, tok, B, T), want) < 1e-14);
  }
}

TEST_CASE("bad prune plans raise lwcl::error naming the problem") {
  const auto cfg = llama_gqa();
  auto plan = gqa_plan();
  SUBCASE("a query head kept without its KV head") {
    plan.layers[1].heads = {0, 1, 2, 3};
    CHECK_THROWS_WITH_AS(prune::validate_plan(cfg, plan), doctest::Contains("keeps query head 0 but not its KV head 0"),
                         lwcl::error);
  }
  SUBCASE("KV groups keeping different numbers of query heads") {
    plan.layers[0].heads = {0, 1, 2, 5};
    CHECK_THROWS_WITH_AS(prune::validate_plan(cfg, plan), doctest::Contains("every kept KV group must keep the same number"),
                         lwcl::error);
  }
  SUBCASE("a kept layer without FFN channels") {
    plan.layers[0].ffn.clear();
    CHECK_THROWS_WITH_AS(prune::validate_plan(cfg, plan), doctest::Contains("layer 0 keeps no FFN channels"), lwcl::error);
  }
  SUBCASE("indices out of range or unsorted") {
    plan.layers[0].ffn.back() = 40;
    CHECK_THROWS_WITH_AS(prune::validate_plan(cfg, plan), doctest::Contains("keeps FFN channels 40, outside [0, 40)"),
                         lwcl::error);
    plan = gqa_plan();
    plan.layers[0].heads = {2, 0, 5, 7};
    CHECK_THROWS_WITH_AS(prune::validate_plan(cfg, plan), doctest::Contains("are not ascending and unique"), lwcl::error);
  }
  SUBCASE("every layer removed, or a plan for another model") {
    for (auto& l : plan.layers) l.removed = true;
    CHECK_THROWS_WITH_AS(prune::validate_plan(cfg, plan), doctest::Contains("removes every layer"), lwcl::error);
    plan.layers.pop_back();
    CHECK_THROWS_WITH_AS(prune::validate_plan(cfg, plan), doctest::Contains("has 2 layers, the model 3"), lwcl::error);
  }
}

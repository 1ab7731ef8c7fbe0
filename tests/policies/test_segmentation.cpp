// Segmentation policies: each one's segments on hand-worked cases, the tiling check, memory_budget's
// byte counts against the bytes block_acts and block_stack really allocate, and balanced_difficulty's
// optimality against brute force over every segmentation of small models.
#include <doctest/doctest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>
#include <vector>

#include "lwcl/backend/host/host.hpp"
#include "lwcl/distill/segment_trainer.hpp"
#include "lwcl/model/block_stack.hpp"
#include "lwcl/policies/segmentation/balanced_difficulty.hpp"
#include "lwcl/policies/segmentation/explicit_boundaries.hpp"
#include "lwcl/policies/segmentation/growing.hpp"
#include "lwcl/policies/segmentation/memory_budget.hpp"
#include "lwcl/policies/segmentation/uniform.hpp"
#include "lwcl/prune/plan.hpp"
#include "support/check.hpp"

using namespace lwcl;
using policies::segment;
namespace seg = lwcl::policies::segmentation;

// What a segmentation policy may ask of the run is a named capability: the shipped policies have it, and
// a member with a slipped type (or none) does not pass for it, so the pipeline never half-fills one.
static_assert(policies::needs_layer_difficulty<seg::balanced_difficulty> && policies::needs_batch_shape<seg::memory_budget>);
static_assert(!policies::needs_layer_difficulty<seg::uniform<2>> && !policies::needs_batch_shape<seg::uniform<2>>);
namespace slipped {
struct float_difficulty {
  std::vector<float> layer_difficulty;
};
struct int_batch {
  int batch = 0;
  index_t seq = 0;
  dtype type = dtype::f32;
  index_t input_tensors = 2;
};
}  // namespace slipped
static_assert(!policies::needs_layer_difficulty<slipped::float_difficulty>);
static_assert(!policies::needs_batch_shape<slipped::int_batch>);

namespace {

using segments = std::vector<segment>;

model::model_config layers(index_t n) {
  return model::model_config::uniform(model::family::gpt2, 64, 32, 16, n, 2, 2, 32);
}

std::vector<index_t> sizes_of(const segments& s) {
  std::vector<index_t> out;
  for (const auto& x : s) out.push_back(x.size());
  return out;
}

}  // namespace

TEST_CASE("check_tiling accepts exact tilings and names what is wrong otherwise") {
  CHECK_NOTHROW(policies::check_tiling({{0, 2}, {2, 5}}, 5, "t"));
  CHECK_THROWS_WITH_AS(policies::check_tiling({}, 5, "t"), doctest::Contains("no segments"), error);
  CHECK_THROWS_WITH_AS(policies::check_tiling({{0, 2}, {3, 5}}, 5, "t"), doctest::Contains("start at layer 2"), error);
  CHECK_THROWS_WITH_AS(policies::check_tiling({{0, 3}, {2, 5}}, 5, "t"), doctest::Contains("start at layer 3"), error);
  CHECK_THROWS_WITH_AS(policies::check_tiling({{0, 0}, {0, 5}}, 5, "t"), doctest::Contains("at least one layer"),
                       error);
  CHECK_THROWS_WITH_AS(policies::check_tiling({{0, 4}}, 5, "t"), doctest::Contains("cover all 5 layers"), error);
  CHECK_THROWS_WITH_AS(policies::check_tiling({{0, 1}}, 0, "t"), doctest::Contains("no layers"), error);
}

TEST_CASE("uniform<N> cuts N layers at a time, the last segment shorter") {
  CHECK(seg::uniform<3>{}.segments(layers(7)) == segments{{0, 3}, {3, 6}, {6, 7}});
  CHECK(seg::uniform<2>{}.segments(layers(4)) == segments{{0, 2}, {2, 4}});
  CHECK(seg::uniform<1>{}.segments(layers(3)) == segments{{0, 1}, {1, 2}, {2, 3}});
  CHECK(seg::uniform<8>{}.segments(layers(5)) == segments{{0, 5}});
  CHECK(seg::uniform<2>::name == "uniform<2>");
  CHECK_THROWS_AS(seg::uniform<2>{}.segments(layers(0)), error);
  // The checked call gives the same segments.
  CHECK(policies::segment_model(seg::uniform<3>{}, layers(7)) == seg::uniform<3>{}.segments(layers(7)));
  CHECK(policies::segmentation_stages(seg::uniform<3>{}, layers(7)) ==
        policies::segment_stages{{{0, 3}, {3, 6}, {6, 7}}});
}

TEST_CASE("sized cuts as uniform<N> does, N a runtime number, and refuses a size below one layer") {
  for (const index_t L : {1, 4, 5, 7, 16}) {
    CAPTURE(L);
    CHECK(seg::sized{.layers = 1}.segments(layers(L)) == seg::uniform<1>{}.segments(layers(L)));
    CHECK(seg::sized{.layers = 2}.segments(layers(L)) == seg::uniform<2>{}.segments(layers(L)));
    CHECK(seg::sized{.layers = 3}.segments(layers(L)) == seg::uniform<3>{}.segments(layers(L)));
    CHECK(seg::sized{.layers = 4}.segments(layers(L)) == seg::uniform<4>{}.segments(layers(L)));
  }
  CHECK(seg::sized{.layers = 3}.segments(layers(7)) == segments{{0, 3}, {3, 6}, {6, 7}});
  CHECK_THROWS_WITH_AS(seg::sized{.layers = 0}.segments(layers(4)),
                       doctest::Contains("segment size is 0, expected at least 1 layer"), error);
}

TEST_CASE("explicit_boundaries cuts at the listed first layers") {
  CHECK(seg::explicit_boundaries{{2, 5}}.segments(layers(8)) == segments{{0, 2}, {2, 5}, {5, 8}});
  CHECK(seg::explicit_boundaries{{}}.segments(layers(3)) == segments{{0, 3}});
  CHECK(seg::explicit_boundaries{{1, 2, 3}}.segments(layers(4)) == segments{{0, 1}, {1, 2}, {2, 3}, {3, 4}});
  for (const auto& bad : std::vector<std::vector<index_t>>{{0}, {3, 3}, {5, 2}, {8}, {-1}}) {
    CAPTURE(bad.size());
    CHECK_THROWS_WITH_AS(seg::explicit_boundaries{bad}.segments(layers(8)), doctest::Contains("expected a layer in"),
                         error);
  }
}

TEST_CASE("growing doubles the segment size each stage and ends with the whole model") {
  const auto st = seg::growing{}.stages(layers(6));
  REQUIRE(st.size() == 4);
  CHECK(sizes_of(st[0]) == std::vector<index_t>{1, 1, 1, 1, 1, 1});
  CHECK(st[1] == segments{{0, 2}, {2, 4}, {4, 6}});
  CHECK(st[2] == segments{{0, 4}, {4, 6}});
  CHECK(st[3] == segments{{0, 6}});
  CHECK(seg::growing{}.segments(layers(6)) == st[0]);
  // 3, 6, then the whole 8 layers; factor 3 from 1 on 9 layers: 1, 3, 9.
  CHECK(seg::growing{.first_size = 3}.stages(layers(8)) ==
        policies::segment_stages{{{0, 3}, {3, 6}, {6, 8}}, {{0, 6}, {6, 8}}, {{0, 8}}});
  CHECK(sizes_of(seg::growing{.first_size = 1, .factor = 3}.stages(layers(9))[1]) == std::vector<index_t>{3, 3, 3});
  CHECK(seg::growing{.first_size = 1, .factor = 3}.stages(layers(9)).size() == 3);
  CHECK(seg::growing{}.stages(layers(1)) == policies::segment_stages{{{0, 1}}});
  CHECK(seg::growing{.first_size = 20}.stages(layers(5)) == policies::segment_stages{{{0, 5}}});
  CHECK(policies::segmentation_stages(seg::growing{}, layers(6)) == st);
  CHECK_THROWS_WITH_AS((seg::growing{.first_size = 1, .factor = 1}.stages(layers(4))), doctest::Contains("factor"),
                       error);
  CHECK_THROWS_WITH_AS(seg::growing{.first_size = 0}.stages(layers(4)), doctest::Contains("first_size"), error);
}

// ---- balanced_difficulty ---------------------------------------------------------------------------

namespace {

double largest_sum(const segments& s, const std::vector<double>& d) {
  double worst = 0;
  for (const auto& x : s) {
    double sum = 0;
    for (index_t l = x.first; l < x.last; ++l) sum += d[static_cast<std::size_t>(l)];
    worst = std::max(worst, sum);
  }
  return worst;
}

// The best largest segment sum over every way to cut L layers into K non-empty segments.
double brute_force(const std::vector<double>& d, index_t K) {
  const auto L = static_cast<index_t>(d.size());
  double best = std::numeric_limits<double>::infinity();
  for (unsigned mask = 0; mask < (1u << (L - 1)); ++mask) {  // bit i: a cut before layer i + 1
    if (std::popcount(mask) != K - 1) continue;
    segments s;
    index_t first = 0;
    for (index_t i = 0; i + 1 < L; ++i)
      if (mask & (1u << i)) {
        s.push_back({first, i + 1});
        first = i + 1;
      }
    s.push_back({first, L});
    best = std::min(best, largest_sum(s, d));
  }
  return best;
}

}  // namespace

TEST_CASE("balanced_difficulty finds the unique best split of a hand-worked case") {
  const std::vector<double> d{4, 1, 1, 4, 1, 1};
  // K = 2: 6 | 6 is the only split with largest sum 6. K = 3: 5 | 5 | 2 is the only one with 5.
  CHECK(seg::balanced_difficulty{2, d}.segments(layers(6)) == segments{{0, 3}, {3, 6}});
  CHECK(seg::balanced_difficulty{3, d}.segments(layers(6)) == segments{{0, 2}, {2, 4}, {4, 6}});
  CHECK(seg::balanced_difficulty{1, d}.segments(layers(6)) == segments{{0, 6}});
  CHECK(seg::balanced_difficulty{6, d}.segments(layers(6)) == segments{{0, 1}, {1, 2}, {2, 3}, {3, 4}, {4, 5}, {5, 6}});
  // A hard layer at the front gets a segment to itself.
  CHECK(seg::balanced_difficulty{2, {10, 1, 1, 1}}.segments(layers(4)) == segments{{0, 1}, {1, 4}});
}

TEST_CASE("balanced_difficulty's largest segment sum equals brute force on every small case") {
  philox_stream rng{2024, 1};
  std::uint64_t draw = 0;
  for (index_t L = 1; L <= 9; ++L)
    for (index_t K = 1; K <= L; ++K)
      for (int trial = 0; trial < 4; ++trial) {
        std::vector<double> d(static_cast<std::size_t>(L));
        // Trial 0 uses small integers, so ties between splits are common; the others are continuous.
        for (auto& x : d) x = trial == 0 ? std::floor(4 * rng.uniform(draw++)) : 10 * rng.uniform(draw++);
        const auto s = seg::balanced_difficulty{K, d}.segments(layers(L));
        CAPTURE(L);
        CAPTURE(K);
        CAPTURE(trial);
        CHECK(static_cast<index_t>(s.size()) == K);
        CHECK(largest_sum(s, d) == doctest::Approx(brute_force(d, K)).epsilon(1e-12));
      }
}

TEST_CASE("balanced_difficulty refuses difficulties and counts that do not fit") {
  const std::vector<double> d{1, 2, 3};
  CHECK_THROWS_WITH_AS((seg::balanced_difficulty{2, {1, 2}}.segments(layers(3))),
                       doctest::Contains("one per layer (3)"), error);
  CHECK_THROWS_WITH_AS((seg::balanced_difficulty{0, d}.segments(layers(3))), doctest::Contains("n_segments is 0"),
                       error);
  CHECK_THROWS_WITH_AS((seg::balanced_difficulty{4, d}.segments(layers(3))), doctest::Contains("[1, 3]"), error);
  CHECK_THROWS_WITH_AS((seg::balanced_difficulty{2, {1, -1, 1}}.segments(layers(3))), doctest::Contains("layer 1"),
                       error);
  CHECK_THROWS_WITH_AS((seg::balanced_difficulty{2, {1, NAN, 1}}.segments(layers(3))), doctest::Contains("finite"),
                       error);
}

// ---- memory_budget -----------------------------------------------------------------------------------

TEST_CASE("block_activation_bytes: a hand-counted gpt2 block") {
  // C = 8, H = 2, D = 4, F = 16, B = 1, T = 4 (N = 4 tokens). Tensors (elements, padded to 16):
  // h1, q, k, v, att, x2, h2: 32 each; probs: B H T T = 32; f, g: 64 each; four norm statistics of 4
  // elements, padded to 16 each. 8 * 32 + 2 * 64 + 4 * 16 = 448 elements = 1792 bytes in f32.
  model::block_shape sh{model::traits_of(model::family::gpt2), 8, 2, 2, 4, 16};
  CHECK(seg::block_activation_elements(sh, 1, 4) == 448);
  CHECK(seg::block_activation_bytes(sh, 1, 4, dtype::f32) == 1792);
  backend::cpu be;
  CHECK(model::block_acts<backend::cpu>(be, sh, 1, 4, dtype::f32).bytes() == 1792);
}

TEST_CASE("block_activation_bytes equals block_acts' allocation for every family, shape and dtype") {
  backend::cpu be;
  for (auto fam : {model::family::gpt2, model::family::bert, model::family::llama, model::family::qwen2})
    for (bool grads : {false, true})
      for (dtype t : {dtype::f32, dtype::f64})
        for (index_t B : {1, 3})
          for (index_t T : {1, 5, 7}) {
            // Odd widths, so that the 16-element padding of each tensor shows.
            model::block_shape sh{model::traits_of(fam), 12, 6, fam == model::family::llama ? 2 : 6, 2, 10};
            CAPTURE(model::family_name(fam));
            CAPTURE(grads);
            CAPTURE(B);
            CAPTURE(T);
            CHECK(seg::block_activation_bytes(sh, B, T, t, grads) ==
                  model::block_acts<backend::cpu>(be, sh, B, T, t, grads).bytes());
          }
}

TEST_CASE("stack_activation_bytes equals block_stack's allocation, gradient scratch shared by equal widths") {
  backend::cpu be;
  for (auto fam : {model::family::gpt2, model::family::bert, model::family::llama}) {
    auto cfg = model::model_config::uniform(fam, 50, 16, 12, 5, 6, fam == model::family::llama ? 2 : 6, 20);
    cfg.layers[1].ffn = 9;  // layers 0, 2, 4 share a scratch; 1 and 3 each need their own
    cfg.layers[3].n_heads = fam == model::family::llama ? 2 : 3;
    cfg.layers[3].n_kv_heads = fam == model::family::llama ? 1 : 3;
    tensor_layout layout;
    model::add_stack_params(layout, cfg, 0, cfg.n_layers());
    std::vector<float> params(static_cast<std::size_t>(layout.numel())), grads(params.size());
    for (segment s : {segment{0, 5}, segment{1, 4}, segment{2, 3}, segment{0, 1}}) {
      const index_t B = 2, T = 3;
      model::block_stack<backend::cpu> stack(be, cfg, s.first, s.last, layout, params.data(), grads.data(), dtype::f32);
      std::vector<float> x(static_cast<std::size_t>(B * T * cfg.d_model), 0.5f), y(x.size());
      stack.forward(tensor(x.data(), shape{B, T, cfg.d_model}), tensor(y.data(), shape{B, T, cfg.d_model}));
      CAPTURE(model::family_name(fam));
      CAPTURE(s.first);
      CAPTURE(s.last);
      CHECK(seg::stack_activation_bytes(cfg, s, B, T, dtype::f32) == stack.activation_bytes());
    }
  }
}

TEST_CASE("memory_budget counts parameters, gradients, AdamW moments, activations, loss buffers and inputs") {
  auto cfg = model::model_config::uniform(model::family::llama, 50, 16, 12, 3, 6, 2, 20);
  cfg.layers[1].ffn = 7;
  const seg::memory_budget mb{.budget_bytes = 1, .batch = 2, .seq = 3};
  const auto m = mb.memory_of(cfg, {0, 2});
  // Parameters: prune::layer_parameters' count, stored with each tensor padded to 16 elements.
  tensor_layout layout;
  model::add_stack_params(layout, cfg, 0, 2);
  index_t exact = 0;
  for (const auto& e : layout.entries()) exact += e.shape.numel();
  CHECK(exact == prune::layer_parameters(cfg, cfg.layers[0]) + prune::layer_parameters(cfg, cfg.layers[1]));
  CHECK(m.parameters == static_cast<std::size_t>(layout.numel()) * 4);
  CHECK(m.gradients == m.parameters);
  CHECK(m.optimizer == 2 * m.parameters);
  CHECK(m.activations == seg::stack_activation_bytes(cfg, {0, 2}, 2, 3, dtype::f32));
  CHECK(m.work == (2 * 72 + 2 * 6) * 4);  // output and its gradient (2, 3, 12), loss scratch 2 * 6 rows
  CHECK(m.inputs == 2 * 72 * 4);          // input and target features
  CHECK(m.total() == m.parameters * 4 + m.activations + m.work + m.inputs);
  const seg::memory_budget bf16{.budget_bytes = 1, .batch = 2, .seq = 3, .type = dtype::bf16, .input_tensors = 0};
  CHECK(bf16.memory_of(cfg, {0, 2}).parameters * 2 == m.parameters);
  CHECK(bf16.memory_of(cfg, {0, 2}).inputs == 0);
}

TEST_CASE("memory_budget equals the bytes distill::segment_trainer holds for the same segment") {
  backend::cpu be;
  for (auto fam : {model::family::gpt2, model::family::bert, model::family::qwen2}) {
    auto cfg = model::model_config::uniform(fam, 50, 16, 12, 4, 6, fam == model::family::qwen2 ? 3 : 6, 20);
    cfg.layers[2].ffn = 11;
    tensor_layout layout;
    model::add_stack_params(layout, cfg, 0, cfg.n_layers());
    const std::vector<double> params(static_cast<std::size_t>(layout.numel()), 0.01);
    for (segment s : {segment{0, 4}, segment{1, 3}, segment{3, 4}}) {
      const index_t B = 2, T = 5;
      distill::segment_trainer<backend::cpu> trainer(be, cfg, s.first, s.last, layout, params, dtype::f32,
                                                     optim::adamw_config{});
      std::vector<float> x(static_cast<std::size_t>(B * T * cfg.d_model), 0.5f), target(x.size(), 0.25f);
      trainer.loss(tensor(x.data(), shape{B, T, cfg.d_model}), tensor(target.data(), shape{B, T, cfg.d_model}));
      const auto m = seg::memory_budget{.budget_bytes = 1, .batch = B, .seq = T}.memory_of(cfg, s);
      CAPTURE(model::family_name(fam));
      CAPTURE(s.first);
      CAPTURE(s.last);
      CHECK(m.total() - m.inputs == trainer.resident_bytes());
    }
  }
}

TEST_CASE("memory_budget takes the largest segments that fit, front to back") {
  const auto cfg = layers(5);
  seg::memory_budget mb{.budget_bytes = 0, .batch = 2, .seq = 8};
  const std::size_t two = mb.memory_of(cfg, {0, 2}).total(), three = mb.memory_of(cfg, {0, 3}).total();
  REQUIRE(two < three);
  mb.budget_bytes = two;  // exactly two layers fit
  CHECK(mb.segments(cfg) == segments{{0, 2}, {2, 4}, {4, 5}});
  mb.budget_bytes = two - 1;
  CHECK(mb.segments(cfg) == segments{{0, 1}, {1, 2}, {2, 3}, {3, 4}, {4, 5}});
  mb.budget_bytes = three;
  CHECK(mb.segments(cfg) == segments{{0, 3}, {3, 5}});
  mb.budget_bytes = std::size_t{1} << 40;
  CHECK(mb.segments(cfg) == segments{{0, 5}});

  // A wide layer in the middle ends the segment before it and gets its own.
  auto wide = cfg;
  wide.layers[2].ffn = 1000;
  mb.budget_bytes = std::max(two, mb.memory_of(wide, {2, 3}).total());
  REQUIRE(mb.memory_of(wide, {1, 3}).total() > mb.budget_bytes);
  REQUIRE(mb.memory_of(wide, {2, 4}).total() > mb.budget_bytes);
  CHECK(mb.segments(wide) == segments{{0, 2}, {2, 3}, {3, 5}});
}

TEST_CASE("memory_budget refuses a budget that one layer alone exceeds, and bad settings") {
  const auto cfg = layers(3);
  seg::memory_budget mb{.budget_bytes = 0, .batch = 2, .seq = 8};
  mb.budget_bytes = mb.memory_of(cfg, {0, 1}).total() - 1;
  CHECK_THROWS_WITH_AS(mb.segments(cfg), doctest::Contains("layer 0 alone needs"), error);
  CHECK_THROWS_WITH_AS((seg::memory_budget{.budget_bytes = 0, .batch = 2, .seq = 8}.segments(cfg)),
                       doctest::Contains("budget_bytes is 0"), error);
  CHECK_THROWS_WITH_AS((seg::memory_budget{.budget_bytes = 1, .batch = 0, .seq = 8}.segments(cfg)),
                       doctest::Contains("expected both positive"), error);
  CHECK_THROWS_WITH_AS((seg::memory_budget{.budget_bytes = 1, .batch = 1, .seq = 1, .type = dtype::i32}.segments(cfg)),
                       doctest::Contains("floating-point"), error);
  CHECK_THROWS_WITH_AS(mb.memory_of(cfg, {2, 4}), doctest::Contains("not a non-empty range"), error);
}

// GeLaCo (gelaco/): decoding on hand-made genomes (flags, swapped ends, single-layer and overlapping
// proposals as no-ops, genome order, the canonical form and its key); the merge formula on hand-made
// vectors, alpha = 1 as LaCo's merge and alpha = 0 as dropping the layers; the merged model of gpt2,
// llama and qwen2 against transformers (tools/fixtures/gelaco_merge.py); the fitness terms on hand
// computed cases and against the collapsed model run whole; the search against exhaustive enumeration,
// threads and resumption.
#include <doctest/doctest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <map>
#include <limits>
#include <vector>

#include <nlohmann/json.hpp>

#include "lwcl/backend/host/host.hpp"
#include "lwcl/policies/fitness/gelaco.hpp"
#include "lwcl/search/gelaco/fitness.hpp"
#include "lwcl/search/gelaco/genome.hpp"
#include "lwcl/search/gelaco/merge.hpp"
#include "lwcl/search/gelaco/search.hpp"
#include "lwcl/model/checkpoint/hf.hpp"
#include "lwcl/model/layer_outputs.hpp"
#include "lwcl/prune/layer_collapse.hpp"
#include "lwcl/prune/surgery.hpp"
#include "support/fixture.hpp"

using namespace lwcl;

namespace {

// Four layers: triples, then the alphas 0.1, 0.2, 0.3, 0.4.
std::vector<double> genome4(std::vector<double> triples) {
  triples.insert(triples.end(), {0.1, 0.2, 0.3, 0.4});
  return triples;
}

}  // namespace

TEST_CASE("gelaco genome: proposals decode in genome order; overlaps and single layers are no-ops") {
  // Nothing flagged: the teacher's own layers.
  auto d = gelaco::decode(genome4({0.3, 0.7, 0.2, 0.6, 0.1, 0.4, 1.0, 0.0, 0.0, 0.5, 0.9, 0.3}), 4);
  CHECK(d.spans.empty());
  CHECK(d.boundaries == std::vector<index_t>{0, 1, 2, 3, 4});
  CHECK(d.removed_layers() == 0);
  CHECK(d.key() == "-");

  // (0.3, 0.7) -> layers 1..2; (0.6, 0.1) -> 2..0, swapped to 0..2, overlaps: no-op; (1.0, 0.75) -> 3..3:
  // no-op; the last is not flagged.
  d = gelaco::decode(genome4({0.3, 0.7, 0.9, 0.6, 0.1, 1.0, 1.0, 0.75, 0.5, 0.0, 0.2, 0.49}), 4);
  CHECK(d.spans == std::vector<gelaco::collapse_span>{{1, 2}});
  CHECK(d.boundaries == std::vector<index_t>{0, 1, 3, 4});
  CHECK(d.student_layers() == 3);
  CHECK(d.removed_layers() == 1);
  CHECK(d.key() == "1-2:0.3");

  // The same proposals in the other order: the wider one wins.
  d = gelaco::decode(genome4({0.6, 0.1, 1.0, 0.3, 0.7, 0.9, 1.0, 0.75, 0.5, 0.0, 0.2, 0.49}), 4);
  CHECK(d.spans == std::vector<gelaco::collapse_span>{{0, 2}});
  CHECK(d.boundaries == std::vector<index_t>{0, 3, 4});
  CHECK(d.key() == "0-2:0.2,0.3");

  // Spans come out sorted by their first layer; an alpha of a layer no span merges is not in the key.
  d = gelaco::decode(genome4({0.5, 0.99, 0.5, 0.0, 0.25, 0.5, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0}), 4);
  CHECK(d.spans == std::vector<gelaco::collapse_span>{{0, 1}, {2, 3}});
  CHECK(d.boundaries == std::vector<index_t>{0, 2, 4});
  CHECK(d.key() == "0-1:0.2;2-3:0.4");
  auto other = genome4({0.5, 0.99, 0.5, 0.0, 0.25, 0.5, 0.7, 0.1, 0.2, 0.3, 0.3, 0.3});
  other[12] = 0.9;  // layer 0's alpha: layer 0 is a span's first layer, never merged into another
  other[14] = 0.8;  // layer 2's alpha, likewise
  CHECK(gelaco::decode(other, 4).key() == d.key());

  // gene 1.0 names the last layer
  CHECK(gelaco::gene_layer(1.0, 4) == 3);
  CHECK(gelaco::gene_layer(0.0, 4) == 0);
  CHECK(gelaco::gene_layer(0.2499, 4) == 0);
  CHECK(gelaco::gene_layer(0.25, 4) == 1);
}

TEST_CASE("gelaco genome: bad genomes are errors naming the gene") {
  CHECK_THROWS_WITH_AS(gelaco::decode(std::vector<double>(15, 0.5), 4),
                       doctest::Contains("a genome of 15 genes for a teacher of 4 layers, expected 16"), lwcl::error);
  auto g = genome4({0.3, 0.7, 0.9, 0.6, 0.1, 1.0, 1.0, 0.75, 0.5, 0.0, 0.2, 0.49});
  g[4] = 1.5;
  CHECK_THROWS_WITH_AS(gelaco::decode(g, 4), doctest::Contains("gene 4 is 1.5, expected a value in [0, 1]"), lwcl::error);
  g[4] = std::numeric_limits<double>::quiet_NaN();
  CHECK_THROWS_WITH_AS(gelaco::decode(g, 4), doctest::Contains("gene 4 is nan"), lwcl::error);
  // from_spans: the same student as decode, and bad spans named.
  const auto d = gelaco::decode(genome4({0.3, 0.7, 0.9, 0.6, 0.1, 1.0, 1.0, 0.75, 0.5, 0.0, 0.2, 0.49}), 4);
  const auto e = gelaco::from_spans({{1, 2}}, {0.1, 0.2, 0.3, 0.4}, 4);
  CHECK(e.key() == d.key());
  CHECK(e.boundaries == d.boundaries);
  CHECK_THROWS_WITH_AS(gelaco::from_spans({{2, 3}, {0, 2}}, std::vector<double>(4, 0.5), 4),
                       doctest::Contains("spans [0, 2] and [2, 3] overlap"), lwcl::error);
  CHECK_THROWS_WITH_AS(gelaco::from_spans({{1, 1}}, std::vector<double>(4, 0.5), 4),
                       doctest::Contains("span [1, 1] is not two or more"), lwcl::error);
  CHECK_THROWS_WITH_AS(gelaco::from_spans({{0, 1}}, {0.5, 2.0, 0.5, 0.5}, 4),
                       doctest::Contains("the merge weight of layer 1 is 2"), lwcl::error);
}

TEST_CASE("gelaco merge: theta_b + sum alpha_k (theta_k - theta_b); alpha 1 is LaCo's, alpha 0 drops") {
  const std::vector<std::vector<double>> layers = {{1, 2}, {3, 5}, {4, -1}, {0, 0}};
  const std::vector<double> ones(4, 1.0), zeros(4, 0.0), mixed = {0.9, 0.9, 0.5, 0.25};
  CHECK(gelaco::merge_span(layers, {1, 2}, ones) == prune::merge_layers(layers, 1, 1));
  CHECK(gelaco::merge_span(layers, {1, 3}, ones) == prune::merge_layers(layers, 1, 2));
  CHECK(gelaco::merge_span(layers, {1, 3}, zeros) == layers[1]);
  // (3, 5) + 0.5 ((4, -1) - (3, 5)) + 0.25 ((0, 0) - (3, 5)) = (3 + 0.5 - 0.75, 5 - 3 - 1.25)
  CHECK(gelaco::merge_span(layers, {1, 3}, mixed) == std::vector<double>{2.75, 0.75});
  CHECK_THROWS_WITH_AS(gelaco::merge_span(layers, {2, 4}, ones), doctest::Contains("span [2, 4] is not inside 4 layers"),
                       lwcl::error);
  const std::vector<std::vector<double>> ragged = {{1, 2}, {3}};
  CHECK_THROWS_WITH_AS(gelaco::merge_span(ragged, {0, 1}, std::vector<double>{1, 1}),
                       doctest::Contains("must share one shape"), lwcl::error);
}

TEST_CASE("gelaco collapse on a GQA llama: the student's layers are the merged teacher layers") {
  backend::cpu be;
  const auto cfg = model::model_config::uniform(model::family::llama, 40, 16, 16, 5, 4, 2, 24);
  model::transformer<backend::cpu> teacher(be, cfg, dtype::f64);
  teacher.init(11);
  const auto src = prune::detail::host_params(teacher);
  const auto layers = prune::collapse_detail::split(teacher.layout(), src, 5).layers;

  // Layers 1..3 into 1 with alpha (-, -, 0.5, 0.25, -): layer 4 stays.
  std::vector<double> genes(static_cast<std::size_t>(gelaco::gene_count(5)), 0.0);
  genes[0] = 0.2, genes[1] = 0.6, genes[2] = 1.0;  // layers 1..3
  genes[15 + 2] = 0.5, genes[15 + 3] = 0.25;
  const auto d = gelaco::decode(genes, 5);
  REQUIRE(d.boundaries == std::vector<index_t>{0, 1, 4, 5});
  auto student = gelaco::collapse(teacher, d);
  CHECK(student->config().n_layers() == 3);
  const auto sp = prune::collapse_detail::split(student->layout(), prune::detail::host_params(*student), 3).layers;
  CHECK(sp[0] == layers[0]);
  CHECK(sp[1] == gelaco::merge_span(layers, {1, 3}, d.alpha));
  CHECK(sp[2] == layers[4]);
  // Outside the layers (embeddings, final norm, head) the student is the teacher.
  CHECK(student->layout().numel() == teacher.layout().numel() - 2 * static_cast<index_t>(layers[0].size()));

  // Every alpha 1: LaCo's merge of the same span.
  std::fill(genes.begin() + 15, genes.end(), 1.0);
  auto laco = gelaco::collapse(teacher, gelaco::decode(genes, 5));
  CHECK(prune::collapse_detail::split(laco->layout(), prune::detail::host_params(*laco), 3).layers[1] ==
        prune::merge_layers(layers, 1, 2));
  // Every alpha 0: layers 2 and 3 dropped, so the student is the teacher without them, logit for logit.
  std::fill(genes.begin() + 15, genes.end(), 0.0);
  auto dropped = gelaco::collapse(teacher, gelaco::decode(genes, 5));
  auto cfg3 = cfg;
  cfg3.layers.resize(3);
  auto reference = prune::collapse_detail::assemble(be, cfg3, dtype::f64, teacher.layout(), src, {layers[0], layers[1], layers[4]});
  std::vector<std::int32_t> ids(32);
  for (std::size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<std::int32_t>((i * 7 + 3) % 40);
  CHECK(prune::collapse_detail::logits_host(*dropped, ids, 2, 16) == prune::collapse_detail::logits_host(*reference, ids, 2, 16));

  CHECK_THROWS_WITH_AS(gelaco::collapse(teacher, gelaco::decode(std::vector<double>(16, 0.0), 4)),
                       doctest::Contains("a genome for 4 layers, the teacher has 5"), lwcl::error);
}

TEST_CASE("gelaco merge: gpt2, llama and qwen2 students give transformers' logits (tools/fixtures/gelaco_merge.py)") {
  backend::cpu be;
  for (const std::string family : {"gpt2", "llama", "qwen2"}) {
    CAPTURE(family);
    const auto dir = test::data_path("gelaco/" + family);
    model::transformer<backend::cpu> teacher(be, checkpoint::read_hf_config(dir), dtype::f64);
    checkpoint::load_hf_weights(teacher, dir);
    test::fixture fx("gelaco/" + family + ".lwfx");
    const auto genes = fx.f64("genes");
    auto d = gelaco::decode(genes, teacher.config().n_layers());
    const auto spans = fx.ints("spans");
    REQUIRE(d.spans.size() * 2 == spans.size());
    for (std::size_t i = 0; i < d.spans.size(); ++i) {
      CHECK(d.spans[i].first == spans[2 * i]);
      CHECK(d.spans[i].last == spans[2 * i + 1]);
    }
    const auto ids64 = fx.ints("ids");
    const std::vector<std::int32_t> ids(ids64.begin(), ids64.end());
    const auto& dims = fx.dims("ids");
    const auto want = fx.f64("logits");
    auto student = gelaco::collapse(teacher, d);
    CHECK(student->config().n_layers() == d.student_layers());
    const auto got = prune::collapse_detail::logits_host(*student, ids, dims[0], dims[1]);
    REQUIRE(got.size() == want.size());
    double worst = 0, scale = 0;
    for (std::size_t i = 0; i < got.size(); ++i) {
      worst = std::max(worst, std::abs(got[i] - want[i]));
      scale = std::max(scale, std::abs(want[i]));
    }
    MESSAGE(family, ": largest logit difference to transformers ", worst, " (largest logit ", scale, ")");
    CHECK(worst <= 1e-5 * scale);
    // The comparison sees the alphas: another weight on one merged layer moves the logits far more.
    d.alpha[3] += 0.1;
    const auto moved = prune::collapse_detail::logits_host(*gelaco::collapse(teacher, d), ids, dims[0], dims[1]);
    double shift = 0;
    for (std::size_t i = 0; i < got.size(); ++i) shift = std::max(shift, std::abs(moved[i] - want[i]));
    CHECK(shift > 1000 * worst);
  }
}

TEST_CASE("gelaco fitness: cosines and KL divergences on hand-computed cases") {
  using namespace gelaco::fitness_detail;
  // Rows (1, 0) . (1, 0) = 1 and (1, 1) . (-1, -1) = -1; (3, 4) . (4, 3) = 24 / 25; a zero row counts 0.
  CHECK(mean_row_cosine({1, 0, 1, 1}, {1, 0, -1, -1}, 2) == doctest::Approx(0.0));
  CHECK(mean_row_cosine({3, 4}, {4, 3}, 2) == doctest::Approx(0.96));
  CHECK(mean_row_cosine({0, 0, 3, 4}, {1, 1, 4, 3}, 2) == doctest::Approx(0.48));
  // p = (1/2, 1/2), q = (1/4, 3/4): KL = 1/2 ln 2 + 1/2 ln(2/3).
  std::vector<double> lp = {std::log(0.5), std::log(0.5)}, lq = {std::log(1.0), std::log(3.0)};
  log_softmax_rows(lq, 2);
  CHECK(std::exp(lq[0]) == doctest::Approx(0.25));
  CHECK(kl_sum(lp, lq) == doctest::Approx(0.5 * std::log(2.0) + 0.5 * std::log(2.0 / 3.0)));
  // p = (0.5, 0.3, 0.2), q = (0.2, 0.2, 0.6), K = 2: the teacher's top two are tokens 0 and 1;
  // renormalised p = (0.625, 0.375), q = (0.5, 0.5).
  const std::vector<double> p3 = {std::log(0.5), std::log(0.3), std::log(0.2)}, q3 = {std::log(0.2), std::log(0.2), std::log(0.6)};
  const auto top = top_k_rows(p3, 3, 2);
  CHECK(top == std::vector<std::int32_t>{0, 1});
  CHECK(kl_top_k_sum(p3, q3, top, 3, 2) == doctest::Approx(0.625 * std::log(1.25) + 0.375 * std::log(0.75)));
  // K = V is the full KL.
  CHECK(kl_top_k_sum(p3, q3, top_k_rows(p3, 3, 3), 3, 3) == doctest::Approx(kl_sum(p3, q3)));
  // Ties go to the lower index.
  CHECK(top_k_rows({0.0, 1.0, 1.0, 0.5}, 4, 2) == std::vector<std::int32_t>{1, 2});
}

namespace {

std::unique_ptr<model::transformer<backend::cpu>> tiny_llama(backend::cpu& be, index_t layers, std::uint64_t seed) {
  const auto cfg = model::model_config::uniform(model::family::llama, 48, 16, 16, layers, 4, 2, 24);
  auto net = std::make_unique<model::transformer<backend::cpu>>(be, cfg, dtype::f64);
  net->init(seed);
  auto p = prune::detail::host_params(*net);
  for (auto& v : p) v *= 3.0;  // every layer changes the output
  prune::detail::set_host_params(*net, p);
  return net;
}

gelaco::calibration_set calibration(index_t vocab, index_t batches) {
  gelaco::calibration_set c;
  c.B = 2, c.T = 8;
  for (index_t i = 0; i < batches * c.B * c.T; ++i) c.ids.push_back(static_cast<std::int32_t>((i * 11 + 5) % vocab));
  return c;
}

// The genes of the genome collapsing exactly `spans` (first, last), merged layers weighted `alpha`.
std::vector<double> genes_of(index_t L, const std::vector<gelaco::collapse_span>& spans, double alpha) {
  std::vector<double> g(static_cast<std::size_t>(gelaco::gene_count(L)), 0.0);
  for (std::size_t i = 0; i < spans.size(); ++i) {
    g[3 * i] = (static_cast<double>(spans[i].first) + 0.5) / static_cast<double>(L);
    g[3 * i + 1] = (static_cast<double>(spans[i].last) + 0.5) / static_cast<double>(L);
    g[3 * i + 2] = 1.0;
  }
  std::fill(g.begin() + 3 * L, g.end(), alpha);
  return g;
}

std::vector<double> log_softmax(std::vector<double> x, index_t V) {
  for (std::size_t r = 0; r < x.size() / static_cast<std::size_t>(V); ++r) {
    double mx = -1e300, s = 0;
    for (index_t j = 0; j < V; ++j) mx = std::max(mx, x[r * static_cast<std::size_t>(V) + static_cast<std::size_t>(j)]);
    for (index_t j = 0; j < V; ++j) s += std::exp(x[r * static_cast<std::size_t>(V) + static_cast<std::size_t>(j)] - mx);
    for (index_t j = 0; j < V; ++j) x[r * static_cast<std::size_t>(V) + static_cast<std::size_t>(j)] -= mx + std::log(s);
  }
  return x;
}

}  // namespace

TEST_CASE("gelaco fitness: the evaluator's terms equal the collapsed model run whole") {
  backend::cpu be;
  auto teacher = tiny_llama(be, 5, 3);
  const auto cal = calibration(48, 2);
  gelaco::evaluator_options o;
  o.top_k = 48;  // the whole vocabulary: top-K KL is the full KL
  o.modules = true;
  gelaco::evaluator<backend::cpu> ev(*teacher, cal, o);
  const unsigned all = gelaco::need::residual | gelaco::need::modules | gelaco::need::kl | gelaco::need::kl_top_k;

  // Nothing collapsed: the teacher itself.
  auto m = ev.measure(gelaco::decode(genes_of(5, {}, 0.5), 5), all);
  CHECK(m.residual_similarity == 1.0);
  CHECK(m.kl == 0.0);

  const auto d = gelaco::decode(genes_of(5, {{1, 3}}, 0.4), 5);
  m = ev.measure(d, all);
  auto student = gelaco::collapse(*teacher, d);
  double res = 0, kl = 0;
  const index_t C = 16, V = 48, N = cal.B * cal.T;
  for (index_t b = 0; b < cal.batches(); ++b) {
    const std::vector<std::int32_t> ids(cal.ids.begin() + b * N, cal.ids.begin() + (b + 1) * N);
    std::vector<std::vector<double>> th, sh;
    model::for_each_layer_output(*teacher, ids, cal.B, cal.T, [&](index_t, const tensor& h) { th.push_back(ops::to_host_doubles(be, h, "t")); });
    model::for_each_layer_output(*student, ids, cal.B, cal.T, [&](index_t, const tensor& h) { sh.push_back(ops::to_host_doubles(be, h, "s")); });
    // Student boundary 2 is the merged layer on the teacher's h_1; the span's update ends at h_4.
    for (index_t r = 0; r < N; ++r) {
      double ab = 0, aa = 0, bb = 0;
      for (index_t c = 0; c < C; ++c) {
        const auto i = static_cast<std::size_t>(r * C + c);
        const double u = sh[2][i] - th[1][i], w = th[4][i] - th[1][i];
        ab += u * w, aa += u * u, bb += w * w;
      }
      res += ab / std::sqrt(aa * bb);
    }
    const auto lt = log_softmax(prune::collapse_detail::logits_host(*teacher, ids, cal.B, cal.T), V);
    const auto ls = log_softmax(prune::collapse_detail::logits_host(*student, ids, cal.B, cal.T), V);
    for (std::size_t i = 0; i < lt.size(); ++i) kl += std::exp(lt[i]) * (lt[i] - ls[i]);
  }
  res /= static_cast<double>(cal.batches() * N);
  kl /= static_cast<double>(cal.batches() * N);
  MESSAGE("span 1-3 at alpha 0.4: residual similarity ", m.residual_similarity, ", KL ", m.kl, ", module cosine ", m.module_cosine);
  CHECK(m.residual_similarity == doctest::Approx(res).epsilon(1e-10));
  CHECK(m.kl == doctest::Approx(kl).epsilon(1e-10));
  CHECK(m.kl > 1e-3);
  CHECK(m.kl_top_k == doctest::Approx(m.kl).epsilon(1e-10));
  CHECK(m.module_cosine < 1.0);
  CHECK(m.module_cosine > -1.0);

  // Policies read the terms.
  CHECK(policies::fitness::residual_and_kl{0.5, false}.quality(m) == doctest::Approx(m.residual_similarity - 0.5 * m.kl));
  CHECK(policies::fitness::kl_divergence{true}.quality(m) == -m.kl_top_k);
  CHECK(policies::fitness::residual_and_kl{}.needs() == (gelaco::need::residual | gelaco::need::kl));

  gelaco::evaluator<backend::cpu> plain(*teacher, cal);
  CHECK_THROWS_WITH_AS(plain.measure(d, gelaco::need::modules), doctest::Contains("built without the teacher's module states"),
                       lwcl::error);
  auto bad = cal;
  bad.ids[3] = 48;
  CHECK_THROWS_WITH_AS(gelaco::evaluator<backend::cpu>(*teacher, bad), doctest::Contains("calibration token 3 is 48"), lwcl::error);
}

TEST_CASE("gelaco fitness: a layer that adds nothing, merged away, scores as the teacher") {
  // Layer 2 of the teacher is the identity (its attention and MLP outputs are zero). Span [1, 2] with
  // alpha 0 keeps layer 1 alone, whose updates are the span's: every cosine 1, the KL 0. With alpha 1 the
  // merged layer is layer 2, which changes nothing: its update is zero, the similarity 0.
  backend::cpu be;
  auto teacher = tiny_llama(be, 4, 9);
  auto p = prune::detail::host_params(*teacher);
  for (const char* name : {"layers.2.attn.o.weight", "layers.2.mlp.down.weight"}) {
    const auto& e = teacher->layout().find(name);
    std::fill_n(p.begin() + e.offset, e.shape.numel(), 0.0);
  }
  prune::detail::set_host_params(*teacher, p);
  gelaco::evaluator_options o;
  o.modules = true;
  gelaco::evaluator<backend::cpu> ev(*teacher, calibration(48, 1), o);
  const unsigned all = gelaco::need::residual | gelaco::need::modules | gelaco::need::kl | gelaco::need::kl_top_k;
  auto m = ev.measure(gelaco::decode(genes_of(4, {{1, 2}}, 0.0), 4), all);
  CHECK(m.residual_similarity == doctest::Approx(1.0).epsilon(1e-12));
  CHECK(m.module_cosine == doctest::Approx(1.0).epsilon(1e-12));
  CHECK(m.kl == doctest::Approx(0.0).epsilon(1e-12));
  CHECK(std::abs(m.kl) < 1e-12);
  m = ev.measure(gelaco::decode(genes_of(4, {{1, 2}}, 1.0), 4), gelaco::need::residual);
  CHECK(std::abs(m.residual_similarity) < 1e-12);
}

namespace {

// Every way to cut L layers into runs, as span lists.
std::vector<std::vector<gelaco::collapse_span>> all_partitions(index_t L) {
  std::vector<std::vector<gelaco::collapse_span>> out;
  for (unsigned cuts = 0; cuts < (1u << (L - 1)); ++cuts) {
    std::vector<gelaco::collapse_span> spans;
    index_t start = 0;
    for (index_t l = 0; l < L; ++l)
      if (l == L - 1 || (cuts >> l) & 1u) {
        if (l > start) spans.push_back({start, l});
        start = l + 1;
      }
    out.push_back(spans);
  }
  return out;
}

}  // namespace

TEST_CASE("gelaco search: the genetic algorithm and NSGA-II find what exhaustive enumeration finds") {
  backend::cpu be;
  const index_t L = 6;
  auto teacher = tiny_llama(be, L, 21);
  gelaco::evaluator<backend::cpu> ev(*teacher, calibration(48, 1));
  const policies::fitness::residual_and_kl fit{};
  gelaco::search_options o;
  o.population = 32;
  o.generations = 30;
  o.seed = 5;
  o.fixed_alpha = 0.5;
  o.mutation = 0.1;  // a small search space: explore more than the default 1 / (3 L)
  o.eta_m = 5;
  // Every student, enumerated: the best quality for each number of removed layers.
  std::map<index_t, std::pair<double, std::string>> best;
  for (const auto& spans : all_partitions(L)) {
    const auto d = gelaco::decode(genes_of(L, spans, 0.5), L);
    const double q = fit.quality(ev.measure(d, fit.needs()));
    auto [it, fresh] = best.emplace(d.removed_layers(), std::make_pair(q, d.key()));
    if (!fresh && q > it->second.first) it->second = {q, d.key()};
  }
  REQUIRE(best.size() == static_cast<std::size_t>(L));

  SUBCASE("single objective: the best student with two layers removed") {
    o.multi_objective = false;
    o.target_removed = 2;
    gelaco::searcher<backend::cpu, policies::fitness::residual_and_kl> s(ev, fit, o);
    s.run();
    const auto found = s.evaluate({s.population().front()}).front();
    MESSAGE("GA: ", found.key, " quality ", found.quality, " after ", s.evaluations(), " evaluations; enumeration: ",
            best[2].second, " ", best[2].first);
    CHECK(found.genome.removed_layers() == 2);
    CHECK(found.key == best[2].second);
  }
  SUBCASE("two objectives: the front is the enumerated one") {
    gelaco::searcher<backend::cpu, policies::fitness::residual_and_kl> s(ev, fit, o);
    s.run();
    std::vector<gelaco::scored> all;
    for (const auto& [k, v] : s.archive()) all.push_back(v);
    const auto front = gelaco::pareto_front(all);
    // The enumerated front: best quality per removed count, kept where it beats every less compressed one.
    std::vector<std::string> want;
    double bar = -1e300;
    for (index_t r = L - 1; r >= 0; --r)
      if (best[r].first > bar) {
        want.insert(want.begin(), best[r].second);
        bar = best[r].first;
      }
    std::vector<std::string> got;
    for (const auto& f : front) got.push_back(f.key);
    MESSAGE("NSGA-II front after ", s.evaluations(), " evaluations: ", got.size(), " points, enumeration: ", want.size());
    CHECK(got == want);
    const double hv = gelaco::hypervolume(front, -10.0, -0.01);
    CHECK(hv > 0);
  }
}

TEST_CASE("gelaco search: threads and a resumed checkpoint give bitwise the same search") {
  backend::cpu be;
  auto teacher = tiny_llama(be, 5, 4);
  gelaco::evaluator<backend::cpu> ev(*teacher, calibration(48, 1));
  const auto tmp = std::filesystem::temp_directory_path() / "lwcl_test_gelaco_search";
  std::filesystem::remove_all(tmp);
  std::filesystem::create_directories(tmp);
  gelaco::search_options o;
  o.population = 12;
  o.generations = 6;
  o.seed = 17;
  const auto front_of = [&](gelaco::search_options opt) {
    gelaco::searcher<backend::cpu, policies::fitness::residual_and_kl> s(ev, {}, opt);
    s.run();
    std::vector<gelaco::scored> all;
    for (const auto& [k, v] : s.archive()) all.push_back(v);
    std::vector<std::pair<std::string, double>> f;
    for (const auto& p : gelaco::pareto_front(all)) f.emplace_back(p.key, p.quality);
    return std::make_pair(f, s.population());
  };
  const auto reference = front_of(o);
  auto two = o;
  two.threads = 2;
  CHECK(front_of(two) == reference);
  // Stopped after 3 generations (as a killed run leaves its checkpoint), then resumed to 6.
  auto first = o;
  first.checkpoint = tmp / "search.json";
  first.generations = 3;
  front_of(first);
  auto rest = first;
  rest.generations = 6;
  const auto resumed = front_of(rest);
  CHECK(resumed.second == reference.second);  // the final population, gene for gene
  CHECK(resumed.first == reference.first);    // the front over every candidate evaluated, before and after the stop
  // A damaged checkpoint is refused with the reason.
  {
    std::ifstream in(first.checkpoint);
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::ofstream(first.checkpoint) << text.substr(0, text.size() / 2);
    CHECK_THROWS_WITH_AS(front_of(rest), doctest::Contains("is not JSON"), lwcl::error);
    auto j = nlohmann::json::parse(text);
    j["population"][0][2] = 1.5;
    std::ofstream(first.checkpoint) << j.dump();
    CHECK_THROWS_WITH_AS(front_of(rest), doctest::Contains("gene 2 is 1.5"), lwcl::error);
    j = nlohmann::json::parse(text);
    j["archive"][0]["terms"][2] = "x";
    std::ofstream(first.checkpoint) << j.dump();
    CHECK_THROWS_WITH_AS(front_of(rest), doctest::Contains("is not a finite number"), lwcl::error);
    std::ofstream(first.checkpoint) << text;
  }
  // A checkpoint of another search is refused.
  auto other = rest;
  other.seed = 18;
  CHECK_THROWS_WITH_AS(front_of(other), doctest::Contains("is of another search"), lwcl::error);
  other = rest;
  other.mutation = 0.2;
  CHECK_THROWS_WITH_AS(front_of(other), doctest::Contains("was made with other settings"), lwcl::error);
  other = rest;
  other.initial = {gelaco::genes_of(gelaco::from_spans({{1, 2}}, std::vector<double>(5, 0.0), 5))};
  CHECK_THROWS_WITH_AS(front_of(other), doctest::Contains("was made with other settings"), lwcl::error);
  std::filesystem::remove_all(tmp);
}

TEST_CASE("gelaco genome: genes_of gives genes that decode to the same student") {
  const auto d = gelaco::from_spans({{4, 6}, {0, 2}}, {0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8}, 8);
  const auto g = gelaco::genes_of(d);
  REQUIRE(g.size() == 32);
  const auto back = gelaco::decode(g, 8);
  CHECK(back.spans == d.spans);
  CHECK(back.alpha == d.alpha);
  CHECK(back.boundaries == std::vector<index_t>{0, 3, 4, 7, 8});
  CHECK(back.key() == d.key());
  // Spans at both ends of the teacher, and no span at all.
  const auto ends = gelaco::from_spans({{0, 1}, {5, 6}}, std::vector<double>(7, 1.0), 7);
  CHECK(gelaco::decode(gelaco::genes_of(ends), 7).spans == ends.spans);
  CHECK(gelaco::decode(gelaco::genes_of(gelaco::from_spans({}, std::vector<double>(3, 0.0), 3)), 3).key() == "-");
}

TEST_CASE("gelaco search: initial genomes take the first population's first places") {
  backend::cpu be;
  auto teacher = tiny_llama(be, 5, 4);
  gelaco::evaluator<backend::cpu> ev(*teacher, calibration(48, 1));
  gelaco::search_options o;
  o.population = 8;
  o.generations = 0;
  o.seed = 5;
  const auto seed_a = gelaco::from_spans({{1, 3}}, {0, 0, 1, 0, 0}, 5), seed_b = gelaco::from_spans({{0, 1}, {3, 4}}, {0, 1, 0, 0, 1}, 5);
  const auto run = [&](const gelaco::search_options& opt) {
    gelaco::searcher<backend::cpu, policies::fitness::residual_and_kl> s(ev, {}, opt);
    s.run();
    return std::make_pair(s.population(), s.archive());
  };
  const auto [plain_pop, plain_archive] = run(o);
  auto seeded = o;
  seeded.initial = {gelaco::genes_of(seed_a), gelaco::genes_of(seed_b)};
  const auto [pop, archive] = run(seeded);
  CHECK(pop[0] == seeded.initial[0]);
  CHECK(pop[1] == seeded.initial[1]);
  for (std::size_t i = 2; i < pop.size(); ++i) CHECK(pop[i] == plain_pop[i]);  // the random draws as without them
  CHECK(archive.count(seed_a.key()) == 1);
  CHECK(archive.count(seed_b.key()) == 1);
  // Too many, or a genome of another teacher, is refused.
  auto bad = o;
  bad.initial.assign(9, gelaco::genes_of(seed_a));
  CHECK_THROWS_WITH_AS(run(bad), doctest::Contains("9 initial genomes for a population of 8"), lwcl::error);
  bad.initial = {std::vector<double>(12, 0.5)};
  CHECK_THROWS_WITH_AS(run(bad), doctest::Contains("a genome of 12 genes"), lwcl::error);
}

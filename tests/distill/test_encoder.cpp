// Encoder students (family bert) through the layer-wise pipeline and the end-to-end baselines: an
// encoder segment's gradient (post-norm blocks, bidirectional attention) against finite differences;
// the pipeline's teacher features equal to the encoder's own hidden states; a pruned encoder recovered
// layer-wise, saved as a BertModel folder and reloaded bitwise; a closing end-to-end stage on the
// sentence embedding; the refusal of validation perplexity; the end-to-end objectives' gradients against finite differences and training
// that lowers them; framed loader rows; held-out sentence pools and embedding agreement.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "lwcl/backend/host/host.hpp"
#include "lwcl/core/rng.hpp"
#include "lwcl/data/sentences.hpp"
#include "lwcl/distill/e2e_encoder.hpp"
#include "lwcl/distill/pipeline.hpp"
#include "lwcl/distill/segment_trainer.hpp"
#include "lwcl/eval/embedding_agreement.hpp"
#include "lwcl/model/checkpoint/hf.hpp"
#include "lwcl/model/encoder.hpp"
#include "lwcl/model/layer_outputs.hpp"
#include "lwcl/policies/bundle.hpp"
#include "lwcl/policies/cache/host.hpp"
#include "lwcl/policies/curriculum/curriculum.hpp"
#include "lwcl/policies/curriculum/two_stage.hpp"
#include "lwcl/policies/pruning/magnitude.hpp"
#include "lwcl/prune/surgery.hpp"
#include "pruned_fixture.hpp"

using namespace lwcl;
namespace fs = std::filesystem;
namespace pol = lwcl::policies;
using enc_t = model::encoder<backend::cpu>;

namespace {

// A bert of `layers` layers (vocab 48, 16 positions, width 32, 4 heads, FFN 48), its weights outside
// the norms scaled up so that pruning hurts.
model::encoder_config bert_config(index_t layers) {
  return {model::model_config::uniform(model::family::bert, 48, 16, 32, layers, 4, 4, 48), 2};
}

std::unique_ptr<enc_t> scaled_bert(backend::cpu& be, index_t layers, dtype t, std::uint64_t seed = 5) {
  auto net = std::make_unique<enc_t>(be, bert_config(layers), t);
  net->init(seed);
  auto p = model::host_params(*net);
  for (const auto& e : net->layout().entries())
    if (e.name.find("norm") == std::string::npos)
      for (index_t i = 0; i < e.shape.numel(); ++i) p[static_cast<std::size_t>(e.offset + i)] *= 4;
  model::set_host_params(*net, p);
  return net;
}

// Every other FFN channel and heads 0 and 2 of every layer.
prune::prune_plan half_plan(const model::model_config& cfg) {
  auto plan = prune::keep_all(cfg);
  for (auto& l : plan.layers) {
    l.ffn.clear();
    for (index_t j = 0; j < 48; j += 2) l.ffn.push_back(j);
    l.heads = {0, 2};
    l.kv_heads = {0, 2};
  }
  return plan;
}

std::vector<double> host_copy(const tensor& t) {
  std::vector<double> out(static_cast<std::size_t>(t.numel()));
  if (t.type == dtype::f64) std::copy_n(static_cast<const double*>(t.data), out.size(), out.begin());
  else
    for (std::size_t i = 0; i < out.size(); ++i) out[i] = static_cast<const float*>(t.data)[i];
  return out;
}

}  // namespace

TEST_CASE("encoder: the boundary features are the encoder's own hidden states, boundary 0 its embedding LayerNorm") {
  backend::cpu be;
  auto net = scaled_bert(be, 3, dtype::f64);
  const index_t B = 2, T = 7;
  std::vector<std::int32_t> ids(static_cast<std::size_t>(B * T));
  for (std::size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<std::int32_t>((i * 11 + 2) % 48);
  std::vector<std::vector<double>> h;
  model::for_each_layer_output(*net, ids, B, T, [&](index_t, const tensor& x) { h.push_back(host_copy(x)); });
  REQUIRE(h.size() == 4);
  const auto last = host_copy(net->forward(tensor(ids.data(), {B, T})));
  CHECK(h.back() == last);  // bitwise: the same kernels, one block at a time
  // Boundary 0: word + position + type-0 embeddings, then the embedding LayerNorm, recomputed here.
  const auto wte = host_copy(net->param("wte")), wpe = host_copy(net->param("wpe")), wtt = host_copy(net->param("wtt"));
  const auto g = host_copy(net->param("norm_emb.weight")), b = host_copy(net->param("norm_emb.bias"));
  const index_t C = 32;
  double worst = 0;
  for (index_t r = 0; r < B * T; ++r) {
    std::vector<double> e(static_cast<std::size_t>(C));
    double mean = 0, var = 0;
    for (index_t c = 0; c < C; ++c) {
      e[static_cast<std::size_t>(c)] = wte[static_cast<std::size_t>(ids[static_cast<std::size_t>(r)] * C + c)] +
                                       wpe[static_cast<std::size_t>((r % T) * C + c)] + wtt[static_cast<std::size_t>(c)];
      mean += e[static_cast<std::size_t>(c)] / C;
    }
    for (index_t c = 0; c < C; ++c) var += (e[static_cast<std::size_t>(c)] - mean) * (e[static_cast<std::size_t>(c)] - mean) / C;
    for (index_t c = 0; c < C; ++c) {
      const double want = (e[static_cast<std::size_t>(c)] - mean) / std::sqrt(var + net->config().norm_eps) * g[static_cast<std::size_t>(c)] +
                          b[static_cast<std::size_t>(c)];
      worst = std::max(worst, std::abs(want - h[0][static_cast<std::size_t>(r * C + c)]));
    }
  }
  CHECK(worst < 1e-12);
}

TEST_CASE("segment_trainer on encoder layers: gradients equal finite differences of the loss (f64)") {
  backend::cpu be;
  auto teacher = scaled_bert(be, 3, dtype::f64);
  auto student = prune::apply_plan(*teacher, half_plan(teacher->config()));
  const index_t B = 2, T = 8, C = 32;
  std::vector<std::int32_t> ids(static_cast<std::size_t>(B * T));
  for (std::size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<std::int32_t>((i * 7 + 3) % 48);
  std::vector<std::vector<double>> h;
  model::for_each_layer_output(*teacher, ids, B, T, [&](index_t, const tensor& x) { h.push_back(host_copy(x)); });
  auto params = model::host_params(*student);
  distill::segment_trainer<backend::cpu, pol::loss::nmse> seg(be, student->config(), 1, 3, student->layout(), params,
                                                              dtype::f64, {});
  const tensor x(h[1].data(), {B, T, C}), y(h[3].data(), {B, T, C});
  seg.compute_gradients(x, y);
  const auto g = host_copy(seg.grads());
  double* p = static_cast<double*>(seg.params().data);
  double worst = 0;
  int checked = 0;
  for (index_t i = 0; i < seg.layout().numel(); i += 29) {
    const double keep = p[i], eps = 1e-6;
    p[i] = keep + eps;
    const double up = seg.loss(x, y);
    p[i] = keep - eps;
    const double down = seg.loss(x, y);
    p[i] = keep;
    const double fd = (up - down) / (2 * eps);
    if (std::abs(fd) < 1e-9 && std::abs(g[static_cast<std::size_t>(i)]) < 1e-9) continue;  // alignment padding
    worst = std::max(worst, std::abs(fd - g[static_cast<std::size_t>(i)]) / std::max(1e-6, std::abs(fd)));
    ++checked;
  }
  MESSAGE("encoder segment: worst relative FD error ", worst, " over ", checked, " parameters");
  CHECK(checked > 50);
  CHECK(worst < 1e-5);
}

TEST_CASE("pipeline: a pruned encoder recovers layer-wise, is saved as a BertModel folder and reloads bitwise") {
  backend::cpu be;
  const fs::path dir = fs::temp_directory_path() / "lwcl_test_encoder_pipeline";
  fs::remove_all(dir);
  fs::create_directories(dir);
  test::write_markov_shard(dir / "train.bin");
  const data::shard shard((dir / "train.bin").string());
  const data::batch_loader loader(shard, 4, 12, 3, data::row_frame{1, 2});
  auto teacher = scaled_bert(be, 4, dtype::f32);
  const auto teacher_params = model::host_params(*teacher);
  auto source = [&] {
    auto t = std::make_unique<enc_t>(be, bert_config(4), dtype::f32, model::frozen);
    model::set_host_params(*t, teacher_params);
    return t;
  };
  auto pruned = prune::apply_plan(*teacher, half_plan(teacher->config()));
  auto student = distill::student_state::of(*pruned);
  REQUIRE(student.is_encoder());
  distill::pipeline_options o;
  o.total = {distill::budget_unit::steps, 240};
  o.progress_bar = false;
  o.log = nullptr;
  o.feature_batches = 4;
  o.lr = 3e-3;
  o.min_lr = 3e-4;
  o.checkpoint_every = 0;
  const auto bundle = make_policies(slot<key::pruning>(pol::pruning::magnitude_l2{}), slot<key::cache>(pol::cache::host{}));
  const auto r = distill::make_pipeline(be, bundle, o).run(source, student, model::identity_boundaries(4), loader, dir / "run");
  REQUIRE(r.visits.size() == 8);
  for (const auto& v : r.visits) {
    CAPTURE(v.first);
    CAPTURE(v.phase);
    CHECK(v.loss_last < v.loss_first);
    CHECK(v.tracker_bytes == v.compute_bytes + v.staging_bytes);
  }
  // The last hidden state on held-out framed batches: closer to the teacher's than the pruned student's.
  auto err = [&](const model::weights<backend::cpu>& s) {
    std::vector<std::int32_t> ids, targets;
    double d = 0, n = 0;
    for (std::uint64_t k = 500; k < 504; ++k) {
      loader.batch(k, ids, targets);
      std::vector<double> ht, hs;
      model::for_each_layer_output(*teacher, ids, 4, 12, [&](index_t b, const tensor& x) { if (b == 4) ht = host_copy(x); });
      model::for_each_layer_output(s, ids, 4, 12, [&](index_t b, const tensor& x) { if (b == 4) hs = host_copy(x); });
      for (std::size_t i = 0; i < ht.size(); ++i) {
        d += (hs[i] - ht[i]) * (hs[i] - ht[i]);
        n += ht[i] * ht[i];
      }
    }
    return std::sqrt(d / n);
  };
  const double before = err(*pruned), after = err(*student.to_encoder(be));
  MESSAGE("relative error of the last hidden state: pruned ", before, ", recovered ", after);
  CHECK(after < 0.7 * before);
  // Saved as the teacher came: a BertModel folder that reloads to the same bits.
  const auto folder = (dir / "run" / "student").string();
  const auto cfg = checkpoint::read_hf_encoder_config(folder);
  CHECK(cfg.model.fam == model::family::bert);
  CHECK(cfg.model.layers[0].n_heads == 2);
  CHECK(cfg.model.layers[0].ffn == 24);
  enc_t back(be, cfg, dtype::f32);
  checkpoint::load_hf_weights(back, folder);
  CHECK(model::host_params(back) == student.params);

  // A curriculum closed by final KD: an encoder has no logits, so the closing stage is end-to-end
  // distillation on the sentence embedding (kd_encoder_objective), which lowers that objective on
  // held-out batches below where the visits left it.
  const auto embedding_loss = [&](const model::weights<backend::cpu>& s) {
    std::vector<std::int32_t> ids, targets;
    std::vector<double> g;
    double loss = 0;
    for (std::uint64_t k = 500; k < 504; ++k) {
      loader.batch(k, ids, targets);
      std::vector<double> ht, hs;
      model::for_each_layer_output(*teacher, ids, 4, 12, [&](index_t b, const tensor& x) { if (b == 4) ht = host_copy(x); });
      model::for_each_layer_output(s, ids, 4, 12, [&](index_t b, const tensor& x) { if (b == 4) hs = host_copy(x); });
      loss += distill::e2e_encoder_detail::objective_grad(distill::encoder_objective::embedding, hs, ht, g, 4, 12,
                                                          teacher->config().d_model);
    }
    return loss / 4;
  };
  pol::curriculum::two_stage<> closing;
  closing.final_kd = true;
  auto s2 = distill::student_state::of(*pruned);
  const auto kd_bundle = make_policies(slot<key::pruning>(pol::pruning::magnitude_l2{}), slot<key::cache>(pol::cache::host{}),
                                       slot<key::curriculum>(closing));
  auto okd = o;
  okd.final_kd_share = 0.25;
  okd.kd_lr = 1e-3;
  okd.probe = [&](const distill::student_state& st) { return embedding_loss(*st.to_encoder(be)); };
  okd.eval_every = 1000;  // the points the pipeline always takes: the start, each visit's end, the closing stage's end
  const auto rk = distill::make_pipeline(be, kd_bundle, okd).run(source, s2, model::identity_boundaries(4), loader, dir / "kd");
  REQUIRE(rk.kd_steps == 60);
  REQUIRE(rk.curve.size() >= 3);
  const auto visits_end = std::find_if(rk.curve.rbegin(), rk.curve.rend(),
                                       [&](const distill::curve_point& q) { return q.step <= rk.segment_steps; });
  REQUIRE(visits_end != rk.curve.rend());
  MESSAGE("held-out 1 - cos of the sentence embeddings: pruned ", rk.curve.front().ppl, ", after the visits ",
          visits_end->ppl, ", after the closing stage ", rk.curve.back().ppl);
  CHECK(rk.curve.back().step == rk.segment_steps + rk.kd_steps);
  CHECK(rk.curve.back().ppl == doctest::Approx(embedding_loss(*s2.to_encoder(be))).epsilon(1e-9));
  CHECK(rk.curve.back().ppl < visits_end->ppl);
  nlohmann::json kd_record;
  {
    std::ifstream metrics(dir / "kd" / "metrics.jsonl");
    std::string line;
    while (std::getline(metrics, line))
      if (auto rec = nlohmann::json::parse(line); rec.value("event", "") == "final_kd") kd_record = rec;
  }
  REQUIRE_FALSE(kd_record.is_null());
  CHECK(kd_record.at("objective") == "embedding");
  CHECK(kd_record.at("steps") == 60);

  // Refused: validation perplexity.
  auto o2 = o;
  o2.validation_ids.assign(200, 1);
  CHECK_THROWS_WITH_AS(distill::make_pipeline(be, bundle, o2).run(source, s2, model::identity_boundaries(4), loader, dir / "v"),
                       doctest::Contains("the student is an encoder"), lwcl::error);
  CHECK_THROWS_WITH_AS(s2.to_transformer(be), doctest::Contains("has no language-model head"), lwcl::error);
  fs::remove_all(dir);
}

TEST_CASE("end-to-end encoder objectives: gradients equal finite differences; training lowers them") {
  const index_t B = 3, T = 4, C = 5;
  std::vector<double> hs(static_cast<std::size_t>(B * T * C)), ht(hs.size()), g, g2;
  for (std::size_t i = 0; i < hs.size(); ++i) {
    hs[i] = std::sin(0.7 * static_cast<double>(i) + 0.3);
    ht[i] = std::cos(0.45 * static_cast<double>(i));
  }
  for (const auto o : {distill::encoder_objective::embedding, distill::encoder_objective::hidden}) {
    CAPTURE(distill::objective_name(o));
    distill::e2e_encoder_detail::objective_grad(o, hs, ht, g, B, T, C);
    double worst = 0;
    for (std::size_t i = 0; i < hs.size(); ++i) {
      auto x = hs;
      const double eps = 1e-6;
      x[i] += eps;
      const double up = distill::e2e_encoder_detail::objective_grad(o, x, ht, g2, B, T, C);
      x[i] -= 2 * eps;
      const double down = distill::e2e_encoder_detail::objective_grad(o, x, ht, g2, B, T, C);
      worst = std::max(worst, std::abs((up - down) / (2 * eps) - g[i]));
    }
    CHECK(worst < 1e-8);
  }
  // The embedding objective is 1 - cos of the mean-pooled states: 0 for a student equal to the teacher.
  CHECK(distill::e2e_encoder_detail::objective_grad(distill::encoder_objective::embedding, ht, ht, g, B, T, C) ==
        doctest::Approx(0.0).epsilon(1e-12));

  backend::cpu be;
  const fs::path dir = fs::temp_directory_path() / "lwcl_test_e2e_encoder";
  fs::create_directories(dir);
  test::write_markov_shard(dir / "train.bin");
  const data::shard shard((dir / "train.bin").string());
  const data::batch_loader loader(shard, 4, 12, 3, data::row_frame{1, 2});
  const auto teacher = scaled_bert(be, 2, dtype::f32);
  for (const auto o : {distill::encoder_objective::embedding, distill::encoder_objective::hidden}) {
    CAPTURE(distill::objective_name(o));
    auto student = prune::apply_plan(*teacher, half_plan(teacher->config()));
    distill::e2e_encoder_options eo;
    eo.steps = 60;
    eo.lr = 3e-3;
    eo.objective = o;
    eo.progress_bar = false;
    eo.eval_every = 20;
    int probes = 0;
    eo.probe = [&] { return static_cast<double>(++probes); };
    const auto r = distill::train_e2e_encoder(*teacher, *student, loader, 4, 12, eo);
    CHECK(r.steps == 60);
    CHECK(r.loss_last < 0.5 * r.loss_first);
    CHECK(r.curve.size() == 4);  // steps 0, 20, 40, 60
    CHECK(r.peak_compute_bytes > student->parameter_bytes());
  }
  fs::remove_all(dir);
}

TEST_CASE("end-to-end encoder KD checkpointed and in micro-batches: the same student, in less tracker memory") {
  backend::cpu be;
  const fs::path dir = fs::temp_directory_path() / "lwcl_test_e2e_encoder_memory";
  fs::create_directories(dir);
  test::write_markov_shard(dir / "train.bin");
  const data::shard shard((dir / "train.bin").string());
  const data::batch_loader loader(shard, 4, 12, 4, data::row_frame{1, 2});
  const auto teacher = scaled_bert(be, 2, dtype::f64);
  auto run = [&](bool checkpoint, index_t micro) {
    auto student = prune::apply_plan(*teacher, half_plan(teacher->config()));
    distill::e2e_encoder_options eo;
    eo.steps = 3;
    eo.lr = 3e-3;
    eo.progress_bar = false;
    eo.checkpoint_activations = checkpoint;
    eo.micro_batches = micro;
    const auto r = distill::train_e2e_encoder(*teacher, *student, loader, 4, 12, eo);
    return std::pair{model::host_params(*student), r};
  };
  const auto [plain, rp] = run(false, 1);
  const auto [ckpt, rc] = run(true, 1);
  const auto [split, rs] = run(false, 2);
  MESSAGE("tracker peak: plain ", rp.peak_compute_bytes, " B, checkpointed ", rc.peak_compute_bytes, " B, two micro-batches ",
          rs.peak_compute_bytes, " B");
  CHECK(ckpt == plain);
  CHECK(rc.peak_compute_bytes < rp.peak_compute_bytes);
  double worst = 0;
  for (std::size_t i = 0; i < plain.size(); ++i) worst = std::max(worst, std::abs(plain[i] - split[i]));
  CHECK(worst < 1e-10);
  CHECK(rs.peak_compute_bytes < rp.peak_compute_bytes);
  auto student = prune::apply_plan(*teacher, half_plan(teacher->config()));
  distill::e2e_encoder_options bad;
  bad.micro_batches = 3;
  bad.progress_bar = false;
  CHECK_THROWS_WITH_AS(distill::train_e2e_encoder(*teacher, *student, loader, 4, 12, bad),
                       doctest::Contains("micro_batches is 3, expected a divisor of the batch of 4 sequences"), lwcl::error);
  fs::remove_all(dir);
}

TEST_CASE("framed loader rows: [CLS], a window of the shard, [SEP]; targets ignored") {
  const fs::path dir = fs::temp_directory_path() / "lwcl_test_framed_rows";
  fs::create_directories(dir);
  test::write_markov_shard(dir / "train.bin");
  const data::shard shard((dir / "train.bin").string());
  const data::batch_loader plain(shard, 3, 10, 9), framed(shard, 3, 10, 9, data::row_frame{40, 41});
  std::vector<std::int32_t> a, at, b, bt;
  plain.batch(5, a, at);
  framed.batch(5, b, bt);
  for (index_t r = 0; r < 3; ++r) {
    CHECK(b[static_cast<std::size_t>(r * 10)] == 40);
    CHECK(b[static_cast<std::size_t>(r * 10 + 9)] == 41);
    for (index_t t = 1; t < 9; ++t) CHECK(b[static_cast<std::size_t>(r * 10 + t)] == a[static_cast<std::size_t>(r * 10 + t - 1)]);
  }
  for (const auto v : bt) CHECK(v == -1);
  CHECK_THROWS_WITH_AS(data::batch_loader(shard, 3, 2, 9, data::row_frame{40, 41}), doctest::Contains("at least 3"), lwcl::error);
  fs::remove_all(dir);
}

TEST_CASE("held-out sentence pools cover every document; embedding agreement") {
  const auto s = data::split_sentences("It was late.  \"Go home!\" she said.\nThe end\nof it?\n\nA new paragraph  begins");
  REQUIRE(s.size() == 5);
  CHECK(s[0] == "It was late.");
  CHECK(s[1] == "\"Go home!\"");
  CHECK(s[2] == "she said.");
  CHECK(s[3] == "The end of it?");  // a line break inside a paragraph is a space
  CHECK(s[4] == "A new paragraph begins");
  std::vector<std::string> docs;
  for (int d = 0; d < 3; ++d) {
    std::string text;
    for (int i = 0; i < (d + 1) * 20; ++i) text += "Document " + std::to_string(d) + " has sentence number " + std::to_string(i) + " here. ";
    docs.push_back(text);
  }
  const auto pool = data::held_out_sentences(docs, 30, "validation");
  REQUIRE(pool.sentences.size() == 30);
  std::vector<int> per(3, 0);
  for (const auto d : pool.document) ++per[d];
  CHECK(per == std::vector<int>{5, 10, 15});  // by sentence count: 20, 40, 60 of 120
  CHECK(pool.sentences.front() == "Document 0 has sentence number 0 here.");
  CHECK(pool.sentences.back() == "Document 2 has sentence number 59 here.");
  CHECK(pool.protocol().find("over all 3 documents") != std::string::npos);
  CHECK_THROWS_WITH_AS(data::held_out_sentences(docs, 500, "validation"), doctest::Contains("between 3 and 120"), lwcl::error);

  // Agreement: the same embeddings agree fully; a student that swaps two sentences' embeddings moves
  // both out of every neighbour list they were in and keeps everything else.
  std::vector<std::vector<double>> t;
  for (int i = 0; i < 20; ++i) t.push_back({std::cos(0.3 * i), std::sin(0.3 * i), 0.1 * i});
  const auto same = eval::compare_embeddings(t, t, 3);
  CHECK(same.mean_cosine == doctest::Approx(1.0));
  CHECK(same.topk_agreement == 1.0);
  auto scaled = t;
  for (auto& e : scaled)
    for (auto& v : e) v *= 3;  // the cosine ignores length
  CHECK(eval::compare_embeddings(t, scaled, 3).topk_agreement == 1.0);
  auto swapped = t;
  std::swap(swapped[0], swapped[19]);
  const auto sw = eval::compare_embeddings(t, swapped, 3);
  CHECK(sw.topk_agreement < 1.0);
  CHECK(sw.min_cosine < 0.9);
  CHECK_THROWS_WITH_AS(eval::compare_embeddings(t, t, 20), doctest::Contains("need more than 20"), lwcl::error);
}

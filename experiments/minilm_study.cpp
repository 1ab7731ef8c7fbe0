// minilm_compress's run (minilm_study.hpp), compiled once for the programs that call it.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "host_instances.hpp"
#include "minilm_study.hpp"
#include "lwcl/core/process_memory.hpp"
#include "lwcl/data/sentences.hpp"
#include "lwcl/distill/e2e_encoder.hpp"
#include "lwcl/eval/embedding_agreement.hpp"
#include "lwcl/model/encoder.hpp"
#include "lwcl/model/tokenizer/wordpiece.hpp"
#include "lwcl/policies/curriculum/curriculum.hpp"
#include "lwcl/policies/curriculum/teacher_inputs.hpp"
#include "lwcl/policies/curriculum/two_stage.hpp"
#include "lwcl/policies/pruning/uniform.hpp"
#include "lwcl/core/program.hpp"
#include "studies/cli.hpp"
#include "studies/options.hpp"
#include "studies/seeds.hpp"
#include "studies/time_to_target.hpp"
#include "studies/validators.hpp"

namespace lwcl::experiments::minilm_detail {

namespace fs = std::filesystem;
namespace cur = lwcl::policies::curriculum;
using enc_t = model::encoder<backend::cpu>;
using sequences = std::vector<std::vector<std::int32_t>>;
using embedding_set = std::vector<std::vector<double>>;

// The command line: the harness's recovery options with this study's defaults, and the encoder's own.
struct settings {
  studies::options o;
  std::string model, corpus = "data/corpus";
  std::size_t pool = 2000;
  int curve_pool = 128;
  std::string only = "lwcl,layerwise_no_curriculum,e2e_embedding,e2e_hidden";
  // End-to-end distillation's rate, chosen on validation (paper_repro/results/tune_minilm: 3e-4 of 1e-4,
  // 3e-4, 1e-3, 3e-3, against 1e-3 for the layer-wise visits); 0: o.lr.
  double e2e_lr = 3e-4;
  long e2e_warmup_steps = 0;
  // End-to-end distillation's batches in this many micro-batches with the gradients accumulated (a
  // divisor of --batch): the memory-limited user's end-to-end run.
  int e2e_micro_batches = 1;
  // lwcl_kd: LWCL whose curriculum closes with end-to-end distillation on the sentence embedding for
  // kd_share of the budget, at peak rate kd_lr (0: e2e_lr) after kd_warmup_steps of warm-up.
  double kd_share = 0.5, kd_lr = 0;
  long kd_warmup_steps = 0;
  int kd_micro_batches = 1;  // lwcl_kd's closing stage in this many micro-batches (a divisor of --batch)

  settings() {
    const char* models = std::getenv("LWCL_MODELS");
    const char* home = std::getenv("HOME");
    model = ((models && *models ? fs::path(models) : fs::path(home ? home : "") / ".cache" / "lwcl" / "models") /
             "all-MiniLM-L6-v2").string();
    o.budget = "steps:240";
    o.lr = 1e-3;
    o.seq = 64;
    o.out = "runs/minilm_compress";
  }
};

void add_options(CLI::App& app, settings& st) {
  app.add_option("--model", st.model, "the pretrained encoder's folder (config.json, vocab.txt, model.safetensors)");
  app.add_option("--corpus", st.corpus, "corpus folder with manifest.json (tools/fetch_corpus.sh): splits of raw text");
  studies::add_recovery_options(app, st.o, "every recovery's budget: steps:N, tokens:N or seconds:N (a plain number)");
  app.get_option("--seq")->description("tokens per training sequence, [CLS] and [SEP] included")->check(studies::within(3, 512));
  app.add_option("--pool", st.pool, "held-out sentences judged (and neighbours searched among)")->check(studies::within(12, 1000000));
  app.add_option("--curve-pool", st.curve_pool, "sentences of the curves' pool")->check(studies::within(2, 100000));
  app.add_option("--only", st.only, "the recoveries run, comma-separated, of lwcl, lwcl_kd (LWCL closed by end-to-end "
                 "distillation on the embedding), layerwise_no_curriculum, e2e_embedding and e2e_hidden (the cost to target "
                 "is read off e2e_embedding's curve: with it only)");
  app.add_option("--kd-share", st.kd_share, "lwcl_kd: the share of the budget its closing end-to-end stage gets")
      ->check(CLI::Range(0.05, 0.95));
  app.add_option("--kd-lr", st.kd_lr, "lwcl_kd: its closing stage's peak learning rate (0: --e2e-lr)")->check(studies::non_negative);
  app.add_option("--kd-warmup-steps", st.kd_warmup_steps, "lwcl_kd: steps of its closing stage's learning-rate warm-up")
      ->check(studies::within(0, 1000000));
  app.add_option("--kd-micro-batches", st.kd_micro_batches, "lwcl_kd: each batch of its closing stage in this many "
                 "micro-batches, gradients accumulated (a divisor of --batch): less activation memory, the same update")
      ->check(studies::within(1, 1000000));
  app.add_option("--e2e-lr", st.e2e_lr, "end-to-end distillation's peak learning rate (3e-4 unless given, chosen on validation; 0: --lr, the "
                 "layer-wise rate)")
      ->check(studies::non_negative);
  app.add_option("--e2e-warmup-steps", st.e2e_warmup_steps, "end-to-end distillation: steps of a linear learning-rate "
                 "warm-up before its cosine decay (--warmup-steps is the layer-wise visits')")
      ->check(studies::within(0, 1000000));
  app.add_option("--e2e-micro-batches", st.e2e_micro_batches, "end-to-end distillation: each batch in this many "
                 "micro-batches, gradients accumulated (a divisor of --batch): the memory-limited run")
      ->check(studies::within(1, 1000000));
}

// The recoveries of --only, in the study's order; a name that is not one of them is refused.
std::vector<std::string> methods_run(const settings& st) {
  const std::vector<std::string> all = {"lwcl", "lwcl_kd", "layerwise_no_curriculum", "e2e_embedding", "e2e_hidden"};
  const auto asked = studies::split_list(st.only);
  check(!asked.empty(), "minilm_compress: --only names no recovery (expected some of lwcl, lwcl_kd, layerwise_no_curriculum, "
        "e2e_embedding, e2e_hidden)");
  for (const auto& a : asked)
    check(std::find(all.begin(), all.end(), a) != all.end(), "minilm_compress: --only names '", a,
          "', expected some of lwcl, lwcl_kd, layerwise_no_curriculum, e2e_embedding, e2e_hidden");
  std::vector<std::string> out;
  for (const auto& m : all)
    if (std::find(asked.begin(), asked.end(), m) != asked.end()) out.push_back(m);
  return out;
}

// lwcl_kd's closing rate: --kd-lr, else end-to-end distillation's.
double kd_rate(const settings& st) { return st.kd_lr > 0 ? st.kd_lr : st.e2e_lr > 0 ? st.e2e_lr : st.o.lr; }

nlohmann::ordered_json config_json(const settings& st, const distill::budget& total) {
  const auto& o = st.o;
  return {{"program", "minilm_compress"}, {"model", st.model}, {"corpus", st.corpus},
          {"budget", total},               {"ratio", o.ratio},  {"depth", o.depth},
          {"lr", o.lr},                    {"batch", o.batch},  {"seq", o.seq},
          {"feature_batches", o.feature_batches}, {"calib_batches", o.calib_batches},
          {"pool", st.pool},               {"curve_points", o.curve_points}, {"curve_pool", st.curve_pool},
          {"test_split", o.test_split},    {"seeds", o.seeds},  {"seed", o.seed},
          {"warmup_steps", o.warmup_steps}, {"min_visit_steps", o.min_visit_steps}, {"budget_share", o.budget_share},
          {"keep_optimizer_state", o.keep_optimizer_state}, {"end_exact_visits", o.end_exact_visits},
          {"only", methods_run(st)},
          {"e2e_lr", st.e2e_lr > 0 ? st.e2e_lr : o.lr}, {"e2e_warmup_steps", st.e2e_warmup_steps},
          {"e2e_micro_batches", st.e2e_micro_batches}, {"kd_share", st.kd_share}, {"kd_lr", kd_rate(st)},
          {"kd_warmup_steps", st.kd_warmup_steps}, {"kd_micro_batches", st.kd_micro_batches}};
}

// Sentence embeddings (mean-pooled last hidden states, unit length) of each sequence, one forward of
// batch 1 per sequence, through model::for_each_layer_output (frozen models too).
embedding_set embeddings(const model::weights<backend::cpu>& net, const sequences& seqs) {
  embedding_set out;
  const index_t L = net.config().n_layers(), C = net.config().d_model;
  for (const auto& ids : seqs) {
    const auto T = static_cast<index_t>(ids.size());
    std::vector<double> e(static_cast<std::size_t>(C), 0.0);
    model::for_each_layer_output(net, ids, 1, T, [&](index_t boundary, const tensor& h) {
      if (boundary != L) return;
      check(h.type == dtype::f32, "minilm_compress: embeddings read f32 hidden states, got ", dtype_name(h.type));
      const auto* x = static_cast<const float*>(h.data);
      for (index_t t = 0; t < T; ++t)
        for (index_t c = 0; c < C; ++c) e[static_cast<std::size_t>(c)] += x[t * C + c] / static_cast<double>(T);
    });
    double n = 0;
    for (const double v : e) n += v * v;
    n = std::sqrt(n);
    for (double& v : e) v /= std::max(n, 1e-12);
    out.push_back(std::move(e));
  }
  return out;
}

struct row {
  std::string name;
  nlohmann::ordered_json fig = nlohmann::ordered_json::object();  // numeric figures and details
};

double num(const row& r, const char* k) { return r.fig.contains(k) ? r.fig.at(k).get<double>() : 0.0; }

// What every seed shares: the teacher's folder read and checked, its tokenizer, the corpus (the training
// split as a WordPiece shard in the run directory), the held-out pools and the teacher's embeddings of them.
struct study {
  const settings& st;
  mutable backend::cpu be;  // the models built from a const study allocate through it
  distill::budget total;
  model::encoder_config ecfg;
  std::unique_ptr<tokenizer::wordpiece> wp;
  std::int32_t cls = -1, sep = -1;
  std::map<std::string, std::vector<std::string>> docs;
  std::unique_ptr<data::shard> train;
  data::sentence_pool val_pool;
  std::optional<data::sentence_pool> test_pool;
  sequences val_seqs, test_seqs, curve_seqs;
  embedding_set teacher_val, teacher_test, teacher_curve;

  explicit study(const settings& s) : st(s), total(studies::budget_option(s.o.budget)) {
    fs::create_directories(st.o.out);
    for (const char* f : {"config.json", "vocab.txt", "model.safetensors"})
      check(fs::exists(fs::path(st.model) / f), "minilm_compress: '", (fs::path(st.model) / f).string(),
            "' is missing (run tools/install_deps.sh --minilm, or give --model)");
    ecfg = checkpoint::read_hf_encoder_config(st.model);
    check(st.o.seq <= ecfg.model.max_seq, "minilm_compress: --seq ", st.o.seq, " exceeds the model's ", ecfg.model.max_seq,
          " positions");
    wp = std::make_unique<tokenizer::wordpiece>((fs::path(st.model) / "vocab.txt").string());
    for (std::size_t i = 0; i < wp->vocab_size(); ++i) {
      if (wp->token(static_cast<std::int32_t>(i)) == "[CLS]") cls = static_cast<std::int32_t>(i);
      if (wp->token(static_cast<std::int32_t>(i)) == "[SEP]") sep = static_cast<std::int32_t>(i);
    }
    check(cls >= 0 && sep >= 0, "minilm_compress: the vocabulary has no [CLS] or no [SEP]");
    read_corpus();
    read_pools();
  }

  std::unique_ptr<enc_t> load_teacher() const {
    auto t = std::make_unique<enc_t>(be, ecfg, dtype::f32, model::frozen);
    checkpoint::load_hf_weights(*t, st.model);
    return t;
  }

  // The cosine with the teacher's embeddings and top-10 neighbour agreement, on each pool.
  void judge(row& r, const model::weights<backend::cpu>& net) const {
    const auto a = eval::compare_embeddings(teacher_val, embeddings(net, val_seqs), 10);
    r.fig["cosine"] = a.mean_cosine;
    r.fig["min_cosine"] = a.min_cosine;
    r.fig["top10_agreement"] = a.topk_agreement;
    if (test_pool) {
      const auto b = eval::compare_embeddings(teacher_test, embeddings(net, test_seqs), 10);
      r.fig["test_cosine"] = b.mean_cosine;
      r.fig["test_top10_agreement"] = b.topk_agreement;
    }
  }

  // 1 - mean cosine to the teacher on the curves' pool: lower is better, as a perplexity.
  double distance(const model::weights<backend::cpu>& net) const {
    const auto e = embeddings(net, curve_seqs);
    double c = 0;
    for (std::size_t i = 0; i < e.size(); ++i)
      for (std::size_t k = 0; k < e[i].size(); ++k) c += e[i][k] * teacher_curve[i][k];
    return 1 - c / static_cast<double>(e.size());
  }

 private:
  // Raw text of every split; the training split as WordPiece ids joined by [SEP].
  void read_corpus() {
    const auto manifest_path = fs::path(st.corpus) / "manifest.json";
    check(fs::exists(manifest_path), "minilm_compress: no '", manifest_path.string(), "' (run tools/fetch_corpus.sh)");
    const auto manifest = nlohmann::json::parse(read_text(manifest_path));
    for (const auto& d : manifest.at("documents"))
      docs[d.at("split").get<std::string>()].push_back(read_text(fs::path(st.corpus) / d.at("path").get<std::string>()));
    check(!docs["train"].empty() && !docs["validation"].empty(), "minilm_compress: the manifest needs train and validation documents");
    std::vector<std::int32_t> train_ids;
    for (const auto& text : docs["train"]) {
      const auto ids = wp->encode(text);
      train_ids.insert(train_ids.end(), ids.begin(), ids.end());
      train_ids.push_back(sep);
    }
    const auto shard_path = (fs::path(st.o.out) / "train_wordpiece.bin").string();
    data::write_shard(shard_path, train_ids, wp->vocab_size());
    train = std::make_unique<data::shard>(shard_path);
    std::printf("minilm_compress: %zu training documents -> %zu WordPiece tokens\n", docs["train"].size(), train_ids.size());
  }

  // A pool as [CLS] pieces [SEP] (at most the model's positions).
  sequences encode_pool(const data::sentence_pool& p) const {
    sequences seqs;
    for (const auto& s : p.sentences) {
      auto pieces = wp->encode(s);
      if (static_cast<index_t>(pieces.size()) > ecfg.model.max_seq - 2) pieces.resize(static_cast<std::size_t>(ecfg.model.max_seq - 2));
      std::vector<std::int32_t> ids{cls};
      ids.insert(ids.end(), pieces.begin(), pieces.end());
      ids.push_back(sep);
      seqs.push_back(std::move(ids));
    }
    return seqs;
  }

  // The held-out pools (validation; test with --test-split; the curves' every k-th validation sentence)
  // and the teacher's embeddings of them.
  void read_pools() {
    val_pool = data::held_out_sentences(docs["validation"], st.pool, "validation");
    val_seqs = encode_pool(val_pool);
    if (st.o.test_split) {
      test_pool = data::held_out_sentences(docs["test"], st.pool, "test");
      test_seqs = encode_pool(*test_pool);
    }
    const auto every = std::min<std::size_t>(val_seqs.size(), static_cast<std::size_t>(st.curve_pool));
    for (std::size_t i = 0; st.o.curve_points > 0 && i < static_cast<std::size_t>(st.curve_pool) && i < val_seqs.size(); ++i)
      curve_seqs.push_back(val_seqs[i * val_seqs.size() / every]);
    std::printf("minilm_compress: %s\n", val_pool.protocol().c_str());
    timer te;
    const auto t = load_teacher();
    teacher_val = embeddings(*t, val_seqs);
    if (test_pool) teacher_test = embeddings(*t, test_seqs);
    if (!curve_seqs.empty()) teacher_curve = embeddings(*t, curve_seqs);
    std::printf("minilm_compress: teacher embeddings of the pools in %.1f s\n", te.seconds());
  }
};

// The cost of a recovery as the table reports it, from either method's result.
nlohmann::ordered_json cost_figures(const distill::e2e_result& e) {
  return {{"peak_compute_bytes", e.peak_compute_bytes}, {"run_peak_compute_bytes", e.peak_compute_bytes},
          {"wall_seconds", e.seconds},                  {"cpu_seconds", e.cpu_seconds},
          {"train_flops", e.flops},                     {"steps", e.steps}};
}
// A layer-wise run's training peak: its largest visit's, or its closing end-to-end stage's where that is larger.
nlohmann::ordered_json cost_figures(const distill::pipeline_result& p) {
  return {{"peak_compute_bytes", std::max(p.peak_compute_bytes, p.kd_peak_compute_bytes)},
          {"run_peak_compute_bytes", p.run_peak_compute_bytes},
          {"run_peak_total_bytes", p.run_peak_total_bytes}, {"wall_seconds", p.seconds},
          {"cpu_seconds", p.cpu_seconds},               {"train_flops", p.flops},
          {"steps", p.segment_steps + p.kd_steps},      {"closing_steps", p.kd_steps},
          {"peak_cache_bytes", p.peak_cache_bytes}};
}

// One seed: its calibration sample and data order, the teacher pruned (depth by block influence, then
// width by Wanda-sp, each on its own calibration pass), and the rows of every method recovered from it.
struct seed_run {
  const study& sy;
  fs::path dir;
  data::batch_loader loader, calib;
  std::unique_ptr<enc_t> pruned;
  std::vector<index_t> boundaries;
  std::vector<row> rows;
  // The curves (--curve-points > 0): the layer-wise runs' before the first visit and after each visit
  // (and every `every` steps of a closing KD stage), end-to-end distillation's every `every` steps, or
  // under a seconds budget every `every_seconds` training seconds; both before the first step and at the end.
  bool curves = false;
  long every = 0;
  double every_seconds = 0;

  seed_run(const study& s, std::uint64_t seed, fs::path d)
      : sy(s), dir(std::move(d)), loader(*s.train, s.st.o.batch, s.st.o.seq, studies::seeded(0x5EED, seed), {s.cls, s.sep}),
        calib(*s.train, s.st.o.batch, s.st.o.seq, studies::seeded(0xC0FFEE, seed), {s.cls, s.sep}) {
    fs::create_directories(dir);
    prune();
    const long steps = static_cast<long>(sy.total.steps_at(sy.st.o.batch * sy.st.o.seq));
    curves = sy.st.o.curve_points > 0;
    every = curves && steps > 0 ? std::max<long>(1, steps / sy.st.o.curve_points) : 0;
    every_seconds = curves && sy.total.unit == distill::budget_unit::seconds ? sy.total.amount / sy.st.o.curve_points : 0;
  }

  // Layer-wise recovery under the bundle of the host cache and `entries` (the default bundle's otherwise).
  // kd: the curriculum closes with end-to-end distillation on the embedding (lwcl_kd's options).
  template <class... Entries>
  void layerwise(const std::string& name, bool kd, Entries... entries) {
    const auto bundle = make_policies(slot<key::pruning>(policies::pruning::wanda_sp{}),
                                      slot<key::cache>(policies::cache::host{}), entries...);
    distill::pipeline_options po = studies::recovery_options(sy.total, sy.st.o.lr, sy.st.o.feature_batches);
    studies::visit_schedule_options(po, sy.st.o);
    if (kd) {
      po.final_kd_share = sy.st.kd_share;
      po.kd_lr = kd_rate(sy.st);
      po.kd_warmup_steps = sy.st.kd_warmup_steps;
      po.kd_micro_batches = sy.st.kd_micro_batches;
      po.kd_encoder_objective = distill::encoder_objective::embedding;
    }
    po.student_as.tokenizer_from = sy.st.model;  // the student folder loads with the teacher's tokenizer
    po.resume = false;
    if (curves) po.probe = [&](const distill::student_state& st) { return sy.distance(*st.to_encoder(sy.be)); };
    po.eval_every = every;
    po.eval_every_seconds = every_seconds;  // the closing stage's points (the visits' come at their ends)
    auto st = distill::student_state::of(*pruned);
    std::printf("%s: layer-wise, budget %s\n", name.c_str(), sy.total.str().c_str());
    const bool rss = reset_peak_resident();
    const auto res = distill::make_pipeline(sy.be, bundle, po).run([&] { return sy.load_teacher(); }, st, boundaries, loader, dir / name);
    record(name, st, res.curve, cost_figures(res), rss ? peak_resident_bytes() : 0);
  }

  // End-to-end distillation on `objective`, teacher and student resident.
  void end_to_end(const std::string& name, distill::encoder_objective objective) {
    distill::e2e_encoder_options eo;
    eo.lr = sy.st.e2e_lr > 0 ? sy.st.e2e_lr : sy.st.o.lr;
    eo.min_lr = eo.lr / 10;
    eo.warmup_steps = sy.st.e2e_warmup_steps;
    eo.micro_batches = sy.st.e2e_micro_batches;
    eo.objective = objective;
    eo.set_budget(sy.total, sy.st.o.batch * sy.st.o.seq);
    auto student = prune::apply_plan(*pruned, prune::keep_all(pruned->config()));
    if (curves) eo.probe = [&] { return sy.distance(*student); };
    eo.eval_every = every;
    eo.eval_every_seconds = every_seconds;
    std::printf("%s: end to end on the %s, teacher and student resident, budget %s\n", name.c_str(),
                std::string(distill::objective_name(objective)).c_str(), sy.total.str().c_str());
    fs::remove_all(dir / name);
    fs::create_directories(dir / name);
    const bool rss = reset_peak_resident();
    distill::e2e_result res;
    {
      const auto teacher = sy.load_teacher();
      metrics_writer m((dir / name / "metrics.jsonl").string());
      res = distill::train_e2e_encoder(*teacher, *student, loader, sy.st.o.batch, sy.st.o.seq, eo, &m);
    }
    const std::size_t peak = rss ? peak_resident_bytes() : 0;
    checkpoint::save_hf(*student, (dir / name / "student").string(), {.weights = {}, .tokenizer_from = sy.st.model});
    record(name, distill::student_state::of(*student), res.curve, cost_figures(res), peak);
  }

  // The cost at which each layer-wise curve first reaches the final distance of the row `reference`.
  void time_to_target(const std::string& reference) {
    const auto ref = std::find_if(rows.begin(), rows.end(), [&](const row& r) { return r.name == reference; });
    check(ref != rows.end(), "minilm_compress: no row '", reference, "' to read the target from");
    const auto kc = ref->fig.at("curve").get<std::vector<distill::curve_point>>();
    const double target = kc.back().ppl;
    const auto kr = distill::first_reaching(kc, target);
    for (auto& r : rows) {
      if (r.name != "lwcl" && r.name != "lwcl_kd" && r.name != "layerwise_no_curriculum") continue;
      const auto c = r.fig.at("curve").get<std::vector<distill::curve_point>>();
      const auto at = distill::first_reaching(c, target);
      r.fig["reached_target"] = at ? 1 : 0;
      if (at && kr && kr->flops > 0) {
        r.fig["time_to_target_ratio"] = at->seconds / kr->seconds;
        r.fig["flops_to_target_ratio"] = at->flops / kr->flops;
      }
      // The wall time to shares of the reference's gain over the pruned student (the curves' first point).
      for (const auto& g : studies::gain_level_reaches(kc, c))
        if (g.seconds) r.fig[studies::time_to_level_key(g.percent)] = *g.seconds / g.reference_seconds;
    }
  }

 private:
  void prune() {
    timer pc;
    std::vector<index_t> kept;
    {
      auto t = sy.load_teacher();
      std::unique_ptr<enc_t> shallow;
      if (sy.st.o.depth > 0) {
        shallow = policies::pruning::prune_depth(*t, calib, sy.st.o.depth, sy.st.o.calib_batches, kept);
      } else {
        for (index_t l = 0; l < t->config().n_layers(); ++l) kept.push_back(l);
      }
      const enc_t& src = shallow ? *shallow : *t;
      pruned = sy.st.o.ratio > 0
                   ? policies::pruning::prune_uniform(src, calib, policies::pruning::wanda_sp{}, sy.st.o.ratio, sy.st.o.calib_batches)
                   : prune::apply_plan(src, prune::keep_all(src.config()));
      row tr{"teacher"};
      tr.fig["parameters"] = t->num_parameters();
      tr.fig["cosine"] = 1.0;
      tr.fig["top10_agreement"] = 1.0;
      rows.push_back(tr);
    }
    boundaries = model::boundaries_of_kept_layers(kept, sy.ecfg.model.n_layers());
    row pr{"pruned"};
    pr.fig["wall_seconds"] = pc.seconds();
    pr.fig["parameters"] = pruned->num_parameters();
    pr.fig["layers"] = pruned->config().n_layers();
    pr.fig["removed_fraction"] = 1 - num(pr, "parameters") / num(rows[0], "parameters");
    sy.judge(pr, *pruned);
    pr.fig["boundaries"] = boundaries;
    std::printf("pruned: %lld layers, %.0f parameters (%.1f%% removed), cosine %.4f, top-10 agreement %.4f\n",
                static_cast<long long>(pruned->config().n_layers()), num(pr, "parameters"), 100 * num(pr, "removed_fraction"),
                num(pr, "cosine"), num(pr, "top10_agreement"));
    rows.push_back(pr);
  }

  // A recovered student's row: judged, reloaded from its folder (bitwise, in the format the teacher came
  // in), its peak resident set, curve and cost.
  void record(const std::string& name, const distill::student_state& st, const std::vector<distill::curve_point>& curve,
              const nlohmann::ordered_json& cost, std::size_t rss) {
    row r{name};
    sy.judge(r, *st.to_encoder(sy.be));
    const auto folder = dir / name / "student";
    enc_t back(sy.be, checkpoint::read_hf_encoder_config(folder.string()), dtype::f32);
    checkpoint::load_hf_weights(back, folder.string());
    r.fig["reloads_bitwise"] = model::host_params(back) == st.params ? 1 : 0;
    r.fig["peak_resident_bytes"] = rss;
    if (!curve.empty()) r.fig["curve"] = curve;
    for (const auto& [k, v] : cost.items()) r.fig[k] = v;
    std::printf("%s: cosine %.4f, top-10 agreement %.4f, peak compute %s, %.1f s\n", r.name.c_str(), num(r, "cosine"),
                num(r, "top10_agreement"), report::human_bytes(num(r, "peak_compute_bytes")).c_str(), num(r, "wall_seconds"));
    rows.push_back(std::move(r));
  }
};

// One seed's table.md.
std::string seed_table(const study& sy, const std::vector<row>& rows) {
  const bool test = sy.test_pool.has_value();
  std::string md = "validation: " + sy.val_pool.protocol() + "\n\n| method | cosine | min cosine | top-10 agreement |" +
                   std::string(test ? " test cosine | test top-10 |" : "") +
                   " peak training | run peak | peak RSS | wall s | CPU s | GFLOPs | reloads |\n|---|---:|---:|---:|" +
                   std::string(test ? "---:|---:|" : "") + "---:|---:|---:|---:|---:|---:|---:|\n";
  for (const auto& r : rows) {
    auto f = [&](const char* key, const char* fmt) { return r.fig.contains(key) ? report::format(fmt, num(r, key)) : std::string("-"); };
    auto b = [&](const char* key) { return r.fig.contains(key) ? report::human_bytes(num(r, key)) : std::string("-"); };
    md += "| " + r.name + " | " + f("cosine", "%.4f") + " | " + f("min_cosine", "%.4f") + " | " + f("top10_agreement", "%.4f") +
          " | " + (test ? f("test_cosine", "%.4f") + " | " + f("test_top10_agreement", "%.4f") + " | " : "") +
          b("peak_compute_bytes") + " | " + b("run_peak_compute_bytes") + " | " + b("peak_resident_bytes") + " | " +
          f("wall_seconds", "%.1f") + " | " + f("cpu_seconds", "%.1f") + " | " +
          (r.fig.contains("train_flops") ? report::format("%.1f", num(r, "train_flops") / 1e9) : std::string("-")) + " | " +
          (r.fig.contains("reloads_bitwise") ? (num(r, "reloads_bitwise") > 0 ? "yes" : "NO") : "-") + " |\n";
  }
  return md;
}

// One seed's report.json and table.md in `dir`; `mmap_threshold` as pin_mmap_threshold left it (0: the
// allocator's own).
void write_seed(const study& sy, const fs::path& dir, std::uint64_t seed, const std::vector<row>& rows,
                std::size_t mmap_threshold) {
  const auto md = seed_table(sy, rows);
  std::printf("\n%s", md.c_str());
  nlohmann::ordered_json rep = {{"program", "minilm_compress"}, {"model", sy.st.model},  {"seed", seed},
                                {"val_protocol", sy.val_pool.protocol()}, {"budget", sy.total}, {"ratio", sy.st.o.ratio},
                                {"depth", sy.st.o.depth}};
  if (sy.test_pool) rep["test_protocol"] = sy.test_pool->protocol();
  rep["malloc_mmap_threshold"] = mmap_threshold;
  rep["methods"] = nlohmann::ordered_json::array();
  for (const auto& r : rows) {
    auto j = r.fig;
    j["name"] = r.name;
    rep["methods"].push_back(j);
  }
  write_text_atomic(dir / "report.json", rep.dump(2) + "\n");
  write_text_atomic(dir / "table.md", md);
}

// What a seed's rows depend on: the configuration less the seed count and first seed (a seed's own
// number names its folder).
nlohmann::ordered_json seed_key(const settings& st, const distill::budget& total) {
  auto key = config_json(st, total);
  key.erase("seeds");
  key.erase("seed");
  return key;
}

// A seed finished before under the same configuration (its seed_config.json, written after its
// report.json): its rows read back, so that a run of several seeds stopped at any moment and started
// again loses only the seed in progress.
std::optional<std::vector<row>> finished_seed(const fs::path& dir, const nlohmann::ordered_json& key) {
  const fs::path k = dir / "seed_config.json", r = dir / "report.json";
  if (!fs::exists(k) || !fs::exists(r) || nlohmann::ordered_json::parse(read_text(k)) != key) return std::nullopt;
  const auto rep = nlohmann::ordered_json::parse(read_text(r));  // held: the loop reads into it
  std::vector<row> rows;
  for (const auto& m : rep.at("methods")) {
    row x{m.at("name").get<std::string>(), m};
    x.fig.erase("name");
    rows.push_back(std::move(x));
  }
  return rows;
}

// Mean and sample standard deviation of every numeric figure over the seeds: report.json and table.md in --out.
void write_summary(const study& sy, const std::vector<std::pair<std::uint64_t, std::vector<row>>>& per_seed) {
  nlohmann::ordered_json methods = nlohmann::ordered_json::array();
  std::string md = std::to_string(per_seed.size()) + " seeds: mean +- sample sd; validation: " + sy.val_pool.protocol() +
                   "\n\n| method | cosine | top-10 agreement | peak training MiB | run peak MiB | wall s | GFLOPs |\n"
                   "|---|---:|---:|---:|---:|---:|---:|\n";
  for (std::size_t m = 0; m < per_seed.front().second.size(); ++m) {
    const auto& first = per_seed.front().second[m];
    nlohmann::ordered_json j = {{"name", first.name}};
    std::map<std::string, std::pair<double, double>> st;
    for (const auto& [key, v] : first.fig.items()) {
      if (!v.is_number()) continue;
      std::vector<double> xs;
      for (const auto& [seed, rows] : per_seed)
        if (rows[m].fig.contains(key)) xs.push_back(rows[m].fig.at(key).get<double>());
      if (xs.size() != per_seed.size()) continue;
      j[key] = studies::seed_figure(xs);
      st[key] = {j[key].at("mean").get<double>(), j[key].at("sd").get<double>()};
    }
    methods.push_back(j);
    auto pm = [&](const char* key, double scale, const char* fmt) {
      if (!st.count(key)) return std::string("-");
      return report::format(fmt, st[key].first / scale, st[key].second / scale);
    };
    md += "| " + first.name + " | " + pm("cosine", 1, "%.4f +- %.4f") + " | " + pm("top10_agreement", 1, "%.4f +- %.4f") +
          " | " + pm("peak_compute_bytes", 1 << 20, "%.1f +- %.1f") + " | " + pm("run_peak_compute_bytes", 1 << 20, "%.1f +- %.1f") +
          " | " + pm("wall_seconds", 1, "%.1f +- %.1f") + " | " + pm("train_flops", 1e9, "%.1f +- %.1f") + " |\n";
  }
  nlohmann::ordered_json rep = {{"program", "minilm_compress"}, {"val_protocol", sy.val_pool.protocol()}, {"methods", methods}};
  write_text_atomic(fs::path(sy.st.o.out) / "report.json", rep.dump(2) + "\n");
  write_text_atomic(fs::path(sy.st.o.out) / "table.md", md);
  std::printf("\n%s", md.c_str());
}

}  // namespace lwcl::experiments::minilm_detail

namespace lwcl::experiments {

// minilm_compress's whole run, from its command line (argv[0] the program); returns its exit code.
int minilm_main(int argc, char** argv) {
  using namespace minilm_detail;
  settings st;
  CLI::App app{"lwcl minilm_compress: all-MiniLM-L6-v2 pruned, then recovered layer-wise, end to end, or not at all"};
  app.option_defaults()->always_capture_default();
  add_options(app, st);
  CLI11_PARSE(app, argc, argv);
  std::setvbuf(stdout, nullptr, _IOLBF, 0);

  return guard_main([&] {
    try {
      timer all;
      const auto methods = methods_run(st);  // a bad --only refused before the study's set-up
      for (const auto& [flag, m] : {std::pair{"--kd-micro-batches", st.kd_micro_batches}, {"--e2e-micro-batches", st.e2e_micro_batches}})
        check(st.o.batch % m == 0, "minilm_compress: ", flag, " is ", m, ", expected a divisor of --batch ", st.o.batch);
      // Freed buffers handed back to the system, so that no method's resident peak holds an earlier one's.
      const std::size_t mmap_threshold = pin_mmap_threshold();
      const study sy(st);
      const int seeds = st.o.seeds;
      const auto ran = [&](const char* m) { return std::find(methods.begin(), methods.end(), m) != methods.end(); };
      const auto key = seed_key(st, sy.total);
      std::vector<std::pair<std::uint64_t, std::vector<row>>> per_seed;
      for (int k = 0; k < seeds; ++k) {
        const std::uint64_t s = st.o.seed + static_cast<std::uint64_t>(k);
        const fs::path dir = seeds > 1 ? fs::path(st.o.out) / ("seed_" + std::to_string(s)) : fs::path(st.o.out);
        if (seeds > 1) std::printf("\n==== minilm_compress: seed %llu (%d of %d)\n", static_cast<unsigned long long>(s), k + 1, seeds);
        if (seeds > 1) {
          if (auto rows = finished_seed(dir, key)) {
            std::printf("minilm_compress: seed %llu finished before with the same configuration: read back from %s\n",
                        static_cast<unsigned long long>(s), dir.string().c_str());
            per_seed.emplace_back(s, std::move(*rows));
            continue;
          }
        }
        seed_run run(sy, s, dir);
        if (ran("lwcl")) run.layerwise("lwcl", false);
        if (ran("lwcl_kd")) {
          cur::two_stage<> closing;
          closing.final_kd = true;
          run.layerwise("lwcl_kd", true, slot<key::curriculum>(closing));
        }
        if (ran("layerwise_no_curriculum"))
          run.layerwise("layerwise_no_curriculum", false,
                        slot<key::curriculum>(cur::curriculum<cur::front_to_back, cur::teacher_inputs>{}));
        if (ran("e2e_embedding")) run.end_to_end("e2e_embedding", distill::encoder_objective::embedding);
        if (ran("e2e_hidden")) run.end_to_end("e2e_hidden", distill::encoder_objective::hidden);
        if (st.o.curve_points > 0 && ran("e2e_embedding")) run.time_to_target("e2e_embedding");
        write_seed(sy, run.dir, s, run.rows, mmap_threshold);
        if (seeds > 1) write_text_atomic(dir / "seed_config.json", key.dump(2) + "\n");
        per_seed.emplace_back(s, std::move(run.rows));
      }
      write_text_atomic(fs::path(st.o.out) / "config.json", config_json(st, sy.total).dump(2) + "\n");
      if (seeds > 1) write_summary(sy, per_seed);
      std::printf("minilm_compress: wrote %s/ in %.0f s\n", st.o.out.c_str(), all.seconds());
      return 0;
    } catch (const nlohmann::json::exception& e) {
      fail("minilm_compress: ", e.what());
    }
  });
}

}  // namespace lwcl::experiments

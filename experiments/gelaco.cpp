// gelaco: evolutionary layer collapse of a checkpoint (GeLaCo, arXiv 2507.10059). Computes the teacher's
// hidden states on calibration batches once, searches collapse genomes with NSGA-II over (quality,
// compression) or with a genetic algorithm at a fixed number of removed layers, and writes:
//   front.json / front.png   the Pareto front (every evaluated candidate no other beats on both axes),
//                            its hypervolume against the stated reference point, the knee, and ShortGPT
//                            (block influence) and LaCo at the same removed layers, scored the same way;
//   students/<name>/         checkpoints of the chosen students (best found at each --remove count, the
//                            knee, and the baselines) with summary.json: the layer map for `recover`,
//                            spans, merge weights, the fitness terms, perplexity, parameters;
//   search.json              the population after each generation: rerun the same command to resume.
// The search is deterministic for a seed, whatever --threads.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "lwcl/backend/host/host.hpp"
#include "lwcl/core/fs.hpp"
#include "lwcl/core/program.hpp"
#include "lwcl/core/timer.hpp"
#include "lwcl/data/loader.hpp"
#include "lwcl/data/shards.hpp"
#include "lwcl/eval/held_out.hpp"
#include "lwcl/eval/perplexity.hpp"
#include "lwcl/policies/fitness/gelaco.hpp"
#include "lwcl/search/gelaco/fitness.hpp"
#include "lwcl/search/gelaco/merge.hpp"
#include "lwcl/search/gelaco/search.hpp"
#include "lwcl/model/checkpoint/hf.hpp"
#include "lwcl/model/generate.hpp"
#include "lwcl/model/layer_map.hpp"
#include "lwcl/model/tokenizer/folder.hpp"
#include "lwcl/policies/pruning/by_name.hpp"
#include "lwcl/prune/layer_collapse.hpp"
#include "lwcl/prune/plan.hpp"
#include "lwcl/report/plot.hpp"

#include "host_instances.hpp"
#include "studies/validators.hpp"

using namespace lwcl;
namespace fs = std::filesystem;

namespace {

using net_t = model::transformer<backend::cpu>;

struct settings {
  std::string model_dir, data_dir = "data/prepared", out;
  std::string fitness = "residual+kl", objective = "multi", compression = "layers";
  double kl_weight = 1.0, hv_quality_ref = -1.0, hv_compression_ref = 0.0;
  std::optional<double> fixed_alpha;
  std::vector<double> remove = {0.25, 0.5};
  gelaco::search_options search;
  gelaco::evaluator_options eval;
  int calib_batches = 2, batch = 8, seq = 0, eval_tokens = 32768, sample_tokens = 24;
  std::string prompt = "The";
  bool seed_baselines = false;  // ShortGPT's and LaCo's students take the first places of the first population
};

// One student written and measured: a name, its model, its layer map and what it was scored.
struct student {
  std::string name, method;
  std::unique_ptr<net_t> net;
  std::vector<index_t> boundaries;
  gelaco::measurements m;
  double quality = 0, compression = 0;
  std::optional<gelaco::decoded_genome> genome;
  nlohmann::ordered_json extra = nlohmann::ordered_json::object();
  // A baseline as a genome (its layer map's spans; merge weights that give its layers): what
  // --seed-baselines puts into the first population.
  std::vector<double> seed_genes;
};

// The spans of a layer map: each student layer that stands for two teacher layers or more.
std::vector<gelaco::collapse_span> spans_of(const std::vector<index_t>& boundaries) {
  std::vector<gelaco::collapse_span> spans;
  for (std::size_t i = 0; i + 1 < boundaries.size(); ++i)
    if (boundaries[i + 1] - boundaries[i] > 1) spans.push_back({boundaries[i], boundaries[i + 1] - 1});
  return spans;
}

// The genes of a student made of the teacher layers `kept`, one in each span of `boundaries` (ShortGPT's:
// merge weight 1 on the kept layer when it is not its span's first, 0 on the others, so the merge gives it),
// or with every merge weight 1 (LaCo's merge over each span) when `kept` is empty.
std::vector<double> baseline_genes(const std::vector<index_t>& boundaries, const std::vector<index_t>& kept, index_t L) {
  std::vector<double> alpha(static_cast<std::size_t>(L), kept.empty() ? 1.0 : 0.0);
  for (std::size_t i = 0; i < kept.size(); ++i)
    if (kept[i] != boundaries[i]) alpha[static_cast<std::size_t>(kept[i])] = 1.0;
  return gelaco::genes_of(gelaco::from_spans(spans_of(boundaries), std::move(alpha), L));
}

nlohmann::ordered_json terms(const gelaco::measurements& m) {
  return {{"residual_similarity", m.residual_similarity}, {"module_cosine", m.module_cosine}, {"kl", m.kl},
          {"kl_top_k", m.kl_top_k}};
}

nlohmann::ordered_json spans_json(const gelaco::decoded_genome& g) {
  auto out = nlohmann::ordered_json::array();
  for (const auto& s : g.spans) {
    std::vector<double> a;
    for (index_t k = s.first + 1; k <= s.last; ++k) a.push_back(g.alpha[static_cast<std::size_t>(k)]);
    out.push_back({{"first", s.first}, {"last", s.last}, {"alpha", a}});
  }
  return out;
}

// The knee of a front sorted by compression: with both axes scaled so the front runs from (0, 0) (its
// least compressed point) to (1, 1) (its most compressed, its quality loss scaled to 1), the interior point that
// gains the most compression over the quality it loses (the largest x - y).
std::size_t knee_of(const std::vector<gelaco::scored>& front) {
  const auto& a = front.front();
  const auto& b = front.back();
  const double dc = b.compression - a.compression, dq = a.quality - b.quality;
  if (front.size() < 3 || dc <= 0 || dq <= 0) return front.size() - 1;
  std::size_t best = 1;
  double most = -2;
  for (std::size_t i = 1; i + 1 < front.size(); ++i) {  // an interior point: neither end is a knee
    const double gain = (front[i].compression - a.compression) / dc - (a.quality - front[i].quality) / dq;
    if (gain > most) most = gain, best = i;
  }
  return best;
}

template <class Fitness>
int run(const settings& st, Fitness fit) {
  const auto cfg = checkpoint::read_hf_config(st.model_dir);
  backend::cpu be;
  net_t teacher(be, cfg, dtype::f32);
  checkpoint::load_hf_weights(teacher, st.model_dir);
  const index_t L = cfg.n_layers(), T = st.seq ? st.seq : cfg.max_seq;
  check(L >= 2, "gelaco: the teacher has ", L, " layer; collapsing needs at least 2");
  const fs::path out = st.out.empty() ? fs::path("runs/gelaco") : fs::path(st.out);
  fs::create_directories(out);

  // Calibration batches from the training split, the held-out sample from the validation split.
  const data::shard train_shard((fs::path(st.data_dir) / "train.bin").string());
  const data::batch_loader loader(train_shard, st.batch, T, 0x9e3779b9ULL + st.search.seed);
  gelaco::calibration_set cal;
  cal.B = st.batch, cal.T = T;
  for (int b = 0; b < st.calib_batches; ++b) {
    std::vector<std::int32_t> ids, targets;
    loader.batch(static_cast<std::uint64_t>(b), ids, targets);
    cal.ids.insert(cal.ids.end(), ids.begin(), ids.end());
  }
  const auto val = eval::held_out_split(st.data_dir, "validation", T, st.eval_tokens);

  std::printf("gelaco: %s (%s, %lld layers, %lld parameters); fitness %s, %s search, compression in %s, seed %llu, "
              "%d threads\n",
              st.model_dir.c_str(), std::string(model::family_name(cfg.fam)).c_str(), static_cast<long long>(L),
              static_cast<long long>(teacher.num_parameters()), std::string(Fitness::name).c_str(),
              st.search.multi_objective ? "NSGA-II" : "single-objective GA", st.compression.c_str(),
              static_cast<unsigned long long>(st.search.seed), st.search.threads);
  timer clock;
  gelaco::evaluator<backend::cpu> ev(teacher, cal, st.eval);
  const double teacher_seconds = clock.seconds();
  std::printf("teacher pass: %lld calibration tokens in %.2f s; %s\n", static_cast<long long>(cal.ids.size()), teacher_seconds,
              ev.feature_stats().summary().c_str());

  // The removed counts at which students are written, and the baselines at each: scored by the same
  // evaluator before the search, so that --seed-baselines can start the search from them.
  std::vector<index_t> counts;
  for (double r : st.remove) {
    const auto n = std::clamp<index_t>(static_cast<index_t>(std::llround(r * static_cast<double>(L))), 1, L - 1);
    if (std::find(counts.begin(), counts.end(), n) == counts.end()) counts.push_back(n);
  }
  std::vector<student> baselines;
  const auto score_model = [&](student& x) {
    x.m = ev.measure(*x.net, x.boundaries, fit.needs());
    x.quality = fit.quality(x.m);
    // Compression counts the teacher layers each student layer stands for beyond its first: the spans of
    // its layer map, as a genome of them would (the weights do not enter).
    const auto map = gelaco::from_spans(spans_of(x.boundaries), std::vector<double>(static_cast<std::size_t>(L), 0.0), L);
    x.compression = gelaco::compression_of(map, cfg, st.search.compression, T);
  };
  for (index_t n : counts) {
    // ShortGPT: the n layers of least block influence removed (lwcl's block_influence criterion).
    policies::pruning::named_options no;
    no.criterion = "block_influence";
    no.alloc.gran = prune::parse_granularity("layers");
    no.alloc.ratio = static_cast<double>(n) / static_cast<double>(L);
    no.calib_batches = st.calib_batches;
    no.quiet = true;
    auto cut = policies::pruning::prune_named(teacher, loader, no);
    student sg;
    sg.name = "shortgpt_remove" + std::to_string(n);
    sg.method = "shortgpt";
    sg.net = std::move(cut.student);
    sg.boundaries = model::boundaries_of_kept_layers(cut.kept, L);
    sg.seed_genes = baseline_genes(sg.boundaries, cut.kept, L);
    score_model(sg);
    baselines.push_back(std::move(sg));
    // LaCo: lwcl's layer collapse (one follower per merge, top down) at the highest similarity threshold
    // that removes n layers.
    std::unique_ptr<net_t> laco;
    std::vector<prune::collapse_step> log;
    double used = 0;
    for (double th = 0.99; th >= -1.0 && !laco; th -= 0.01) {
      prune::collapse_options o;
      o.merge = 1;
      o.threshold = th;
      o.target_layers = L - n;
      log.clear();
      auto cand = prune::layer_collapse(teacher, std::vector<std::int32_t>(cal.ids.begin(), cal.ids.begin() + cal.B * cal.T),
                                        cal.B, cal.T, o, &log);
      if (cand->config().n_layers() == L - n) laco = std::move(cand), used = th;
    }
    if (!laco) continue;
    const auto kept = prune::kept_layers(log, L);
    student lc;
    lc.name = "laco_remove" + std::to_string(n);
    lc.method = "laco";
    lc.net = std::move(laco);
    lc.boundaries = model::boundaries_of_kept_layers(kept, L);
    lc.extra["laco_threshold"] = used;
    lc.seed_genes = baseline_genes(lc.boundaries, {}, L);
    score_model(lc);
    baselines.push_back(std::move(lc));
  }

  auto so = st.search;
  if (st.seed_baselines)
    for (const auto& b : baselines) {
      so.initial.push_back(b.seed_genes);
      std::printf("first population: %s as %s\n", b.name.c_str(), gelaco::decode(b.seed_genes, L).key().c_str());
    }
  so.checkpoint = out / "search.json";
  if (fs::exists(so.checkpoint)) std::printf("resuming from %s\n", so.checkpoint.string().c_str());
  timer search_clock;
  const gelaco::searcher<backend::cpu, Fitness>* running = nullptr;  // the search, for the progress line
  so.on_generation = [&](index_t g, index_t evals) {
    const double secs = search_clock.seconds();
    if (g == so.generations || g % std::max<index_t>(1, so.generations / 20) == 0)
      std::printf("generation %lld/%lld: %lld evaluations, %.1f per second, %.0f s\n", static_cast<long long>(g),
                  static_cast<long long>(so.generations), static_cast<long long>(evals),
                  static_cast<double>(evals - static_cast<index_t>(running->resumed_evaluations())) / secs, secs);
  };
  gelaco::searcher<backend::cpu, Fitness> search(ev, fit, so);
  running = &search;
  search.run();
  const double search_seconds = search_clock.seconds();
  // This process's share: a resumed search counts only the evaluations it made itself.
  const auto own_evaluations = search.evaluations() - search.resumed_evaluations();
  const double per_second = search_seconds > 0 ? static_cast<double>(own_evaluations) / search_seconds : 0.0;
  std::vector<gelaco::scored> all;
  for (const auto& [k, v] : search.archive()) all.push_back(v);
  const auto front = gelaco::pareto_front(all);
  const double hv = gelaco::hypervolume(front, st.hv_quality_ref, st.hv_compression_ref);
  const std::size_t knee = knee_of(front);
  std::printf("search: %zu evaluations (%zu answered by the cache), %zu of them in this run's %.1f s, %.2f per second; front of "
              "%zu points, hypervolume %.6f against (quality %g, compression %g)\n",
              search.evaluations(), search.cache_hits(), own_evaluations, search_seconds, per_second, front.size(), hv,
              st.hv_quality_ref, st.hv_compression_ref);

  // The students: the best candidate found at each removed count, the knee, then ShortGPT and LaCo.
  std::vector<student> students;
  const auto from_genome = [&](const gelaco::scored& c, std::string name) {
    student x;
    x.name = std::move(name);
    x.method = "gelaco";
    x.net = gelaco::collapse(teacher, c.genome);
    x.boundaries = c.genome.boundaries;
    x.m = c.m;
    x.quality = c.quality;
    x.compression = c.compression;
    x.genome = c.genome;
    return x;
  };
  for (index_t n : counts) {
    const gelaco::scored* best = nullptr;
    for (const auto& c : all)
      if (c.genome.removed_layers() == n && (!best || c.quality > best->quality)) best = &c;
    if (!best) {
      std::printf("no candidate with %lld layers removed was evaluated\n", static_cast<long long>(n));
      continue;
    }
    students.push_back(from_genome(*best, "gelaco_remove" + std::to_string(n)));
  }
  if (!front.empty()) students.push_back(from_genome(front[knee], "gelaco_knee"));
  for (auto& b : baselines) students.push_back(std::move(b));

  // Perplexity, a greedy sample, and the checkpoints.
  const auto teacher_ppl = eval::perplexity(teacher, val);
  std::optional<tokenizer::byte_bpe> tok;
  if (st.sample_tokens > 0) tok = tokenizer::byte_bpe_of_folder(st.model_dir);
  const auto sample = [&](const net_t& net) -> std::string {
    if (!tok) return "";
    const auto ids = tok->encode(st.prompt);
    if (ids.empty()) return "";
    model::sampling sm;
    sm.temperature = 0;
    sm.vocab = static_cast<index_t>(tok->vocab_size());
    const auto n = std::min<index_t>(st.sample_tokens, net.config().max_seq - static_cast<index_t>(ids.size()));
    if (n < 1) return "";
    return tok->decode(model::generate(net, ids, n, sm).tokens);
  };
  const std::string teacher_text = sample(teacher);
  std::printf("\nteacher: perplexity %.3f (%s)\n  %s%s\n", teacher_ppl.perplexity(), teacher_ppl.protocol().c_str(),
              st.prompt.c_str(), teacher_text.c_str());
  std::printf("\n| student | method | layers | removed | compression | quality | residual sim. | KL | perplexity |\n"
              "|---|---|---|---|---|---|---|---|---|\n");
  nlohmann::ordered_json written = nlohmann::ordered_json::array();
  for (auto& x : students) {
    const auto ppl = eval::perplexity(*x.net, val);
    const std::string text = sample(*x.net);
    const auto dir = out / "students" / x.name;
    checkpoint::save_hf(*x.net, (dir / "model").string(), {std::nullopt, st.model_dir});
    nlohmann::ordered_json sj = {{"model", st.model_dir},
                                 {"method", x.method},
                                 {"criterion", x.method == "shortgpt" ? "block_influence" : x.method},
                                 {"boundaries", x.boundaries},
                                 {"layers_removed", L - x.net->config().n_layers()},
                                 {"compression", x.compression},
                                 {"compression_measure", st.compression},
                                 {"fitness", std::string(Fitness::name)},
                                 {"quality", x.quality},
                                 {"terms", terms(x.m)},
                                 {"parameters_before", teacher.num_parameters()},
                                 {"parameters_after", x.net->num_parameters()},
                                 {"perplexity_before", teacher_ppl.perplexity()},
                                 {"perplexity_after", ppl.perplexity()},
                                 {"perplexity_protocol", ppl.protocol()},
                                 {"greedy_sample", {{"prompt", st.prompt}, {"text", text}}}};
    if (x.genome) {
      sj["key"] = x.genome->key();
      sj["spans"] = spans_json(*x.genome);
    }
    for (const auto& [k, v] : x.extra.items()) sj[k] = v;
    write_text_atomic(dir / "summary.json",
                      sj.dump(2, ' ', false, nlohmann::ordered_json::error_handler_t::replace) + "\n");
    // The KL the fitness measured (top-K when it reads that one); "-" when it reads none.
    const unsigned nd = fit.needs();
    char kl[32] = "-";
    if (nd & gelaco::need::kl_top_k) std::snprintf(kl, sizeof kl, "%.4f (top-K)", x.m.kl_top_k);
    else if (nd & gelaco::need::kl) std::snprintf(kl, sizeof kl, "%.4f", x.m.kl);
    std::printf("| %s | %s | %lld | %lld | %.3f | %.4f | %.4f | %s | %.3f |\n", x.name.c_str(), x.method.c_str(),
                static_cast<long long>(x.net->config().n_layers()), static_cast<long long>(L - x.net->config().n_layers()),
                x.compression, x.quality, x.m.residual_similarity, kl, ppl.perplexity());
    written.push_back({{"name", x.name}, {"method", x.method}, {"compression", x.compression}, {"quality", x.quality},
                       {"terms", terms(x.m)}, {"perplexity", ppl.perplexity()}, {"greedy_sample", text}});
  }
  for (const auto& w : written)
    std::printf("\n%s: %s%s\n", w["name"].get<std::string>().c_str(), st.prompt.c_str(),
                w["greedy_sample"].get<std::string>().c_str());

  // front.json and front.png.
  auto fj = nlohmann::ordered_json::array();
  for (const auto& p : front)
    fj.push_back({{"key", p.key}, {"layers_removed", p.genome.removed_layers()}, {"compression", p.compression},
                  {"quality", p.quality}, {"terms", terms(p.m)}, {"spans", spans_json(p.genome)},
                  {"boundaries", p.genome.boundaries}});
  const nlohmann::ordered_json summary = {
      {"model", st.model_dir},
      {"fitness", std::string(Fitness::name)},
      {"kl_weight", st.kl_weight},
      {"top_k", ev.top_k()},
      {"objective", st.objective},
      {"compression_measure", st.compression},
      {"seed", so.seed},
      {"seed_baselines", st.seed_baselines},
      {"population", so.population},
      {"generations", so.generations},
      {"crossover", so.crossover},
      {"eta_c", so.eta_c},
      {"mutation", search.options().mutation},
      {"eta_m", so.eta_m},
      {"fixed_alpha", st.fixed_alpha ? nlohmann::ordered_json(*st.fixed_alpha) : nlohmann::ordered_json()},
      {"threads", so.threads},
      {"calibration_tokens", cal.ids.size()},
      {"teacher_pass_seconds", teacher_seconds},
      {"evaluations", search.evaluations()},
      {"cache_hits", search.cache_hits()},
      {"resumed_from_evaluations", search.resumed_evaluations()},
      {"search_seconds", search_seconds},
      {"evaluations_per_second", per_second},
      {"hypervolume", hv},
      {"hypervolume_reference", {{"quality", st.hv_quality_ref}, {"compression", st.hv_compression_ref}}},
      {"knee", front.empty() ? nlohmann::ordered_json() : nlohmann::ordered_json(front[knee].key)},
      {"teacher_perplexity", teacher_ppl.perplexity()},
      {"teacher_greedy_sample", teacher_text},
      {"front", fj},
      {"students", written}};
  write_text_atomic(out / "front.json", summary.dump(2, ' ', false, nlohmann::ordered_json::error_handler_t::replace) + "\n");

  report::chart c;
  fs::path shown = fs::path(st.model_dir).lexically_normal();
  if (shown.filename().empty()) shown = shown.parent_path();
  if (shown.filename() == "model" && shown.has_parent_path()) shown = shown.parent_path();  // <run>/model: the run's name
  c.title = "GeLaCo front: " + shown.filename().string() + " (" + std::string(Fitness::name) + ")";
  c.x_label = "compression (" + st.compression + " removed)";
  c.y_label = "quality (" + std::string(Fitness::name) + ")";
  report::series evaluated{"evaluated", {}, {}, report::rgb{190, 190, 190}, {}, {}};
  evaluated.points = true;
  for (const auto& p : all) evaluated.x.push_back(p.compression), evaluated.y.push_back(p.quality);
  report::series fr{"front", {}, {}, std::nullopt, {}, {}};
  for (const auto& p : front) fr.x.push_back(p.compression), fr.y.push_back(p.quality);
  c.lines = {evaluated, fr};
  if (!front.empty()) c.lines.push_back({"knee", {front[knee].compression}, {front[knee].quality}, std::nullopt, {}, {}});
  for (const char* method : {"shortgpt", "laco"}) {
    report::series b{method == std::string("laco") ? "LaCo" : "ShortGPT", {}, {}, std::nullopt, {}, {}};
    b.points = true;
    for (const auto& x : students)
      if (x.method == method) b.x.push_back(x.compression), b.y.push_back(x.quality);
    if (!b.x.empty()) c.lines.push_back(b);
  }
  // The y axis spans the front and the baselines (candidates far below them are clipped).
  double lo = 0, hi = 0;
  bool any = false;
  for (std::size_t i = 1; i < c.lines.size(); ++i)
    for (double y : c.lines[i].y) lo = any ? std::min(lo, y) : y, hi = any ? std::max(hi, y) : y, any = true;
  if (any) c.y_min = lo - 0.15 * std::max(hi - lo, 1e-6);
  report::write_png(c, out / "front.png");
  std::printf("\ngelaco: wrote %s, %s and %zu students under %s\n", (out / "front.json").string().c_str(),
              (out / "front.png").string().c_str(), students.size(), (out / "students").string().c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"lwcl gelaco: evolutionary layer collapse with parametrised merging (Pareto front, students, baselines)"};
  settings st;
  int population = 200, generations = 150, threads = 2;
  std::uint64_t seed = 1;
  double alpha = -1;
  app.add_option("--model", st.model_dir, "teacher checkpoint folder (config.json, model.safetensors, tokenizer)")->required();
  app.add_option("--data", st.data_dir, "prepared data (train.bin for calibration, validation.bin for perplexity)");
  app.add_option("--out", st.out, "output folder (default runs/gelaco); a search.json there is resumed");
  app.add_option("--fitness", st.fitness, "residual+kl (default), residual, kl, or module")
      ->check(CLI::IsMember({"residual+kl", "residual", "kl", "module"}));
  app.add_option("--kl-weight", st.kl_weight, "residual+kl: quality = similarity - weight x KL")->check(studies::non_negative);
  bool top_k = false;
  index_t k = 512;
  app.add_flag("--top-k-kl", top_k, "the KL over the teacher's top K tokens at each position instead of the full KL");
  app.add_option("--top-k", k, "K of the top-K KL")->check(studies::positive);
  app.add_option("--objective", st.objective, "multi (NSGA-II over quality and compression) or single (GA at --target)")
      ->check(CLI::IsMember({"multi", "single"}));
  index_t target = 0;
  app.add_option("--target", target, "single: layers to remove (default: a quarter of them)")->check(studies::non_negative);
  app.add_option("--compression", st.compression, "the compression axis: layers, parameters or flops removed")
      ->check(CLI::IsMember({"layers", "parameters", "flops"}));
  app.add_option("--population", population, "individuals (a multiple of 4)")->check(studies::positive);
  app.add_option("--generations", generations, "generations after the first")->check(studies::non_negative);
  app.add_option("--seed", seed, "the search's seed (and the calibration batches')");
  app.add_option("--threads", threads, "evaluations in parallel")->check(studies::positive);
  app.add_option("--crossover", st.search.crossover, "SBX crossover probability (default 0.9)")->check(studies::within(0.0, 1.0));
  app.add_option("--eta-c", st.search.eta_c, "SBX distribution index (default 20)")->check(studies::positive);
  app.add_option("--mutation", st.search.mutation, "polynomial mutation probability per gene (default 1 / (3 L))")
      ->check(studies::within(0.0, 1.0));
  app.add_option("--eta-m", st.search.eta_m, "polynomial mutation distribution index (default 20)")->check(studies::positive);
  app.add_option("--alpha", alpha, "fix every merge weight to this (1: LaCo's merge, 0: dropping) instead of searching them")
      ->check(studies::within(0.0, 1.0));
  app.add_option("--remove", st.remove, "fractions of the layers at which the best student is written (default 0.25 0.5)");
  app.add_option("--hv-quality-ref", st.hv_quality_ref, "the hypervolume's reference quality (default -1)");
  app.add_option("--calib-batches", st.calib_batches, "calibration batches from the training split")->check(studies::positive);
  app.add_option("--batch", st.batch, "sequences per calibration batch")->check(studies::positive);
  app.add_option("--seq", st.seq, "tokens per sequence (default: the model's max_seq)")->check(studies::non_negative);
  app.add_option("--eval-tokens", st.eval_tokens, "predicted tokens of the held-out perplexity sample")->check(studies::positive);
  app.add_option("--sample-tokens", st.sample_tokens, "tokens of each student's greedy sample (0: none)")
      ->check(studies::non_negative);
  app.add_option("--prompt", st.prompt, "the greedy samples' prompt");
  app.add_flag("--seed-baselines", st.seed_baselines, "start the search from ShortGPT's and LaCo's students at each --remove "
               "count (their layer maps as genomes, in the first population's first places)");
  CLI11_PARSE(app, argc, argv);
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  return lwcl::guard_main([&] {
    st.search.multi_objective = st.objective == "multi";
    st.search.population = population;
    st.search.generations = generations;
    st.search.seed = seed;
    st.search.threads = threads;
    st.search.compression = st.compression == "layers"       ? gelaco::compression_measure::layers
                            : st.compression == "parameters" ? gelaco::compression_measure::parameters
                                                             : gelaco::compression_measure::flops;
    if (alpha >= 0) st.fixed_alpha = alpha, st.search.fixed_alpha = alpha;
    st.eval.top_k = k;
    st.eval.modules = st.fitness == "module";
    if (!st.search.multi_objective) {
      const auto L = checkpoint::read_hf_config(st.model_dir).n_layers();
      st.search.target_removed = target ? target : std::max<index_t>(1, L / 4);
      st.remove = {static_cast<double>(st.search.target_removed) / static_cast<double>(L)};
    }
    if (st.fitness == "residual") return run(st, policies::fitness::residual_similarity{});
    if (st.fitness == "kl") return run(st, policies::fitness::kl_divergence{top_k});
    if (st.fitness == "module") return run(st, policies::fitness::module_cosine{});
    return run(st, policies::fitness::residual_and_kl{st.kl_weight, top_k});
  });
}

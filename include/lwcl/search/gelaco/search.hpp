#pragma once
// GeLaCo's search over collapse genomes (gelaco/genome.hpp), scored by an evaluator (gelaco/fitness.hpp)
// through a fitness policy:
//   multi-objective  NSGA-II (pagmo2's nsga2, one generation per call) over (quality, compression), both
//                    maximised; compression is the share of layers, parameters or FLOPs removed.
//   single-objective a genetic algorithm for the best quality with exactly `target_removed` layers
//                    removed: binary tournaments under Deb's feasibility rules (fewer layers off the
//                    target first, then quality), pagmo2's SBX crossover and polynomial mutation, and
//                    (mu + lambda) survival. pagmo2's own sga evaluates one individual at a time, this
//                    loop evaluates each generation's offspring as one parallel batch.
// Every generation is seeded with seed + generation, evaluations run on `threads` threads (each
// single-threaded inside, so a score never depends on which thread made it) behind a fitness cache keyed
// on the genome's canonical form, and the population is checkpointed after each generation (JSON, through
// atomic_file), so a killed search resumed from its checkpoint ends with bitwise the same front.

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <mutex>
#include <numeric>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>
#include <pagmo/algorithms/nsga2.hpp>
#include <pagmo/batch_evaluators/member_bfe.hpp>
#include <pagmo/bfe.hpp>
#include <pagmo/population.hpp>
#include <pagmo/problem.hpp>
#include <pagmo/utils/genetic_operators.hpp>
#include <pagmo/utils/hypervolume.hpp>
#include <pagmo/utils/multi_objective.hpp>

#include "lwcl/core/error.hpp"
#include "lwcl/core/fs.hpp"
#include "lwcl/search/gelaco/fitness.hpp"
#include "lwcl/search/gelaco/genome.hpp"
#include "lwcl/prune/plan.hpp"

namespace lwcl::gelaco {

enum class compression_measure { layers, parameters, flops };

inline std::string_view compression_name(compression_measure c) {
  switch (c) {
    case compression_measure::layers: return "layers";
    case compression_measure::parameters: return "parameters";
    case compression_measure::flops: return "flops";
  }
  return "?";
}

struct search_options {
  bool multi_objective = true;
  compression_measure compression = compression_measure::layers;
  index_t population = 200;
  index_t generations = 150;     // evaluations: population x (generations + 1), before the cache
  index_t target_removed = 1;    // single-objective: layers to remove
  double crossover = 0.9, eta_c = 20;
  double mutation = -1, eta_m = 20;  // mutation < 0: 1 / (3 L) per gene
  std::uint64_t seed = 1;
  int threads = 1;
  std::optional<double> fixed_alpha;  // every merged layer weighted by this; the alpha genes are ignored
  std::filesystem::path checkpoint;   // empty: no checkpoint
  // Genomes that take the first places of the first population (a baseline's, from genes_of); the rest
  // are drawn at random as without them.
  std::vector<std::vector<double>> initial;
  std::function<void(index_t generation, index_t evaluations)> on_generation;  // progress

  void validate(index_t teacher_layers) const {
    check(population >= 8 && population % 4 == 0, "gelaco: a population of ", population,
          ", expected a multiple of 4, at least 8 (NSGA-II's tournaments pair it off)");
    check(generations >= 0, "gelaco: ", generations, " generations");
    check(multi_objective || (target_removed >= 1 && target_removed < teacher_layers), "gelaco: remove ", target_removed,
          " of ", teacher_layers, " layers, expected 1 to ", teacher_layers - 1);
    check(crossover >= 0 && crossover <= 1 && (mutation < 0 || mutation <= 1), "gelaco: crossover ", crossover,
          " and mutation ", mutation, " probabilities must lie in [0, 1]");
    check(crossover < 1, "gelaco: crossover probability ", crossover, ", expected below 1 (pagmo2's NSGA-II)");
    check(eta_c >= 1 && eta_c < 100 && eta_m >= 1 && eta_m < 100, "gelaco: distribution indices eta_c ", eta_c, " and eta_m ",
          eta_m, " must lie in [1, 100) (pagmo2's NSGA-II)");
    check(threads >= 1, "gelaco: ", threads, " threads");
    check(!fixed_alpha || (*fixed_alpha >= 0 && *fixed_alpha <= 1), "gelaco: fixed alpha ", fixed_alpha.value_or(0),
          " outside [0, 1]");
    check(static_cast<index_t>(initial.size()) <= population, "gelaco: ", initial.size(),
          " initial genomes for a population of ", population);
    for (const auto& x : initial) decode(x, teacher_layers);  // names a bad gene or a wrong length
  }
};

// One evaluated candidate.
struct scored {
  std::vector<double> genes;  // the first genes that made this student
  std::string key;
  decoded_genome genome;
  measurements m;
  double quality = 0, compression = 0;
};

// The share of the teacher a student of genome g removes, by `c`: layers, parameters (of the whole
// model, prune::model_parameters), or forward FLOPs per token at sequence length T
// (prune::flops_per_token).
inline double compression_of(const decoded_genome& g, const model::model_config& cfg, compression_measure c, index_t T) {
  if (c == compression_measure::layers) return static_cast<double>(g.removed_layers()) / static_cast<double>(g.teacher_layers);
  double removed = 0;
  for (const auto& s : g.spans)
    for (index_t k = s.first + 1; k <= s.last; ++k)
      removed += c == compression_measure::parameters
                     ? static_cast<double>(prune::layer_parameters(cfg, cfg.layers[static_cast<std::size_t>(k)]))
                     : prune::layer_flops_per_token(cfg, k, T);
  const double whole = c == compression_measure::parameters ? static_cast<double>(prune::model_parameters(cfg))
                                                            : prune::flops_per_token(cfg, T);
  return removed / whole;
}

namespace search_detail {

inline nlohmann::json measurements_json(const measurements& m) {
  return {{"residual_similarity", m.residual_similarity}, {"module_cosine", m.module_cosine}, {"kl", m.kl},
          {"kl_top_k", m.kl_top_k}};
}

}  // namespace search_detail

// The search: evaluates genomes through the cache and runs the generations.
template <class Backend, fitness_policy Fitness, cache::feature_store Store = cache::host_store<>>
class searcher {
 public:
  searcher(const evaluator<Backend, Store>& ev, Fitness fit, search_options o) : ev_(ev), fit_(fit), opt_(std::move(o)) {
    L_ = ev_.teacher().config().n_layers();
    opt_.validate(L_);
    if (opt_.mutation < 0) opt_.mutation = 1.0 / (3.0 * static_cast<double>(L_));
  }

  // The decoded genome of genes x, the fixed alpha applied.
  decoded_genome decode_genes(const std::vector<double>& x) const {
    decoded_genome d = decode(x, L_);
    if (opt_.fixed_alpha) std::fill(d.alpha.begin(), d.alpha.end(), *opt_.fixed_alpha);
    return d;
  }

  // Scores of many genomes, evaluated on opt_.threads threads; results in input order.
  std::vector<scored> evaluate(const std::vector<std::vector<double>>& xs) {
    std::vector<scored> out(xs.size());
    std::vector<std::size_t> todo;
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (std::size_t i = 0; i < xs.size(); ++i) {
        out[i].genes = xs[i];
        out[i].genome = decode_genes(xs[i]);
        out[i].key = out[i].genome.key();
        if (auto it = cache_.find(out[i].key); it != cache_.end()) {
          out[i] = it->second;
          ++cache_hits_;
        } else {
          todo.push_back(i);
        }
      }
    }
    // Distinct keys once each.
    std::map<std::string, std::size_t> first;
    std::vector<std::size_t> work;
    for (std::size_t i : todo)
      if (first.emplace(out[i].key, i).second) work.push_back(i);
    std::atomic<std::size_t> next{0};
    std::vector<std::string> errors(static_cast<std::size_t>(opt_.threads));
    const auto run = [&](int w) {
      backend::detail::single_threaded one;
      for (std::size_t j; (j = next.fetch_add(1)) < work.size();) {
        auto& s = out[work[j]];
        try {
          s.m = ev_.measure(s.genome, fit_.needs());
        } catch (const std::exception& e) {
          errors[static_cast<std::size_t>(w)] = e.what();
          next = work.size();
          return;
        }
        s.quality = fit_.quality(s.m);
        s.compression = compression_of(s.genome, ev_.teacher().config(), opt_.compression, ev_.calibration().T);
      }
    };
    const int n = static_cast<int>(std::min<std::size_t>(static_cast<std::size_t>(opt_.threads), std::max<std::size_t>(work.size(), 1)));
    std::vector<std::thread> pool;
    for (int w = 1; w < n; ++w) pool.emplace_back(run, w);
    run(0);
    for (auto& t : pool) t.join();
    for (const auto& e : errors) check(e.empty(), e);
    std::lock_guard<std::mutex> lock(mu_);
    for (std::size_t i : work) cache_.emplace(out[i].key, out[i]);
    evaluations_ += work.size();
    for (std::size_t i : todo) out[i] = cache_.at(out[i].key);
    return out;
  }

  std::size_t evaluations() const { return evaluations_; }
  // Evaluations the checkpoint run() resumed from had made (0 for a fresh search).
  std::size_t resumed_evaluations() const { return resumed_evaluations_; }
  std::size_t cache_hits() const { return cache_hits_; }
  const std::map<std::string, scored>& archive() const { return cache_; }
  const search_options& options() const { return opt_; }
  index_t teacher_layers() const { return L_; }

  // Objectives pagmo minimises: (-quality, -compression).
  static std::vector<double> objectives(const scored& s) { return {-s.quality, -s.compression}; }

  // The genomes of the population after the last generation run.
  const std::vector<std::vector<double>>& population() const { return pop_x_; }
  index_t generation() const { return generation_; }

  // Reads the checkpoint when there is one (run() does it first); false when there is none.
  bool resume_from_checkpoint() {
    if (opt_.checkpoint.empty() || !std::filesystem::exists(opt_.checkpoint)) return false;
    load_checkpoint();
    resumed_evaluations_ = evaluations_;
    return true;
  }

  // Runs the search to opt_.generations, from the checkpoint when there is one.
  void run() {
    if (pop_x_.empty()) resume_from_checkpoint();
    if (pop_x_.empty()) {
      std::mt19937 rng(static_cast<std::uint32_t>(opt_.seed));
      std::uniform_real_distribution<double> u(0.0, 1.0);
      pop_x_.assign(static_cast<std::size_t>(opt_.population), std::vector<double>(static_cast<std::size_t>(gene_count(L_))));
      for (auto& x : pop_x_)
        for (auto& g : x) g = u(rng);
      std::copy(opt_.initial.begin(), opt_.initial.end(), pop_x_.begin());
      evaluate(pop_x_);
      generation_ = 0;
      save_checkpoint();
    }
    while (generation_ < opt_.generations) {
      if (opt_.multi_objective)
        nsga2_generation();
      else
        ga_generation();
      ++generation_;
      save_checkpoint();
      if (opt_.on_generation) opt_.on_generation(generation_, static_cast<index_t>(evaluations_));
    }
  }

 private:
  // pagmo's view of the search: fitness and batch fitness through the searcher's cache.
  struct problem {
    searcher* s = nullptr;
    std::vector<double> fitness(const std::vector<double>& x) const { return objectives(s->evaluate({x}).front()); }
    std::vector<double> batch_fitness(const std::vector<double>& dvs) const {
      const std::size_t n = static_cast<std::size_t>(gene_count(s->L_));
      std::vector<std::vector<double>> xs;
      for (std::size_t i = 0; i < dvs.size(); i += n) xs.emplace_back(dvs.begin() + static_cast<std::ptrdiff_t>(i),
                                                                   dvs.begin() + static_cast<std::ptrdiff_t>(i + n));
      std::vector<double> f;
      for (const auto& r : s->evaluate(xs))
        for (double v : objectives(r)) f.push_back(v);
      return f;
    }
    std::pair<std::vector<double>, std::vector<double>> get_bounds() const {
      const auto n = static_cast<std::size_t>(gene_count(s->L_));
      return {std::vector<double>(n, 0.0), std::vector<double>(n, 1.0)};
    }
    std::vector<double>::size_type get_nobj() const { return 2; }
    std::string get_name() const { return "lwcl gelaco"; }
  };

  void nsga2_generation() {
    pagmo::problem prob{problem{this}};
    pagmo::population pop(prob, 0u, static_cast<unsigned>(opt_.seed));
    const auto scores = evaluate(pop_x_);
    for (std::size_t i = 0; i < pop_x_.size(); ++i) pop.push_back(pop_x_[i], objectives(scores[i]));
    pagmo::nsga2 algo(1u, opt_.crossover, opt_.eta_c, opt_.mutation, opt_.eta_m);
    algo.set_seed(static_cast<unsigned>(opt_.seed + static_cast<std::uint64_t>(generation_) + 1));
    algo.set_bfe(pagmo::bfe{pagmo::member_bfe{}});
    pop = algo.evolve(pop);
    pop_x_ = pop.get_x();
  }

  // Deb's rules: fewer layers off the target first, then the better quality, then the lower index.
  bool better(const scored& a, std::size_t ia, const scored& b, std::size_t ib) const {
    const auto off = [&](const scored& s) { return std::abs(s.genome.removed_layers() - opt_.target_removed); };
    if (off(a) != off(b)) return off(a) < off(b);
    if (a.quality != b.quality) return a.quality > b.quality;
    return ia < ib;
  }

  void ga_generation() {
    pagmo::detail::random_engine_type rng(static_cast<std::uint32_t>(opt_.seed + static_cast<std::uint64_t>(generation_) + 1));
    const auto parents = evaluate(pop_x_);
    const std::size_t n = pop_x_.size();
    std::uniform_int_distribution<std::size_t> pick(0, n - 1);
    const auto tournament = [&] {
      const std::size_t a = pick(rng), b = pick(rng);
      return better(parents[a], a, parents[b], b) ? a : b;
    };
    const auto bounds = std::make_pair(std::vector<double>(pop_x_[0].size(), 0.0), std::vector<double>(pop_x_[0].size(), 1.0));
    std::vector<std::vector<double>> children;
    while (children.size() < n) {
      const std::size_t p1 = tournament(), p2 = tournament();  // in this order, whatever the compiler
      const auto [c1, c2] = pagmo::sbx_crossover(pop_x_[p1], pop_x_[p2], bounds, 0u, opt_.crossover,
                                                  opt_.eta_c, rng);
      for (auto c : {c1, c2}) {
        pagmo::polynomial_mutation(c, bounds, 0u, opt_.mutation, opt_.eta_m, rng);
        children.push_back(std::move(c));
      }
    }
    const auto kids = evaluate(children);
    std::vector<std::vector<double>> all = pop_x_;
    all.insert(all.end(), children.begin(), children.end());
    std::vector<scored> sc = parents;
    sc.insert(sc.end(), kids.begin(), kids.end());
    std::vector<std::size_t> order(all.size());
    std::iota(order.begin(), order.end(), 0);
    std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return better(sc[a], a, sc[b], b); });
    std::vector<std::vector<double>> next;
    for (std::size_t i = 0; i < n; ++i) next.push_back(all[order[i]]);
    pop_x_ = std::move(next);
  }

  // What else makes two searches' scores comparable: the fitness policy's terms and weights (its
  // quality of a fixed probe), the evaluator's K and calibration tokens, and the search's own settings.
  nlohmann::json settings_json() const {
    const auto& cal = ev_.calibration();
    std::uint64_t h = 1469598103934665603ULL;  // FNV-1a over the calibration ids
    for (const std::int32_t id : cal.ids)
      for (int b = 0; b < 4; ++b) h = (h ^ ((static_cast<std::uint32_t>(id) >> (8 * b)) & 0xffu)) * 1099511628211ULL;
    nlohmann::json j = {{"needs", fit_.needs()},
                        {"probe_quality", fit_.quality(measurements{0.5, 0.25, 0.125, 0.0625})},
                        {"top_k", ev_.top_k()},
                        {"calibration", {{"B", cal.B}, {"T", cal.T}, {"tokens", cal.ids.size()}, {"fnv1a", h}}},
                        {"target_removed", opt_.multi_objective ? 0 : opt_.target_removed},
                        {"crossover", opt_.crossover},
                        {"eta_c", opt_.eta_c},
                        {"mutation", opt_.mutation},
                        {"eta_m", opt_.eta_m}};
    if (!opt_.initial.empty()) j["initial"] = opt_.initial;  // absent without: older checkpoints stay comparable
    return j;
  }

  void save_checkpoint() const {
    if (opt_.checkpoint.empty()) return;
    nlohmann::json j;
    j["format"] = "lwcl-gelaco-search";
    j["version"] = 1;
    j["seed"] = opt_.seed;
    j["teacher_layers"] = L_;
    j["multi_objective"] = opt_.multi_objective;
    j["fitness"] = std::string(Fitness::name);
    j["settings"] = settings_json();
    j["compression"] = std::string(compression_name(opt_.compression));
    j["fixed_alpha"] = opt_.fixed_alpha ? nlohmann::json(*opt_.fixed_alpha) : nlohmann::json();
    j["generation"] = generation_;
    j["evaluations"] = evaluations_;
    j["cache_hits"] = cache_hits_;
    j["population"] = pop_x_;
    // Every candidate evaluated so far (the front is taken over them all), by key: its genes and terms.
    auto archive = nlohmann::json::array();
    for (const auto& [k, v] : cache_)
      archive.push_back({{"genes", v.genes}, {"terms", {v.m.residual_similarity, v.m.module_cosine, v.m.kl, v.m.kl_top_k}}});
    j["archive"] = std::move(archive);
    write_text_atomic(opt_.checkpoint, j.dump() + "\n");
  }

  void load_checkpoint() {
    const auto& p = opt_.checkpoint;
    nlohmann::json j;
    try {
      std::ifstream in(p);
      j = nlohmann::json::parse(in);
    } catch (const nlohmann::json::exception& e) {
      fail("gelaco: the search checkpoint '", p.string(), "' is not JSON: ", e.what());
    }
    const auto field = [&](const char* name) -> const nlohmann::json& {
      check(j.is_object() && j.contains(name), "gelaco: the search checkpoint '", p.string(), "' has no field '", name, "'");
      return j.at(name);
    };
    check(field("format") == "lwcl-gelaco-search" && field("version") == 1, "gelaco: '", p.string(),
          "' is not a search checkpoint of format 1");
    check(field("seed").is_number_unsigned() && field("seed").template get<std::uint64_t>() == opt_.seed &&
              field("teacher_layers") == L_ && field("multi_objective") == opt_.multi_objective,
          "gelaco: the search checkpoint '", p.string(), "' is of another search (seed ", field("seed").dump(), ", ",
          field("teacher_layers").dump(), " layers, multi-objective ", field("multi_objective").dump(), "); this one has seed ",
          opt_.seed, ", ", L_, " layers, multi-objective ", opt_.multi_objective);
    const nlohmann::json alpha = opt_.fixed_alpha ? nlohmann::json(*opt_.fixed_alpha) : nlohmann::json();
    check(field("fitness") == std::string(Fitness::name) && field("compression") == std::string(compression_name(opt_.compression)) &&
              field("fixed_alpha") == alpha,
          "gelaco: the search checkpoint '", p.string(), "' is of another search (fitness ", field("fitness").dump(),
          ", compression ", field("compression").dump(), ", fixed alpha ", field("fixed_alpha").dump(), "); this one has ",
          Fitness::name, ", ", compression_name(opt_.compression), ", ", alpha.dump());
    check(field("settings") == settings_json(), "gelaco: the search checkpoint '", p.string(),
          "' was made with other settings (", field("settings").dump(), "); this search has ", settings_json().dump(),
          "; give it another --out or the same settings");
    for (const char* counter : {"generation", "evaluations", "cache_hits"})
      check(field(counter).is_number_unsigned(), "gelaco: '", p.string(), "': ", counter, " is not a count");
    const auto& pop = field("population");
    check(pop.is_array() && pop.size() == static_cast<std::size_t>(opt_.population), "gelaco: '", p.string(), "' holds ",
          pop.is_array() ? pop.size() : 0, " individuals, the search has a population of ", opt_.population);
    const auto genes_of = [&](const nlohmann::json& x) {
      check(x.is_array() && x.size() == static_cast<std::size_t>(gene_count(L_)), "gelaco: '", p.string(),
            "': an individual of ", x.is_array() ? x.size() : 0, " genes, expected ", gene_count(L_));
      std::vector<double> v;
      for (const auto& g : x) {
        check(g.is_number(), "gelaco: '", p.string(), "': a gene that is not a number");
        v.push_back(g.template get<double>());
      }
      decode(v, L_);  // range checks
      return v;
    };
    std::vector<std::vector<double>> xs;
    for (const auto& x : pop) xs.push_back(genes_of(x));
    std::map<std::string, scored> archive;
    const auto& a = field("archive");
    check(a.is_array(), "gelaco: '", p.string(), "': the archive is not a list");
    for (const auto& e : a) {
      check(e.is_object() && e.contains("genes") && e.contains("terms") && e.at("terms").is_array() && e.at("terms").size() == 4,
            "gelaco: '", p.string(), "': an archive entry without genes and four terms");
      scored sc;
      sc.genes = genes_of(e.at("genes"));
      sc.genome = decode_genes(sc.genes);
      sc.key = sc.genome.key();
      double t[4];
      for (std::size_t i = 0; i < 4; ++i) {
        const auto& v = e.at("terms")[i];
        check(v.is_number() && std::isfinite(v.template get<double>()), "gelaco: '", p.string(), "': a term of ", sc.key,
              " is not a finite number");
        t[i] = v.template get<double>();
      }
      sc.m = {t[0], t[1], t[2], t[3]};
      sc.quality = fit_.quality(sc.m);
      sc.compression = compression_of(sc.genome, ev_.teacher().config(), opt_.compression, ev_.calibration().T);
      archive.emplace(sc.key, std::move(sc));
    }
    pop_x_ = std::move(xs);
    cache_ = std::move(archive);
    generation_ = field("generation").template get<index_t>();
    evaluations_ = field("evaluations").template get<std::size_t>();
    cache_hits_ = field("cache_hits").template get<std::size_t>();
  }

  const evaluator<Backend, Store>& ev_;
  Fitness fit_;
  search_options opt_;
  index_t L_ = 0;
  std::mutex mu_;
  std::map<std::string, scored> cache_;
  std::size_t evaluations_ = 0, cache_hits_ = 0, resumed_evaluations_ = 0;
  std::vector<std::vector<double>> pop_x_;
  index_t generation_ = 0;
};

// The non-dominated candidates of `all` by (quality, compression), both maximised, by compression.
inline std::vector<scored> pareto_front(const std::vector<scored>& all) {
  std::vector<scored> front;
  for (std::size_t i = 0; i < all.size(); ++i) {
    bool dominated = false;
    for (std::size_t j = 0; j < all.size() && !dominated; ++j)
      dominated = all[j].quality >= all[i].quality && all[j].compression >= all[i].compression &&
                  (all[j].quality > all[i].quality || all[j].compression > all[i].compression);
    if (!dominated) front.push_back(all[i]);
  }
  std::sort(front.begin(), front.end(), [](const scored& a, const scored& b) {
    return a.compression != b.compression ? a.compression < b.compression : a.key < b.key;
  });
  front.erase(std::unique(front.begin(), front.end(),
                          [](const scored& a, const scored& b) { return a.quality == b.quality && a.compression == b.compression; }),
              front.end());
  return front;
}

// The hypervolume the front dominates (quality and compression maximised) up to the reference point
// (quality_ref, compression_ref), pagmo2's exact algorithm; points not beyond the reference on both axes
// add nothing and are left out.
inline double hypervolume(const std::vector<scored>& front, double quality_ref, double compression_ref) {
  std::vector<std::vector<double>> pts;
  for (const auto& s : front)
    if (s.quality > quality_ref && s.compression > compression_ref) pts.push_back({-s.quality, -s.compression});
  if (pts.empty()) return 0;
  return pagmo::hypervolume(pts).compute({-quality_ref, -compression_ref});
}

}  // namespace lwcl::gelaco

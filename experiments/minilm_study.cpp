// minilm_compress's run (minilm_study.hpp), compiled once for the programs that call it.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cmath>
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
#include "lwcl/policies/pruning/uniform.hpp"
#include "lwcl/core/program.hpp"
#include "studies/seeds.hpp"
#include "studies/validators.hpp"

namespace lwcl::experiments::minilm_detail {

namespace fs = std::filesystem;
namespace cur = lwcl::policies::curriculum;
using enc_t = model::encoder<backend::cpu>;

// Sentence embeddings (mean-pooled last hidden states, unit length) of each sequence, one forward of
// batch 1 per sequence, through model::for_each_layer_output (frozen models too).
inline std::vector<std::vector<double>> embeddings(const model::weights<backend::cpu>& net,
                                            const std::vector<std::vector<std::int32_t>>& seqs) {
  std::vector<std::vector<double>> out;
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

inline double num(const row& r, const char* k) { return r.fig.contains(k) ? r.fig.at(k).get<double>() : 0.0; }

}  // namespace lwcl::experiments::minilm_detail

namespace lwcl::experiments {

// minilm_compress's whole run, from its command line (argv[0] the program); returns its exit code.
int minilm_main(int argc, char** argv) {
  using namespace minilm_detail;
  const char* models = std::getenv("LWCL_MODELS");
  const char* home = std::getenv("HOME");
  std::string model_dir = ((models && *models ? fs::path(models) : fs::path(home ? home : "") / ".cache" / "lwcl" / "models") /
                           "all-MiniLM-L6-v2").string();
  std::string corpus = "data/corpus", out = "runs/minilm_compress", budget_text = "steps:240";
  double ratio = 0.5, depth = 0, lr = 1e-3;
  int batch = 16, seq = 64, feature_batches = 12, calib_batches = 8, seeds = 1, curve_points = 0, curve_pool = 128;
  std::size_t pool_size = 2000;
  std::uint64_t first_seed = 0;
  bool test_split = false;
  CLI::App app{"lwcl minilm_compress: all-MiniLM-L6-v2 pruned, then recovered layer-wise, end to end, or not at all"};
  app.option_defaults()->always_capture_default();
  app.add_option("--model", model_dir, "the pretrained encoder's folder (config.json, vocab.txt, model.safetensors)");
  app.add_option("--corpus", corpus, "corpus folder with manifest.json (tools/fetch_corpus.sh): splits of raw text");
  app.add_option("--budget", budget_text, "every recovery's budget: steps:N, tokens:N or seconds:N (a plain number)");
  app.add_option("--ratio", ratio, "fraction of every layer's heads and FFN channels removed")->check(studies::within(0.0, 0.95));
  app.add_option("--depth", depth, "fraction of the layers removed by block influence first (0.5: 6 -> 3)")
      ->check(studies::within(0.0, 0.9));
  app.add_option("--lr", lr, "peak learning rate of every recovery")->check(studies::positive);
  app.add_option("--batch", batch, "sequences per training batch")->check(studies::positive);
  app.add_option("--seq", seq, "tokens per training sequence, [CLS] and [SEP] included")->check(studies::within(3, 512));
  app.add_option("--feature-batches", feature_batches, "batches whose boundary features the layer-wise methods cache")
      ->check(studies::positive);
  app.add_option("--calib-batches", calib_batches, "calibration batches of the pruning criteria")->check(studies::positive);
  app.add_option("--pool", pool_size, "held-out sentences judged (and neighbours searched among)")->check(studies::within(12, 1000000));
  app.add_option("--curve-points", curve_points, "embedding distance at this many points of every budget (0: no curves)")
      ->check(studies::non_negative);
  app.add_option("--curve-pool", curve_pool, "sentences of the curves' pool")->check(studies::within(2, 100000));
  app.add_flag("--test-split", test_split, "also judge every method on the test split's pool (final tables only)");
  app.add_option("--seeds", seeds, "runs of every method: seeds --seed, --seed + 1, ...")->check(studies::positive);
  app.add_option("--seed", first_seed, "the first seed");
  app.add_option("--out", out, "run directory");
  CLI11_PARSE(app, argc, argv);
  std::setvbuf(stdout, nullptr, _IOLBF, 0);

  return guard_main([&] {
    try {
      timer all;
      const auto total = studies::budget_option(budget_text);
      const index_t B = batch, T = seq;
      fs::create_directories(out);
      backend::cpu be;
      for (const char* f : {"config.json", "vocab.txt", "model.safetensors"})
        check(fs::exists(fs::path(model_dir) / f), "minilm_compress: '", (fs::path(model_dir) / f).string(),
              "' is missing (run tools/install_deps.sh --minilm, or give --model)");
      const auto ecfg = checkpoint::read_hf_encoder_config(model_dir);
      check(T <= ecfg.model.max_seq, "minilm_compress: --seq ", T, " exceeds the model's ", ecfg.model.max_seq, " positions");
      auto load_teacher = [&] {
        auto t = std::make_unique<enc_t>(be, ecfg, dtype::f32, model::frozen);
        checkpoint::load_hf_weights(*t, model_dir);
        return t;
      };
      const tokenizer::wordpiece wp((fs::path(model_dir) / "vocab.txt").string());
      std::int32_t cls = -1, sep = -1;
      for (std::size_t i = 0; i < wp.vocab_size(); ++i) {
        if (wp.token(static_cast<std::int32_t>(i)) == "[CLS]") cls = static_cast<std::int32_t>(i);
        if (wp.token(static_cast<std::int32_t>(i)) == "[SEP]") sep = static_cast<std::int32_t>(i);
      }
      check(cls >= 0 && sep >= 0, "minilm_compress: the vocabulary has no [CLS] or no [SEP]");

      // The corpus: raw text of every split; the training split as WordPiece ids joined by [SEP].
      const auto manifest_path = fs::path(corpus) / "manifest.json";
      check(fs::exists(manifest_path), "minilm_compress: no '", manifest_path.string(), "' (run tools/fetch_corpus.sh)");
      const auto manifest = nlohmann::json::parse(read_text(manifest_path));
      std::map<std::string, std::vector<std::string>> docs;
      for (const auto& d : manifest.at("documents"))
        docs[d.at("split").get<std::string>()].push_back(read_text(fs::path(corpus) / d.at("path").get<std::string>()));
      check(!docs["train"].empty() && !docs["validation"].empty(), "minilm_compress: the manifest needs train and validation documents");
      std::vector<std::int32_t> train_ids;
      for (const auto& text : docs["train"]) {
        const auto ids = wp.encode(text);
        train_ids.insert(train_ids.end(), ids.begin(), ids.end());
        train_ids.push_back(sep);
      }
      const auto shard_path = (fs::path(out) / "train_wordpiece.bin").string();
      data::write_shard(shard_path, train_ids, wp.vocab_size());
      const data::shard train(shard_path);
      std::printf("minilm_compress: %zu training documents -> %zu WordPiece tokens\n", docs["train"].size(), train_ids.size());

      // The held-out pools, as [CLS] pieces [SEP] (at most the model's positions), and the teacher's embeddings.
      auto encode_pool = [&](const data::sentence_pool& p) {
        std::vector<std::vector<std::int32_t>> seqs;
        for (const auto& s : p.sentences) {
          auto pieces = wp.encode(s);
          if (static_cast<index_t>(pieces.size()) > ecfg.model.max_seq - 2) pieces.resize(static_cast<std::size_t>(ecfg.model.max_seq - 2));
          std::vector<std::int32_t> ids{cls};
          ids.insert(ids.end(), pieces.begin(), pieces.end());
          ids.push_back(sep);
          seqs.push_back(std::move(ids));
        }
        return seqs;
      };
      const auto val_pool = data::held_out_sentences(docs["validation"], pool_size, "validation");
      const auto val_seqs = encode_pool(val_pool);
      std::optional<data::sentence_pool> test_pool;
      std::vector<std::vector<std::int32_t>> test_seqs;
      if (test_split) {
        test_pool = data::held_out_sentences(docs["test"], pool_size, "test");
        test_seqs = encode_pool(*test_pool);
      }
      std::vector<std::vector<std::int32_t>> curve_seqs;
      for (std::size_t i = 0; curve_points > 0 && i < static_cast<std::size_t>(curve_pool) && i < val_seqs.size(); ++i)
        curve_seqs.push_back(val_seqs[i * val_seqs.size() / std::min<std::size_t>(val_seqs.size(), static_cast<std::size_t>(curve_pool))]);
      std::printf("minilm_compress: %s\n", val_pool.protocol().c_str());
      timer te;
      std::vector<std::vector<double>> teacher_val, teacher_test, teacher_curve;
      {
        const auto t = load_teacher();
        teacher_val = embeddings(*t, val_seqs);
        if (test_split) teacher_test = embeddings(*t, test_seqs);
        if (!curve_seqs.empty()) teacher_curve = embeddings(*t, curve_seqs);
      }
      std::printf("minilm_compress: teacher embeddings of the pools in %.1f s\n", te.seconds());
      // 1 - mean cosine to the teacher on the curves' pool: lower is better, as a perplexity.
      auto distance = [&](const model::weights<backend::cpu>& net) {
        const auto e = embeddings(net, curve_seqs);
        double c = 0;
        for (std::size_t i = 0; i < e.size(); ++i)
          for (std::size_t k = 0; k < e[i].size(); ++k) c += e[i][k] * teacher_curve[i][k];
        return 1 - c / static_cast<double>(e.size());
      };

      std::vector<std::pair<std::uint64_t, std::vector<row>>> per_seed;
      for (int k = 0; k < seeds; ++k) {
        const std::uint64_t s = first_seed + static_cast<std::uint64_t>(k);
        const fs::path dir = seeds > 1 ? fs::path(out) / ("seed_" + std::to_string(s)) : fs::path(out);
        fs::create_directories(dir);
        if (seeds > 1) std::printf("\n==== minilm_compress: seed %llu (%d of %d)\n", static_cast<unsigned long long>(s), k + 1, seeds);
        const data::row_frame frame{cls, sep};
        const data::batch_loader loader(train, B, T, studies::seeded(0x5EED, s), frame);
        const data::batch_loader calib(train, B, T, studies::seeded(0xC0FFEE, s), frame);
        std::vector<row> rows;
        auto judge = [&](row& r, const model::weights<backend::cpu>& net) {
          const auto a = eval::compare_embeddings(teacher_val, embeddings(net, val_seqs), 10);
          r.fig["cosine"] = a.mean_cosine;
          r.fig["min_cosine"] = a.min_cosine;
          r.fig["top10_agreement"] = a.topk_agreement;
          if (test_split) {
            const auto b = eval::compare_embeddings(teacher_test, embeddings(net, test_seqs), 10);
            r.fig["test_cosine"] = b.mean_cosine;
            r.fig["test_top10_agreement"] = b.topk_agreement;
          }
        };

        // Pruning: depth first (block influence), then width (Wanda-sp), each on its own calibration pass.
        timer pc;
        std::unique_ptr<enc_t> pruned;
        std::vector<index_t> kept;
        {
          auto t = load_teacher();
          std::unique_ptr<enc_t> shallow;
          if (depth > 0) {
            shallow = policies::pruning::prune_depth(*t, calib, depth, calib_batches, kept);
          } else {
            for (index_t l = 0; l < t->config().n_layers(); ++l) kept.push_back(l);
          }
          const enc_t& src = shallow ? *shallow : *t;
          pruned = ratio > 0 ? policies::pruning::prune_uniform(src, calib, policies::pruning::wanda_sp{}, ratio, calib_batches)
                             : prune::apply_plan(src, prune::keep_all(src.config()));
          row tr{"teacher"};
          tr.fig["parameters"] = t->num_parameters();
          tr.fig["cosine"] = 1.0;
          tr.fig["top10_agreement"] = 1.0;
          rows.push_back(tr);
        }
        const auto boundaries = model::boundaries_of_kept_layers(kept, ecfg.model.n_layers());
        row pr{"pruned"};
        pr.fig["wall_seconds"] = pc.seconds();
        pr.fig["parameters"] = pruned->num_parameters();
        pr.fig["layers"] = pruned->config().n_layers();
        pr.fig["removed_fraction"] = 1 - num(pr, "parameters") / num(rows[0], "parameters");
        judge(pr, *pruned);
        pr.fig["boundaries"] = boundaries;
        std::printf("pruned: %lld layers, %.0f parameters (%.1f%% removed), cosine %.4f, top-10 agreement %.4f\n",
                    static_cast<long long>(pruned->config().n_layers()), num(pr, "parameters"), 100 * num(pr, "removed_fraction"),
                    num(pr, "cosine"), num(pr, "top10_agreement"));
        rows.push_back(pr);
        const auto steps = static_cast<long>(total.steps_at(B * T));
        const long every = curve_points > 0 && steps > 0 ? std::max<long>(1, steps / curve_points) : 0;

        // A saved student reloads bitwise, in the format the teacher came in.
        auto reloads = [&](const fs::path& folder, const distill::student_state& st) {
          enc_t back(be, checkpoint::read_hf_encoder_config(folder.string()), dtype::f32);
          checkpoint::load_hf_weights(back, folder.string());
          return model::host_params(back) == st.params;
        };
        auto record = [&](row& r, const distill::student_state& st, const distill::e2e_result* e, const distill::pipeline_result* p,
                          const fs::path& folder, std::size_t rss) {
          auto net = st.to_encoder(be);
          judge(r, *net);
          r.fig["reloads_bitwise"] = reloads(folder, st) ? 1 : 0;
          r.fig["peak_resident_bytes"] = rss;
          const auto& curve = e ? e->curve : p->curve;
          if (!curve.empty()) r.fig["curve"] = curve;
          if (e) {
            r.fig["peak_compute_bytes"] = e->peak_compute_bytes;
            r.fig["run_peak_compute_bytes"] = e->peak_compute_bytes;
            r.fig["wall_seconds"] = e->seconds;
            r.fig["cpu_seconds"] = e->cpu_seconds;
            r.fig["train_flops"] = e->flops;
            r.fig["steps"] = e->steps;
          } else {
            r.fig["peak_compute_bytes"] = p->peak_compute_bytes;
            r.fig["run_peak_compute_bytes"] = p->run_peak_compute_bytes;
            r.fig["run_peak_total_bytes"] = p->run_peak_total_bytes;
            r.fig["wall_seconds"] = p->seconds;
            r.fig["cpu_seconds"] = p->cpu_seconds;
            r.fig["train_flops"] = p->flops;
            r.fig["steps"] = p->segment_steps;
            r.fig["peak_cache_bytes"] = p->peak_cache_bytes;
          }
          std::printf("%s: cosine %.4f, top-10 agreement %.4f, peak compute %s, %.1f s\n", r.name.c_str(), num(r, "cosine"),
                      num(r, "top10_agreement"), report::human_bytes(num(r, "peak_compute_bytes")).c_str(), num(r, "wall_seconds"));
        };
        auto layerwise = [&](const std::string& name, auto... entries) {
          const auto bundle = make_policies(slot<key::pruning>(policies::pruning::wanda_sp{}),
                                            slot<key::cache>(policies::cache::host{}), entries...);
          distill::pipeline_options po = studies::recovery_options(total, lr, feature_batches);
          po.student_as.tokenizer_from = model_dir;  // the student folder loads with the teacher's tokenizer
          po.resume = false;
          if (curve_points > 0) po.probe = [&](const distill::student_state& st) { return distance(*st.to_encoder(be)); };
          po.eval_every = every;
          auto st = distill::student_state::of(*pruned);
          std::printf("%s: layer-wise, budget %s\n", name.c_str(), total.str().c_str());
          const bool rss = reset_peak_resident();
          const auto res = distill::make_pipeline(be, bundle, po).run(load_teacher, st, boundaries, loader, dir / name);
          row r{name};
          record(r, st, nullptr, &res, dir / name / "student", rss ? peak_resident_bytes() : 0);
          rows.push_back(r);
        };
        auto end_to_end = [&](const std::string& name, distill::encoder_objective objective) {
          distill::e2e_encoder_options eo;
          eo.lr = lr;
          eo.min_lr = lr / 10;
          eo.objective = objective;
          eo.set_budget(total, B * T);
          auto student = prune::apply_plan(*pruned, prune::keep_all(pruned->config()));
          if (curve_points > 0) eo.probe = [&] { return distance(*student); };
          eo.eval_every = every;
          std::printf("%s: end to end on the %s, teacher and student resident, budget %s\n", name.c_str(),
                      std::string(distill::objective_name(objective)).c_str(), total.str().c_str());
          fs::remove_all(dir / name);
          fs::create_directories(dir / name);
          const bool rss = reset_peak_resident();
          distill::e2e_result res;
          {
            const auto teacher = load_teacher();
            metrics_writer m((dir / name / "metrics.jsonl").string());
            res = distill::train_e2e_encoder(*teacher, *student, loader, B, T, eo, &m);
          }
          const std::size_t peak = rss ? peak_resident_bytes() : 0;
          checkpoint::save_hf(*student, (dir / name / "student").string(), {.weights = {}, .tokenizer_from = model_dir});
          row r{name};
          record(r, distill::student_state::of(*student), &res, nullptr, dir / name / "student", peak);
          rows.push_back(r);
        };
        layerwise("lwcl");
        layerwise("layerwise_no_curriculum", slot<key::curriculum>(cur::curriculum<cur::front_to_back, cur::teacher_inputs>{}));
        end_to_end("e2e_embedding", distill::encoder_objective::embedding);
        end_to_end("e2e_hidden", distill::encoder_objective::hidden);

        // Time to quality: the cost at which each layer-wise curve first reaches e2e_embedding's final distance.
        const auto* kd = &rows[rows.size() - 2];
        if (curve_points > 0) {
          std::vector<distill::curve_point> kc = kd->fig.at("curve").get<std::vector<distill::curve_point>>();
          const double target = kc.back().ppl;
          const auto kr = distill::first_reaching(kc, target);
          for (auto& r : rows) {
            if (r.name != "lwcl" && r.name != "layerwise_no_curriculum") continue;
            const auto c = r.fig.at("curve").get<std::vector<distill::curve_point>>();
            const auto at = distill::first_reaching(c, target);
            r.fig["reached_target"] = at ? 1 : 0;
            if (at && kr && kr->flops > 0) {
              r.fig["time_to_target_ratio"] = at->seconds / kr->seconds;
              r.fig["flops_to_target_ratio"] = at->flops / kr->flops;
            }
          }
        }
        // The table of this seed.
        std::string md = "validation: " + val_pool.protocol() + "\n\n| method | cosine | min cosine | top-10 agreement |" +
                         std::string(test_split ? " test cosine | test top-10 |" : "") +
                         " peak training | run peak | peak RSS | wall s | CPU s | GFLOPs | reloads |\n|---|---:|---:|---:|" +
                         std::string(test_split ? "---:|---:|" : "") + "---:|---:|---:|---:|---:|---:|---:|\n";
        for (const auto& r : rows) {
          auto f = [&](const char* key, const char* fmt) {
            return r.fig.contains(key) ? report::format(fmt, num(r, key)) : std::string("-");
          };
          auto b = [&](const char* key) { return r.fig.contains(key) ? report::human_bytes(num(r, key)) : std::string("-"); };
          md += "| " + r.name + " | " + f("cosine", "%.4f") + " | " + f("min_cosine", "%.4f") + " | " + f("top10_agreement", "%.4f") +
                " | " + (test_split ? f("test_cosine", "%.4f") + " | " + f("test_top10_agreement", "%.4f") + " | " : "") +
                b("peak_compute_bytes") + " | " + b("run_peak_compute_bytes") + " | " + b("peak_resident_bytes") + " | " +
                f("wall_seconds", "%.1f") + " | " + f("cpu_seconds", "%.1f") + " | " +
                (r.fig.contains("train_flops") ? report::format("%.1f", num(r, "train_flops") / 1e9) : std::string("-")) + " | " +
                (r.fig.contains("reloads_bitwise") ? (num(r, "reloads_bitwise") > 0 ? "yes" : "NO") : "-") + " |\n";
        }
        std::printf("\n%s", md.c_str());
        nlohmann::ordered_json rep = {{"program", "minilm_compress"}, {"model", model_dir}, {"seed", s},
                                      {"val_protocol", val_pool.protocol()}, {"budget", total}, {"ratio", ratio}, {"depth", depth}};
        if (test_pool) rep["test_protocol"] = test_pool->protocol();
        rep["methods"] = nlohmann::ordered_json::array();
        for (const auto& r : rows) {
          auto j = r.fig;
          j["name"] = r.name;
          rep["methods"].push_back(j);
        }
        write_text_atomic(dir / "report.json", rep.dump(2) + "\n");
        write_text_atomic(dir / "table.md", md);
        per_seed.emplace_back(s, std::move(rows));
      }

      nlohmann::ordered_json cfg = {{"program", "minilm_compress"}, {"model", model_dir}, {"corpus", corpus},
                                    {"budget", total},               {"ratio", ratio},     {"depth", depth},
                                    {"lr", lr},                      {"batch", batch},     {"seq", seq},
                                    {"feature_batches", feature_batches}, {"calib_batches", calib_batches},
                                    {"pool", pool_size},             {"curve_points", curve_points}, {"curve_pool", curve_pool},
                                    {"test_split", test_split},      {"seeds", seeds},     {"seed", first_seed}};
      write_text_atomic(fs::path(out) / "config.json", cfg.dump(2) + "\n");
      if (seeds > 1) {
        // Mean and sample standard deviation of every numeric figure over the seeds.
        nlohmann::ordered_json methods = nlohmann::ordered_json::array();
        std::string md = std::to_string(seeds) + " seeds: mean +- sample sd; validation: " + val_pool.protocol() +
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
        nlohmann::ordered_json rep = {{"program", "minilm_compress"}, {"val_protocol", val_pool.protocol()}, {"methods", methods}};
        write_text_atomic(fs::path(out) / "report.json", rep.dump(2) + "\n");
        write_text_atomic(fs::path(out) / "table.md", md);
        std::printf("\n%s", md.c_str());
      }
      std::printf("minilm_compress: wrote %s/ in %.0f s\n", out.c_str(), all.seconds());
      return 0;
    } catch (const nlohmann::json::exception& e) {
      fail("minilm_compress: ", e.what());
    }
  });
}

}  // namespace lwcl::experiments

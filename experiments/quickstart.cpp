// quickstart: the README's main job. Trains a 2-layer GPT-2 block stack from scratch with AdamW on
// the CPU, on synthetic sequences from a random sparse Markov chain (each token has a few likely
// successors), and shows the loss falling from log(vocab) towards the chain's entropy. Writes
// runs/quickstart/{config.json, metrics.jsonl, report.json}.
#include <CLI/CLI.hpp>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <vector>

#include "lwcl/backend/host/host.hpp"
#include "lwcl/core/metrics.hpp"
#include "lwcl/core/progress.hpp"
#include "lwcl/core/rng.hpp"
#include "lwcl/core/timer.hpp"
#include "lwcl/model/transformer.hpp"
#include "lwcl/optim/adamw.hpp"
#include "lwcl/optim/clip.hpp"
#include "lwcl/optim/schedule.hpp"

using namespace lwcl;

namespace {

// A Markov chain over `vocab` tokens in which every token moves to one of `fanout` successors with
// probabilities proportional to 1, 1/2, 1/3, ...; its entropy rate is the best loss a model can reach.
struct markov_chain {
  int vocab, fanout;
  std::vector<int> next;     // vocab x fanout successors
  std::vector<double> prob;  // fanout probabilities (shared by every token)

  markov_chain(int v, int f, std::uint64_t seed) : vocab(v), fanout(f), next(static_cast<std::size_t>(v * f)), prob(static_cast<std::size_t>(f)) {
    philox_stream s{seed, 1};
    for (std::size_t i = 0; i < next.size(); ++i) next[i] = static_cast<int>(s.bits(i) % static_cast<std::uint32_t>(v));
    double z = 0;
    for (int j = 0; j < f; ++j) z += 1.0 / (j + 1);
    for (int j = 0; j < f; ++j) prob[static_cast<std::size_t>(j)] = 1.0 / (j + 1) / z;
  }
  double entropy() const {
    double h = 0;
    for (double p : prob) h -= p * std::log(p);
    return h;
  }
  // Fills B sequences of T + 1 tokens; batch `index` selects the random numbers, so batches are reproducible.
  void sample(std::vector<std::int32_t>& tokens, std::vector<std::int32_t>& targets, index_t B, index_t T,
              std::uint64_t index) const {
    philox_stream s{0x5eed, 1000 + index};
    std::uint64_t draw = 0;
    for (index_t b = 0; b < B; ++b) {
      int tok = static_cast<int>(s.bits(draw++) % static_cast<std::uint32_t>(vocab));
      for (index_t t = 0; t <= T; ++t) {
        if (t < T) tokens[static_cast<std::size_t>(b * T + t)] = tok;
        if (t > 0) targets[static_cast<std::size_t>(b * T + t - 1)] = tok;
        double u = s.uniform(draw++), acc = 0;
        int j = 0;
        for (; j < fanout - 1; ++j) {
          acc += prob[static_cast<std::size_t>(j)];
          if (u < acc) break;
        }
        tok = next[static_cast<std::size_t>(tok * fanout + j)];
      }
    }
  }
};

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"lwcl quickstart: train a 2-layer GPT-2 block stack with AdamW on synthetic Markov-chain data (CPU)"};
  int steps = 300, batch = 8, seq = 32, width = 64, layers = 2, heads = 4, vocab = 64, fanout = 4;
  double lr = 3e-3;
  std::string out_dir = "runs/quickstart";
  app.add_option("--steps", steps, "optimisation steps")->check(CLI::PositiveNumber);
  app.add_option("--batch", batch, "sequences per batch")->check(CLI::PositiveNumber);
  app.add_option("--seq", seq, "tokens per sequence")->check(CLI::PositiveNumber);
  app.add_option("--width", width, "model width d_model")->check(CLI::PositiveNumber);
  app.add_option("--layers", layers, "number of blocks")->check(CLI::PositiveNumber);
  app.add_option("--heads", heads, "attention heads")->check(CLI::PositiveNumber);
  app.add_option("--lr", lr, "peak learning rate")->check(CLI::PositiveNumber);
  app.add_option("--out", out_dir, "run directory");
  CLI11_PARSE(app, argc, argv);
  std::setvbuf(stdout, nullptr, _IOLBF, 0);  // keep stdout lines in order with the progress lines

  try {
    check(width % heads == 0, "quickstart: --width ", width, " is not a multiple of --heads ", heads);
    std::filesystem::create_directories(out_dir);
    backend::cpu be;
    const markov_chain chain(vocab, fanout, 42);
    auto cfg = model::model_config::uniform(model::family::gpt2, vocab, seq, width, layers, heads, heads, 4 * width);
    model::transformer<backend::cpu> net(be, cfg);
    net.init(1234);
    optim::adamw_config oc;
    oc.lr = lr;
    oc.weight_decay = 0.01;
    oc.beta2 = 0.95;
    optim::adamw<backend::cpu> opt(be, net.params(), oc);
    const optim::cosine_schedule sched{lr, lr / 10, steps / 10, steps};

    nlohmann::json config = {{"program", "quickstart"},
                             {"lwcl_version", lwcl::version},
                             {"backend", std::string(backend::cpu::name)},
                             {"gemm", std::string(backend::cpu::gemm_provider::name)},
                             {"family", "gpt2"},
                             {"vocab", vocab},
                             {"d_model", width},
                             {"layers", layers},
                             {"heads", heads},
                             {"seq", seq},
                             {"batch", batch},
                             {"steps", steps},
                             {"lr", lr},
                             {"parameters", net.num_parameters()}};
    {
      std::ofstream f(out_dir + "/config.json.tmp");
      f << config.dump(2) << '\n';
    }
    std::filesystem::rename(out_dir + "/config.json.tmp", out_dir + "/config.json");
    metrics_writer metrics(out_dir + "/metrics.jsonl");

    std::printf("quickstart: gpt2 stack, %d layers, width %d, %d heads, %lld parameters; batch %d x %d tokens\n", layers, width,
                heads, static_cast<long long>(net.num_parameters()), batch, seq);
    std::printf("quickstart: loss starts near log(%d) = %.3f; the chain's entropy (best possible) is %.3f\n", vocab,
                std::log(static_cast<double>(vocab)), chain.entropy());
    std::vector<std::int32_t> tokens(static_cast<std::size_t>(batch * seq)), targets(tokens.size());
    const tensor tok(tokens.data(), {batch, seq}), tgt(targets.data(), {batch, seq});
    progress bar("train", steps);
    timer clock;
    double first = 0, last = 0, smooth = 0;
    for (int step = 1; step <= steps; ++step) {
      chain.sample(tokens, targets, batch, seq, static_cast<std::uint64_t>(step));
      double loss = 0, norm = 0;
      const double step_lr = sched.lr(step);
      try {
        net.zero_grad();
        loss = net.forward(tok, tgt);
        check(std::isfinite(loss), "loss is ", loss);
        net.backward();
        norm = optim::clip_grad_norm(be, net.grads(), 1.0);  // throws on a non-finite gradient norm
        opt.step(net.grads(), step_lr);
      } catch (const lwcl::error& e) {
        fail("quickstart: training stopped at step ", step, ": ", e.what());
      }
      smooth = step == 1 ? loss : 0.9 * smooth + 0.1 * loss;
      if (step == 1) first = loss;
      last = smooth;
      metrics.write({{"step", step}, {"loss", loss}, {"grad_norm", norm}, {"lr", step_lr}, {"seconds", clock.seconds()}});
      if (step == 1 || step % 25 == 0 || step == steps)
        std::printf("step %4d  loss %.4f  (smoothed %.4f)  grad norm %.3f  lr %.2e\n", step, loss, smooth, norm, step_lr);
      char note[64];
      std::snprintf(note, sizeof note, "loss %.3f", smooth);
      bar.update(step, note);
    }
    bar.finish();
    const double seconds = clock.seconds();
    const double tokens_per_s = static_cast<double>(steps) * batch * seq / seconds;
    nlohmann::json report = {{"first_loss", first},
                             {"final_smoothed_loss", last},
                             {"entropy_floor", chain.entropy()},
                             {"wall_seconds", seconds},
                             {"tokens_per_second", tokens_per_s},
                             {"peak_host_bytes", memory().peak(tier::host)}};
    {
      std::ofstream f(out_dir + "/report.json.tmp");
      f << report.dump(2) << '\n';
    }
    std::filesystem::rename(out_dir + "/report.json.tmp", out_dir + "/report.json");
    std::printf("quickstart: loss %.3f -> %.3f (entropy floor %.3f) in %.1f s, %.0f tokens/s; wrote %s/\n", first, last,
                chain.entropy(), seconds, tokens_per_s, out_dir.c_str());
    return last < first ? 0 : 1;
  } catch (const lwcl::error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 2;
  }
}

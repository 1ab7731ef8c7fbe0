// Side-by-side benchmark, lwcl half: one teacher-training step of a whole GPT-2 decoder LM
// (model::transformer: embeddings, blocks, final norm, tied head, mean cross-entropy) for a (B, T)
// batch: forward, backward, global-norm clipping at 1.0 and an AdamW update. Defaults are the `tiny`
// teacher (vocab 1024, C=128, 4 layers, 4 heads, FFN 512, B=16, T=128). Prints the median step time and
// tokens/s; bench/peer/run_train_step.sh runs it beside the PyTorch version (train_step.py).
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "lwcl/backend/host/host.hpp"
#include "lwcl/core/timer.hpp"
#include "lwcl/model/transformer.hpp"
#include "lwcl/optim/adamw.hpp"
#include "lwcl/optim/clip.hpp"
#include "lwcl/core/program.hpp"
#include "studies/validators.hpp"

using namespace lwcl;

namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// The token stream both sides train on: a 64-bit mixing hash of the position (SplitMix64's finaliser),
// so train_step.py builds the same batch without sharing a random generator. The tokens look uniform
// and independent, so an untrained model's loss is log(vocab); both sides then memorise the one batch
// at the same rate, which checks that they run the same step (the work does not depend on the loss).
std::int32_t token_at(std::uint64_t i, std::uint64_t vocab) {
  std::uint64_t x = i * 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  x ^= x >> 31;
  return static_cast<std::int32_t>(x % vocab);
}

// Matmul FLOPs of one forward pass for B x T tokens: per layer the q/k/v/o projections and the MLP, the
// attention scores and weighted sum over the full T x T square, and the tied LM head. Backward is
// counted as twice the forward, as in the usual 6N-parameters accounting.
double forward_flops(double B, double T, double C, double F, double V, double layers) {
  const double N = B * T;
  return layers * (2.0 * N * (4.0 * C * C + 2.0 * C * F) + 4.0 * B * T * T * C) + 2.0 * N * C * V;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"lwcl side of the teacher-training-step benchmark against PyTorch"};
  int B = 16, T = 128, C = 128, layers = 4, H = 4, Fw = 512, V = 1024, steps = 20, warmup = 3;
  app.add_option("--batch", B)->check(studies::positive);
  app.add_option("--seq", T)->check(studies::positive);
  app.add_option("--width", C)->check(studies::positive);
  app.add_option("--layers", layers)->check(studies::positive);
  app.add_option("--heads", H)->check(studies::positive);
  app.add_option("--ffn", Fw)->check(studies::positive);
  app.add_option("--vocab", V)->check(studies::positive);
  app.add_option("--steps", steps, "timed steps")->check(studies::positive);
  app.add_option("--warmup", warmup, "untimed steps first")->check(studies::non_negative);
  CLI11_PARSE(app, argc, argv);
  return lwcl::guard_main([&] {
    check(C % H == 0, "train_step: --width ", C, " is not a multiple of --heads ", H);
    backend::cpu be;
    // The tiny preset's position table holds 128 positions; a longer --seq gets a longer table.
    const auto cfg = model::model_config::uniform(model::family::gpt2, V, std::max(T, 128), C, layers, H, H, Fw);
    model::transformer<backend::cpu> net(be, cfg);
    net.init(1234);
    optim::adamw_config oc;
    oc.lr = 3e-4;
    oc.weight_decay = 0.01;
    optim::adamw<backend::cpu> opt(be, net.params(), oc);

    const auto n = static_cast<std::size_t>(B) * static_cast<std::size_t>(T);
    std::vector<std::int32_t> tokens(n), targets(n);
    for (index_t b = 0; b < B; ++b)
      for (index_t t = 0; t < T; ++t) {
        const auto at = static_cast<std::uint64_t>(b * (T + 1) + t);
        tokens[static_cast<std::size_t>(b * T + t)] = token_at(at, static_cast<std::uint64_t>(V));
        targets[static_cast<std::size_t>(b * T + t)] = token_at(at + 1, static_cast<std::uint64_t>(V));
      }
    const tensor tok(tokens.data(), {B, T}), tgt(targets.data(), {B, T});

    std::vector<double> times;
    double first_loss = 0, loss = 0;
    for (int step = 0; step < warmup + steps; ++step) {
      timer t;
      net.zero_grad();
      loss = net.forward(tok, tgt);
      net.backward();
      optim::clip_grad_norm(be, net.grads(), 1.0);
      opt.step(net.grads());
      if (step >= warmup) times.push_back(t.seconds());
      if (step == 0) first_loss = loss;
    }
    const double log_v = std::log(static_cast<double>(V));
    // An untrained GPT-2 (weights N(0, 0.02)) predicts nearly uniformly; a first loss far from
    // log(vocab) means the model or the data is not what this benchmark claims to time.
    check(std::fabs(first_loss - log_v) < 0.05 * log_v, "train_step: first loss ", first_loss, " is not near log(vocab) = ",
          log_v);
    check(std::isfinite(loss), "train_step: final loss is ", loss);
    const double step_s = median(times);
    const double flops = 3.0 * forward_flops(B, T, C, Fw, V, layers);
    std::printf("lwcl: gpt2 LM, vocab %d, C=%d, %d layers, %d heads, FFN %d, %lld parameters, B=%d T=%d, gemm=%s\n", V, C,
                layers, H, Fw, static_cast<long long>(net.num_parameters()), B, T,
                std::string(backend::cpu::gemm_provider::name).c_str());
    std::printf("lwcl loss: first %.4f (log vocab %.4f), final %.4f\n", first_loss, log_v, loss);
    std::printf("lwcl step seconds (median of %d): %.5f\n", steps, step_s);
    std::printf("lwcl tokens/s: %.0f\n", static_cast<double>(n) / step_s);
    std::printf("lwcl achieved GFLOP/s: %.1f\n", flops / step_s / 1e9);
    return 0;
  });
}

// Side-by-side benchmark, lwcl half: one layer-wise distillation step on a 2-block GPT-2-small segment
// (C=768, 12 heads, FFN 3072) for a (B, T) batch: teacher forward + student forward and backward + MSE
// + AdamW. Prints the median step time, the achieved GFLOP/s, and the GEMM provider's GFLOP/s on the
// step's GEMM shapes measured in the same process. bench/peer/run_segment_step.sh runs it beside
// the PyTorch version (segment_step.py) and prints the ratio.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cstdio>
#include <vector>

#include "lwcl/backend/host/host.hpp"
#include "lwcl/core/timer.hpp"
#include "lwcl/model/block_stack.hpp"
#include "lwcl/model/transformer.hpp"
#include "lwcl/ops/distill_loss.hpp"
#include "lwcl/optim/adamw.hpp"
#include "lwcl/core/program.hpp"

using namespace lwcl;

namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Matmul FLOPs of one block's forward pass for N = B*T tokens (projections, MLP, attention scores and
// weighted sum; element-wise work not counted, as in the usual 6N-parameters accounting).
double block_forward_flops(index_t B, index_t T, index_t C, index_t F) {
  const double N = static_cast<double>(B * T);
  return 2.0 * N * (4.0 * C * C + 2.0 * C * F) + 4.0 * static_cast<double>(B) * T * T * C;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"lwcl side of the segment-step benchmark against PyTorch"};
  int B = 4, T = 256, C = 768, H = 12, layers = 2, steps = 10, warmup = 2;
  app.add_option("--batch", B);
  app.add_option("--seq", T);
  app.add_option("--width", C);
  app.add_option("--heads", H);
  app.add_option("--layers", layers);
  app.add_option("--steps", steps, "timed steps");
  app.add_option("--warmup", warmup, "untimed steps first");
  CLI11_PARSE(app, argc, argv);
  return lwcl::guard_main([&] {
    const index_t F = 4 * C;
    backend::cpu be;
    auto cfg = model::model_config::uniform(model::family::gpt2, 64, T, C, layers, H, H, F);
    tensor_layout layout;
    model::add_stack_params(layout, cfg, 0, layers);
    const auto n = static_cast<std::size_t>(layout.numel());
    std::vector<float> teacher_w(n), student_w(n);
    model::init_parameters(cfg, layout, teacher_w.data(), 1);
    model::init_parameters(cfg, layout, student_w.data(), 2);
    buffer<backend::cpu> tw(be, n * 4), sw(be, n * 4), sg(be, n * 4);
    be.from_host(tw.data(), teacher_w.data(), n * 4);
    be.from_host(sw.data(), student_w.data(), n * 4);
    be.fill_zero(sg.data(), n * 4);
    model::block_stack<backend::cpu> teacher(be, cfg, 0, layers, layout, tw.data(), nullptr, dtype::f32);
    model::block_stack<backend::cpu> student(be, cfg, 0, layers, layout, sw.data(), sg.data(), dtype::f32);
    optim::adamw_config oc;
    oc.lr = 1e-4;
    optim::adamw<backend::cpu> opt(be, tensor(sw.data(), dtype::f32, {layout.numel()}), oc);

    const shape hs{B, T, C};
    owned_tensor<backend::cpu> x(be, dtype::f32, hs), ty(be, dtype::f32, hs), sy(be, dtype::f32, hs), dsy(be, dtype::f32, hs),
        scratch(be, dtype::f32, {2 * B * T});
    {
      philox_stream s{7, 0};
      float* p = x.ptr<float>();
      for (index_t i = 0; i < x.numel(); ++i) p[i] = s.normal(static_cast<std::uint64_t>(i));
    }
    const tensor grads(sg.data(), dtype::f32, {layout.numel()});
    std::vector<double> times;
    double loss = 0;
    for (int step = 0; step < warmup + steps; ++step) {
      timer t;
      teacher.forward(x, ty);
      student.forward(x, sy);
      be.fill_zero(sg.data(), n * 4);
      be.fill_zero(dsy.view().data, dsy.view().bytes());
      loss = ops::mse_loss(be, dsy, scratch, sy, ty);
      student.backward(dsy, tensor());
      opt.step(grads);
      if (step >= warmup) times.push_back(t.seconds());
    }
    const double step_s = median(times);
    const double flops = layers * block_forward_flops(B, T, C, F) * 4.0;  // teacher fwd + student fwd + 2x fwd for backward

    // The provider's rate on the step's GEMM shapes (forward shapes, N = B*T rows), same process.
    const index_t N = static_cast<index_t>(B) * T;
    std::vector<float> a(static_cast<std::size_t>(N * F)), w(static_cast<std::size_t>(F * C)), o(static_cast<std::size_t>(N * F));
    for (std::size_t i = 0; i < a.size(); ++i) a[i] = 0.001f * static_cast<float>(i % 97);
    for (std::size_t i = 0; i < w.size(); ++i) w[i] = 0.001f * static_cast<float>(i % 89);
    struct gemm_shape {
      index_t M, N, K;
    };
    const gemm_shape shapes[] = {{N, C, C}, {N, C, C}, {N, C, C}, {N, C, C}, {N, F, C}, {N, C, F}};
    std::vector<double> gemm_times;
    double gemm_flops = 0;
    for (const auto& s : shapes) gemm_flops += 2.0 * s.M * s.N * s.K;
    for (int rep = 0; rep < warmup + steps; ++rep) {
      timer t;
      for (const auto& s : shapes) be.gemm(false, true, s.M, s.N, s.K, 1.0f, a.data(), s.K, w.data(), s.K, 0.0f, o.data(), s.N);
      if (rep >= warmup) gemm_times.push_back(t.seconds());
    }
    const double gemm_gflops = gemm_flops / median(gemm_times) / 1e9;
    const double achieved = flops / step_s / 1e9;
    std::printf("lwcl: segment %d x gpt2 block (C=%d, H=%d, F=%lld), B=%d T=%d, gemm=%s, final loss %.6f\n", layers, C, H,
                static_cast<long long>(F), B, T, std::string(backend::cpu::gemm_provider::name).c_str(), loss);
    std::printf("lwcl step seconds (median of %d): %.4f\n", steps, step_s);
    std::printf("lwcl achieved GFLOP/s: %.1f\n", achieved);
    std::printf("lwcl gemm provider GFLOP/s on the step's shapes: %.1f\n", gemm_gflops);
    std::printf("lwcl achieved/provider ratio: %.3f\n", achieved / gemm_gflops);
    return 0;
  });
}

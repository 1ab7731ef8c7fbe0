// What gemm::chosen sees on this machine: the CPU (model, family/model, features, OpenBLAS's kernels,
// oneDNN's instruction set), every compiled-in provider's GFLOP/s on gemm::chosen's shape classes at 1
// and 2 threads (or the thread counts given), side by side, what the decision rule picks at each thread
// count from these fuller timings, and what gemm::chosen itself decides for this process (measured or
// from its cache). A plain program: docs/backends.md records its figures.
//   bench_gemm_choice [rounds=5] [threads...]
#include <omp.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <exception>
#include <limits>
#include <string>
#include <vector>

#include "lwcl/backend/host/gemm_chosen.hpp"
#include "lwcl/core/error.hpp"

namespace choice = lwcl::gemm::choice;

int main(int argc, char** argv) try {
  const int rounds = argc > 1 ? std::atoi(argv[1]) : 5;
  lwcl::check(rounds >= 1, "bench_gemm_choice: rounds must be a positive integer, got '", argc > 1 ? argv[1] : "", "'");
  std::vector<int> threads;
  for (int i = 2; i < argc; ++i) {
    threads.push_back(std::atoi(argv[i]));
    lwcl::check(threads.back() >= 1, "bench_gemm_choice: a thread count must be a positive integer, got '", argv[i], "'");
  }
  if (threads.empty()) threads = {1, 2};
  const int default_threads = omp_get_max_threads();

  const choice::machine m = choice::this_machine();
  std::array<char, 32> date{};
  const std::time_t now = std::time(nullptr);
  std::strftime(date.data(), date.size(), "%Y-%m-%d", std::localtime(&now));
  std::printf("date: %s\nhost: %s\ncpu: %s (family %d, model %d), %d logical processors\nfeatures:", date.data(),
              m.hostname.c_str(), m.cpu_model.c_str(), m.cpu_family, m.cpu_model_number, omp_get_num_procs());
  for (const auto& f : m.features) std::printf(" %s", f.c_str());
  std::printf("\n%s\nlibraries: %s\n", choice::openblas_core_note(m).c_str(), m.libraries.c_str());
  if (!m.onednn_isa.empty()) std::printf("onednn isa: %s\n", m.onednn_isa.c_str());
  const char* coretype = std::getenv("OPENBLAS_CORETYPE");
  std::printf("OPENBLAS_CORETYPE: %s\nrounds: %d (best of), every provider timed on every shape class\n\n",
              coretype ? coretype : "(unset)", rounds);

  const auto providers = choice::compiled_in();
  std::vector<std::vector<choice::timing>> runs;
  for (int t : threads) {
    omp_set_num_threads(t);
    runs.push_back(choice::measure(providers, rounds, std::numeric_limits<double>::infinity(),
                                   std::numeric_limits<double>::infinity()));
  }
  omp_set_num_threads(default_threads);

  // GFLOP/s, one row per shape class, providers side by side for each thread count.
  std::printf("| shape class |");
  for (int t : threads)
    for (auto p : providers) std::printf(" %s %d thr |", std::string(choice::name_of(p)).c_str(), t);
  std::printf("\n|---|");
  for (std::size_t i = 0; i < threads.size() * providers.size(); ++i) std::printf("---:|");
  std::printf("\n");
  for (std::size_t s = 0; s <= choice::shape_classes.size(); ++s) {
    if (s < choice::shape_classes.size()) {
      std::printf("| %s |", std::string(choice::shape_classes[s].name).c_str());
    } else {
      std::printf("| all three (total time) |");
    }
    for (const auto& run : runs)
      for (const auto& x : run) std::printf(" %.1f |", s < choice::shape_classes.size() ? x.gflops(s) : x.gflops());
    std::printf("\n");
  }
  std::printf("\n");
  for (std::size_t i = 0; i < threads.size(); ++i) {
    const auto p = choice::pick(runs[i]);
    std::printf("rule at %d thread%s: %s (%s)\n", threads[i], threads[i] == 1 ? "" : "s",
                std::string(choice::name_of(p)).c_str(), choice::explain(runs[i], p, m, threads[i]).c_str());
  }
  // What a program gets: the process's own decision at its default thread count (cached per machine).
  const auto& d = lwcl::gemm::chosen::decision();
  std::printf("gemm::chosen at %d thread%s: %s\n", default_threads, default_threads == 1 ? "" : "s",
              choice::describe(d).c_str());
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "bench_gemm_choice: %s\n", e.what());
  return 1;
}

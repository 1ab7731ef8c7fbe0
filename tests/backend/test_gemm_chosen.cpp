// gemm::chosen and the decision behind it (backend/host/gemm_choice.hpp): every compiled-in provider,
// forced in turn, and backend::host<gemm::chosen> against a double-precision naive reference (every
// transpose combination, odd sizes, padded leading dimensions, alpha/beta); the decision with a scripted
// measurement: the cache file's round trip, corrupt, stale and foreign cache files ignored and rewritten,
// the margin that keeps OpenBLAS, LWCL_GEMM forcing and refusing, and the note on OpenBLAS's kernels.
#include <doctest/doctest.h>

#include <omp.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include "lwcl/backend/host/gemm_chosen.hpp"
#include "lwcl/backend/host/gemm_naive.hpp"
#include "lwcl/backend/host/host.hpp"
#include "lwcl/core/fs.hpp"
#include "support/check.hpp"

using namespace lwcl;
using gemm::choice::provider;
namespace fs = std::filesystem;

static_assert(backend::gemm_prepared_once<gemm::chosen, float>);
static_assert(!backend::gemm_prepared_once<gemm::openblas, float>);
static_assert(backend::backend_interface<backend::host<gemm::chosen>>);

namespace {

struct gemm_case {
  bool ta, tb;
  index_t M, N, K;
  index_t pad;  // extra columns in every leading dimension
};

// The odd sizes of test_host.cpp's provider comparison, plus a large one that runs multi-threaded.
const std::vector<gemm_case> sizes = {{false, false, 1, 1, 1, 0},    {false, false, 7, 5, 3, 0},
                                      {false, false, 13, 17, 11, 3},  {false, false, 33, 1, 65, 1},
                                      {false, false, 1, 29, 31, 5},   {false, false, 64, 48, 80, 0},
                                      {false, false, 37, 41, 129, 7}, {false, false, 257, 263, 131, 2}};

// Runs run(A, B, C) on random T operands and returns its error relative to gemm::naive in double on the
// same values, over the whole C array: padding must come back untouched.
template <class T, class Run>
double error_against_double(const gemm_case& c, double alpha, double beta, std::uint64_t seed, Run run) {
  const index_t rows_a = c.ta ? c.K : c.M, cols_a = c.ta ? c.M : c.K;
  const index_t rows_b = c.tb ? c.N : c.K, cols_b = c.tb ? c.K : c.N;
  const index_t lda = cols_a + c.pad, ldb = cols_b + c.pad, ldc = c.N + c.pad;
  const auto A = test::random_normal<T>(static_cast<std::size_t>(rows_a * lda), seed);
  const auto B = test::random_normal<T>(static_cast<std::size_t>(rows_b * ldb), seed + 1);
  const auto C0 = test::random_normal<T>(static_cast<std::size_t>(c.M * ldc), seed + 2);
  auto C = C0;
  run(c, static_cast<T>(alpha), A.data(), lda, B.data(), ldb, static_cast<T>(beta), C.data(), ldc);
  const std::vector<double> Ad(A.begin(), A.end()), Bd(B.begin(), B.end());
  std::vector<double> Cd(C0.begin(), C0.end());
  gemm::naive::run(c.ta, c.tb, c.M, c.N, c.K, alpha, Ad.data(), lda, Bd.data(), ldb, beta, Cd.data(), ldc);
  int padding_written = 0;
  for (index_t i = 0; i < c.M; ++i)
    for (index_t j = c.N; j < ldc; ++j) padding_written += C[static_cast<std::size_t>(i * ldc + j)] != C0[static_cast<std::size_t>(i * ldc + j)];
  CHECK(padding_written == 0);
  return test::rel_error(C, Cd);
}

// Every size x transpose combination x (alpha, beta) through run; returns the largest error.
template <class T, class Run>
double worst_error(Run run) {
  double worst = 0;
  std::uint64_t seed = 100;
  for (const auto& base : sizes)
    for (bool ta : {false, true})
      for (bool tb : {false, true})
        for (const auto& [alpha, beta] : {std::pair{1.0, 0.0}, std::pair{0.75, -1.25}, std::pair{-2.0, 1.0}}) {
          gemm_case c = base;
          c.ta = ta;
          c.tb = tb;
          CAPTURE(ta);
          CAPTURE(tb);
          CAPTURE(c.M);
          CAPTURE(c.N);
          CAPTURE(c.K);
          const double e = error_against_double<T>(c, alpha, beta, seed++, run);
          CHECK(e < (std::is_same_v<T, float> ? 2e-6 : 1e-14));
          worst = std::max(worst, e);
        }
  return worst;
}

// A machine like the Xeon that motivated the choice: AVX-512, and an OpenBLAS without kernels for it.
gemm::choice::machine xeon() {
  gemm::choice::machine m;
  m.hostname = "test-host";
  m.cpu_model = "Test Xeon";
  m.cpu_family = 6;
  m.cpu_model_number = 207;
  m.features = {"avx2", "fma", "avx512f", "amx_tile"};
  m.openblas_core = "Haswell";
  m.libraries = "OpenBLAS test";
  m.onednn_isa = "cpu_isa_avx512_core_amx";
  return m;
}

// A scripted measurement: each provider at a fixed GFLOP/s on every shape class; counts its calls.
struct scripted {
  std::map<provider, double> gflops;
  int calls = 0;
  std::vector<gemm::choice::timing> operator()(const std::vector<provider>& ps) {
    ++calls;
    std::vector<gemm::choice::timing> t;
    for (provider p : ps) {
      gemm::choice::timing x;
      x.p = p;
      for (std::size_t s = 0; s < gemm::choice::shape_classes.size(); ++s)
        x.seconds[s] = gemm::choice::shape_classes[s].flops() / (gflops.at(p) * 1e9);
      t.push_back(x);
    }
    return t;
  }
};

// A fresh cache folder per test case, removed afterwards.
struct scratch {
  fs::path dir;
  explicit scratch(const std::string& tag)
      : dir(fs::temp_directory_path() / ("lwcl_gemm_choice_" + std::to_string(::getpid()) + "_" + tag)) {
    fs::remove_all(dir);
  }
  ~scratch() { fs::remove_all(dir); }
  // The folder's files, without the lock files decide() holds while it decides (listed by locks()).
  std::vector<fs::path> files() const { return listed(false); }
  std::vector<fs::path> locks() const { return listed(true); }

 private:
  std::vector<fs::path> listed(bool lock_files) const {
    std::vector<fs::path> v;
    if (fs::exists(dir))
      for (const auto& e : fs::directory_iterator(dir))
        if ((e.path().extension() == ".lock") == lock_files) v.push_back(e.path());
    return v;
  }
};

gemm::choice::inputs inputs_for(scripted& m, const fs::path& cache_dir) {
  gemm::choice::inputs in;
  in.host = xeon();
  in.threads = 2;
  in.providers = {provider::openblas, provider::onednn, provider::blis};
  in.cache_dir = cache_dir;
  in.measure = [&m](const std::vector<provider>& ps) { return m(ps); };
  return in;
}

fs::path cache_file_of(const gemm::choice::inputs& in) {
  return in.cache_dir / gemm::choice::cache_file_name(in.host, gemm::choice::cache_key(in.host, in.threads, in.providers));
}

}  // namespace

TEST_CASE("every compiled-in GEMM provider, forced in turn, equals a double-precision naive GEMM") {
  for (provider p : gemm::choice::compiled_in()) {
    CAPTURE(gemm::choice::name_of(p));
    const double worst = worst_error<float>([p](const gemm_case& c, float alpha, const float* A, index_t lda, const float* B,
                                                index_t ldb, float beta, float* C, index_t ldc) {
      gemm::choice::run_on(p, c.ta, c.tb, c.M, c.N, c.K, alpha, A, lda, B, ldb, beta, C, ldc);
    });
    MESSAGE(gemm::choice::name_of(p), ": largest f32 error relative to double ", worst);
  }
}

TEST_CASE("every compiled-in GEMM provider, forced in turn: beta 0 ignores C, K 0 scales C by beta, M or N 0 writes "
          "nothing") {
  const float A[4] = {1, 2, 3, 4}, B[4] = {1, 1, 1, 1};
  for (provider p : gemm::choice::compiled_in()) {
    CAPTURE(gemm::choice::name_of(p));
    float C[4] = {NAN, NAN, NAN, NAN};
    gemm::choice::run_on(p, false, false, 2, 2, 2, 1.0f, A, 2, B, 2, 0.0f, C, 2);
    CHECK(std::vector<float>(C, C + 4) == std::vector<float>{3, 3, 7, 7});
    float D[4] = {1, 2, 3, 4};  // an empty inner dimension: C = beta C
    gemm::choice::run_on(p, false, false, 2, 2, 0, 1.0f, A, 2, B, 2, 3.0f, D, 2);
    CHECK(std::vector<float>(D, D + 4) == std::vector<float>{3, 6, 9, 12});
    float E[4] = {NAN, NAN, NAN, NAN};
    gemm::choice::run_on(p, false, false, 2, 2, 0, 1.0f, A, 2, B, 2, 0.0f, E, 2);
    CHECK(std::vector<float>(E, E + 4) == std::vector<float>{0, 0, 0, 0});
    float F[1] = {5};
    gemm::choice::run_on(p, false, false, 0, 1, 1, 1.0f, A, 1, B, 1, 0.0f, F, 1);
    gemm::choice::run_on(p, false, false, 1, 0, 1, 1.0f, A, 1, B, 1, 0.0f, F, 1);
    CHECK(F[0] == 5);
  }
}

TEST_CASE_TEMPLATE("backend::host<gemm::chosen> equals a double-precision naive GEMM", T, float, double) {
  backend::host<gemm::chosen> be;
  worst_error<T>([&be](const gemm_case& c, T alpha, const T* A, index_t lda, const T* B, index_t ldb, T beta, T* C,
                       index_t ldc) { be.gemm(c.ta, c.tb, c.M, c.N, c.K, alpha, A, lda, B, ldb, beta, C, ldc); });
  if constexpr (std::is_same_v<T, float>) {
    const auto& d = gemm::chosen::decision();
    const auto compiled = gemm::choice::compiled_in();
    CHECK(std::find(compiled.begin(), compiled.end(), d.p) != compiled.end());
    CHECK(!d.reason.empty());
    MESSAGE(gemm::choice::describe(d));
  }
}

TEST_CASE("a provider that is not compiled in is refused by name") {
  const auto compiled = gemm::choice::compiled_in();
  for (provider p : gemm::choice::every_provider) {
    if (std::find(compiled.begin(), compiled.end(), p) != compiled.end()) continue;
    float a = 1, b = 1, c = 0;
    const std::string message = std::string(gemm::choice::name_of(p)) + " GEMM provider is not compiled in";
    CHECK_THROWS_WITH_AS(gemm::choice::run_on(p, false, false, 1, 1, 1, 1.0f, &a, 1, &b, 1, 0.0f, &c, 1),
                         doctest::Contains(message.c_str()), lwcl::error);
  }
}

TEST_CASE("the decision is measured once, cached in a file, and read back from it") {
  scratch s("round_trip");
  scripted m{{{provider::openblas, 40}, {provider::onednn, 350}, {provider::blis, 200}}};
  const auto in = inputs_for(m, s.dir);
  const auto first = gemm::choice::decide(in);
  CHECK(first.p == provider::onednn);
  CHECK(first.measured);
  CHECK(m.calls == 1);
  CHECK(first.reason.find("8.75x openblas") != std::string::npos);
  CHECK(first.reason.find("at 2 threads") != std::string::npos);
  CHECK(first.reason.find("openblas core Haswell: no AVX-512 kernels") != std::string::npos);
  CHECK(first.reason.find("onednn isa cpu_isa_avx512_core_amx") != std::string::npos);
  CHECK(first.origin.find("cached in " + cache_file_of(in).string()) != std::string::npos);
  // One file, nothing left of the temporary it was written through.
  REQUIRE(s.files().size() == 1);
  CHECK(s.files().front() == cache_file_of(in));
  CHECK(read_text(cache_file_of(in)).rfind("lwcl gemm choice v1\n", 0) == 0);
  REQUIRE(s.locks().size() == 1);
  const fs::path lock_file = fs::path(cache_file_of(in)) += ".lock";
  CHECK(s.locks().front() == lock_file);

  const auto second = gemm::choice::decide(in);
  CHECK(m.calls == 1);
  CHECK(!second.measured);
  CHECK(second.p == provider::onednn);
  CHECK(second.reason == first.reason);
  CHECK(second.origin == "cached in " + cache_file_of(in).string());
  CHECK(gemm::choice::describe(second) ==
        "lwcl gemm: onednn (" + first.reason + ") [cached in " + cache_file_of(in).string() + "]");

  // Another thread count, provider set or processor is another key, hence another file and a measurement.
  auto one_thread = in;
  one_thread.threads = 1;
  auto without_blis = in;
  without_blis.providers = {provider::openblas, provider::onednn};
  auto other_cpu = in;
  other_cpu.host.cpu_model_number = 143;
  for (const auto& other : {one_thread, without_blis, other_cpu}) {
    CHECK(cache_file_of(other) != cache_file_of(in));
    CHECK(gemm::choice::decide(other).measured);
  }
  CHECK(m.calls == 4);
  CHECK(s.files().size() == 4);
}

TEST_CASE("processes that decide at once agree: one measures, the others read its decision") {
  // Two deciders started together, whose measurements would pick different providers (a shared machine's
  // timings differ from run to run): the lock makes the second wait and read the first one's cache, so
  // the programs of one machine multiply with the same provider. Threads stand for processes here: each
  // opens the lock file itself, and flock locks belong to the open file, not the process.
  scratch s("concurrent");
  std::atomic<int> measuring{0}, overlapped{0};
  auto slow = [&](std::map<provider, double> gflops) {
    return [&, gflops](const std::vector<provider>& ps) {
      if (measuring.fetch_add(1) > 0) overlapped = 1;
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
      scripted m{gflops};
      auto t = m(ps);
      measuring.fetch_sub(1);
      return t;
    };
  };
  scripted unused{{}};
  auto a = inputs_for(unused, s.dir), b = a;
  a.measure = slow({{provider::openblas, 40}, {provider::onednn, 350}, {provider::blis, 200}});
  b.measure = slow({{provider::openblas, 40}, {provider::onednn, 200}, {provider::blis, 350}});
  std::optional<gemm::choice::decision> da, db;
  std::thread ta([&] { da = gemm::choice::decide(a); });
  std::thread tb([&] { db = gemm::choice::decide(b); });
  ta.join();
  tb.join();
  REQUIRE(da);
  REQUIRE(db);
  CHECK(overlapped == 0);
  CHECK(da->measured != db->measured);  // one measured, the other read the cache
  CHECK(da->p == db->p);
  CHECK(da->reason == db->reason);
  CHECK(s.files().size() == 1);
}

TEST_CASE("a corrupt, stale or foreign cache file is ignored and rewritten") {
  scratch s("corrupt");
  scripted m{{{provider::openblas, 100}, {provider::onednn, 50}, {provider::blis, 300}}};
  auto in = inputs_for(m, s.dir);
  in.providers = {provider::openblas, provider::onednn};  // blis "not compiled in" for this test
  const auto key = gemm::choice::cache_key(in.host, in.threads, in.providers);
  const std::string good = gemm::choice::cache_text(key, provider::onednn, "from an earlier run");
  const std::vector<std::string> bad = {
      "",
      "\x01\x02garbage\xff",
      "lwcl gemm choice v0\nkey=" + key + "\nprovider=onednn\nreason=old format\n",
      good.substr(0, good.find("provider=")),  // truncated
      "lwcl gemm choice v1\nkey=" + key + "\nprovider=mkl\nreason=unknown provider\n",
      "lwcl gemm choice v1\nkey=" + key + "\nprovider=blis\nreason=not compiled in\n",
      "lwcl gemm choice v1\nkey=host=elsewhere\nprovider=onednn\nreason=another machine's\n",
      good + "extra line without a field\n",
  };
  fs::create_directories(s.dir);
  int expected_calls = 0;
  for (const auto& text : bad) {
    CAPTURE(text);
    write_file_atomic(cache_file_of(in), text);
    const auto d = gemm::choice::decide(in);
    CHECK(d.measured);
    CHECK(m.calls == ++expected_calls);
    CHECK(d.p == provider::openblas);  // onednn is slower in this script; blis is not compiled in
    const auto back = gemm::choice::read_cache(cache_file_of(in), key, in.providers);
    REQUIRE(back.has_value());
    CHECK(back->p == provider::openblas);
  }
  // A whole file for this key is believed, whatever it says.
  write_file_atomic(cache_file_of(in), good);
  const auto d = gemm::choice::decide(in);
  CHECK(!d.measured);
  CHECK(d.p == provider::onednn);
  CHECK(d.reason == "from an earlier run");
}

TEST_CASE("OpenBLAS stays unless another provider is at least 5% faster") {
  scripted close{{{provider::openblas, 100}, {provider::onednn, 103}, {provider::blis, 90}}};
  const auto kept = gemm::choice::decide(inputs_for(close, {}));
  CHECK(kept.p == provider::openblas);
  CHECK(kept.reason.find("onednn only 1.03x openblas, within the 1.05x margin") != std::string::npos);
  CHECK(kept.origin.find("not cached: neither XDG_CACHE_HOME nor HOME is set") != std::string::npos);
  scripted clear{{{provider::openblas, 100}, {provider::onednn, 90}, {provider::blis, 110}}};
  CHECK(gemm::choice::decide(inputs_for(clear, {})).p == provider::blis);

  // A provider that measure() stopped timing (incomplete) is never picked.
  std::vector<gemm::choice::timing> t(2);
  t[0].p = provider::openblas;
  t[0].seconds = {1, 1, 1};
  t[1].p = provider::onednn;
  t[1].seconds[0] = 0.1;
  CHECK(!t[1].complete());
  CHECK(gemm::choice::pick(t) == provider::openblas);
  t.push_back(t[0]);
  t[2].p = provider::blis;
  t[2].seconds = {0.25, 0.25, 0.25};
  CHECK(gemm::choice::pick(t) == provider::blis);
  const auto why = gemm::choice::explain(t, provider::blis, xeon(), 1);
  CHECK(why.find("measured 4x openblas on 3 shape classes at 1 thread") == 0);
  CHECK(why.find("onednn") != std::string::npos);
  CHECK(why.find("(stopped: over 2x behind)") != std::string::npos);
}

TEST_CASE("LWCL_GEMM forces a provider, and an unknown or absent one is refused with the choices") {
  scratch s("forced");
  scripted m{{{provider::openblas, 100}, {provider::onednn, 300}, {provider::blis, 200}}};
  auto in = inputs_for(m, s.dir);
  for (const char* name : {"openblas", "onednn", "blis"}) {
    in.forced = name;
    const auto d = gemm::choice::decide(in);
    CHECK(gemm::choice::name_of(d.p) == name);
    CHECK(!d.measured);
    CHECK(d.origin == std::string("LWCL_GEMM=") + name);
  }
  CHECK(m.calls == 0);
  CHECK(s.files().empty());
  in.forced = "auto";
  CHECK(gemm::choice::decide(in).p == provider::onednn);
  CHECK(m.calls == 1);

  in.forced = "mkl";
  CHECK_THROWS_WITH_AS(gemm::choice::decide(in),
                       "LWCL_GEMM=mkl: not a GEMM provider; expected one of auto, openblas, onednn, blis "
                       "(providers known: openblas, onednn, blis)",
                       lwcl::error);
  in.forced = "OneDNN";  // names are lower case
  CHECK_THROWS_WITH_AS(gemm::choice::decide(in), doctest::Contains("LWCL_GEMM=OneDNN: not a GEMM provider"), lwcl::error);
  in.providers = {provider::openblas};
  in.forced = "onednn";
  CHECK_THROWS_WITH_AS(gemm::choice::decide(in),
                       "LWCL_GEMM=onednn: that GEMM provider is not compiled into this program (its library was not "
                       "found when it was built); expected one of auto, openblas",
                       lwcl::error);
}

TEST_CASE("the environment: LWCL_GEMM, XDG_CACHE_HOME and HOME") {
  // Saved and restored: later test cases and the process's own decision see the environment as it was.
  auto saved = [](const char* name) -> std::optional<std::string> {
    const char* v = std::getenv(name);
    return v ? std::optional<std::string>(v) : std::nullopt;
  };
  const auto gemm_env = saved("LWCL_GEMM"), xdg = saved("XDG_CACHE_HOME"), home = saved("HOME");
  auto restore = [](const char* name, const std::optional<std::string>& v) {
    if (v) ::setenv(name, v->c_str(), 1);
    else ::unsetenv(name);
  };
  ::setenv("LWCL_GEMM", "blis", 1);
  ::setenv("XDG_CACHE_HOME", "/tmp/lwcl-xdg", 1);
  ::setenv("HOME", "/tmp/lwcl-home", 1);
  const auto in = gemm::choice::inputs_from_environment();
  CHECK(in.forced == "blis");
  CHECK(in.cache_dir == fs::path("/tmp/lwcl-xdg/lwcl/gemm"));
  CHECK(in.providers == gemm::choice::compiled_in());
  CHECK(in.threads >= 1);
  CHECK(!in.host.libraries.empty());
  ::setenv("XDG_CACHE_HOME", "relative/dir", 1);  // ignored, as the XDG specification asks
  CHECK(gemm::choice::default_cache_dir() == fs::path("/tmp/lwcl-home/.cache/lwcl/gemm"));
  ::unsetenv("XDG_CACHE_HOME");
  ::unsetenv("HOME");
  CHECK(gemm::choice::default_cache_dir().empty());
  restore("LWCL_GEMM", gemm_env);
  restore("XDG_CACHE_HOME", xdg);
  restore("HOME", home);
}

TEST_CASE("with OpenBLAS alone there is nothing to measure") {
  scratch s("alone");
  scripted m{{{provider::openblas, 100}}};
  auto in = inputs_for(m, s.dir);
  in.providers = {provider::openblas};
  const auto d = gemm::choice::decide(in);
  CHECK(d.p == provider::openblas);
  CHECK(!d.measured);
  CHECK(m.calls == 0);
  CHECK(s.files().empty());
  CHECK(d.reason.find("the only provider compiled in") != std::string::npos);
}

TEST_CASE("the OpenBLAS note names fallback kernels only on an AVX-512 CPU") {
  auto m = xeon();
  CHECK(gemm::choice::openblas_core_note(m) ==
        "openblas core Haswell: no AVX-512 kernels on this AVX-512 CPU (openblas_get_corename)");
  m.openblas_core = "SkylakeX";
  CHECK(gemm::choice::openblas_core_note(m) == "openblas core SkylakeX");
  m.openblas_core = "Prescott";
  m.openblas_coretype = "Prescott";
  CHECK(gemm::choice::openblas_core_note(m).find("(OPENBLAS_CORETYPE=Prescott): no AVX-512 kernels") != std::string::npos);
  m.features = {"avx2", "fma"};
  m.openblas_core = "Zen";
  m.openblas_coretype.clear();
  CHECK(gemm::choice::openblas_core_note(m) == "openblas core Zen");
}

TEST_CASE("cache file names are the sanitised host name and a fingerprint of the key") {
  auto m = xeon();
  m.hostname = "a/b c";
  const auto name = gemm::choice::cache_file_name(m, "key");
  CHECK(name.rfind("a_b_c-", 0) == 0);
  CHECK(name.size() == std::string("a_b_c-").size() + 16 + 4);
  CHECK(name != gemm::choice::cache_file_name(m, "key2"));
  CHECK(gemm::choice::cache_key(m, 2, {provider::openblas}).find('\n') == std::string::npos);
}

TEST_CASE("the real measurement times every compiled-in provider on every shape class") {
  const auto providers = gemm::choice::compiled_in();
  const auto t = gemm::choice::measure(providers, 1);
  REQUIRE(t.size() == providers.size());
  int complete = 0;
  for (std::size_t i = 0; i < t.size(); ++i) {
    CHECK(t[i].p == providers[i]);
    complete += t[i].complete();
    CHECK(t[i].gflops() >= 0);
  }
  CHECK(complete >= 1);  // the fastest at least
  const provider p = gemm::choice::pick(t);
  CHECK(std::find(providers.begin(), providers.end(), p) != providers.end());
  MESSAGE(gemm::choice::explain(t, p, gemm::choice::this_machine(), omp_get_max_threads()));
}

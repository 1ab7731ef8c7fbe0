#pragma once
// The decision behind gemm::chosen: which compiled-in f32 GEMM provider (OpenBLAS, oneDNN, BLIS) is the
// fastest on this machine, from the CPU's features and a short measurement on the models' shape classes,
// remembered per machine, processor, thread count and provider set in a small text file. Everything takes
// its environment as arguments, so tests drive every path; gemm_chosen.hpp decides once per process.

#include <omp.h>
#include <unistd.h>
#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

#include <algorithm>
#include <array>
#include <cctype>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "lwcl/backend/host/gemm_openblas.hpp"
#include "lwcl/core/config.hpp"
#include "lwcl/core/error.hpp"
#include "lwcl/core/fs.hpp"

// A provider is compiled in when the build found and linked its library (cmake/lwcl_dependencies.cmake
// defines LWCL_HAVE_ONEDNN / LWCL_HAVE_BLIS) and its header is reachable.
#if defined(LWCL_HAVE_ONEDNN) && LWCL_HAVE_ONEDNN && __has_include(<oneapi/dnnl/dnnl.h>)
#define LWCL_GEMM_WITH_ONEDNN 1
#include "lwcl/backend/host/gemm_onednn.hpp"
#include "lwcl/backend/host/gemm_onednn_bf16.hpp"
#else
#define LWCL_GEMM_WITH_ONEDNN 0
#endif
#if defined(LWCL_HAVE_BLIS) && LWCL_HAVE_BLIS && __has_include(<blis.h>)
#define LWCL_GEMM_WITH_BLIS 1
#include "lwcl/backend/host/gemm_blis.hpp"
#else
#define LWCL_GEMM_WITH_BLIS 0
#endif

namespace lwcl::gemm::choice {

// ---- providers ----------------------------------------------------------------------------------------
enum class provider : std::uint8_t { openblas, onednn, blis };
inline constexpr std::array<provider, 3> every_provider = {provider::openblas, provider::onednn, provider::blis};

constexpr std::string_view name_of(provider p) {
  switch (p) {
    case provider::openblas: return "openblas";
    case provider::onednn: return "onednn";
    case provider::blis: return "blis";
  }
  return "?";
}

inline std::optional<provider> provider_named(std::string_view name) {
  for (provider p : every_provider)
    if (name_of(p) == name) return p;
  return std::nullopt;
}

// The providers this program was built with, OpenBLAS first.
inline std::vector<provider> compiled_in() {
  std::vector<provider> v = {provider::openblas};
  if (LWCL_GEMM_WITH_ONEDNN) v.push_back(provider::onednn);
  if (LWCL_GEMM_WITH_BLIS) v.push_back(provider::blis);
  return v;
}

inline std::string names_of(const std::vector<provider>& ps, std::string_view separator = ", ") {
  std::string s;
  for (provider p : ps) {
    if (!s.empty()) s += separator;
    s += name_of(p);
  }
  return s;
}

// One row-major f32 GEMM on provider p (the providers' run() contract).
inline void run_on(provider p, bool ta, bool tb, index_t M, index_t N, index_t K, float alpha, const float* A, index_t lda,
                   const float* B, index_t ldb, float beta, float* C, index_t ldc) {
  switch (p) {
    case provider::openblas: openblas::run(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc); return;
#if LWCL_GEMM_WITH_ONEDNN
    case provider::onednn: onednn::run(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc); return;
#endif
#if LWCL_GEMM_WITH_BLIS
    case provider::blis: blis::run(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc); return;
#endif
    default: break;
  }
  fail("gemm::choice::run_on: the ", name_of(p), " GEMM provider is not compiled into this program (compiled in: ",
       names_of(compiled_in()), ")");
}

// ---- the machine ----------------------------------------------------------------------------------------
// What identifies this machine's GEMM speed, and what explains a choice.
struct machine {
  std::string hostname;
  std::string cpu_model;  // /proc/cpuinfo "model name"
  int cpu_family = -1, cpu_model_number = -1;
  std::vector<std::string> features;  // those of avx2, fma, avx512f, avx512_bf16, amx_tile the CPU has
  std::string openblas_core;          // openblas_get_corename(): the kernels OpenBLAS picked
  std::string openblas_coretype;      // OPENBLAS_CORETYPE as the environment sets it ("" when unset)
  std::string libraries;              // the providers' versions and build options
  std::string onednn_isa;             // oneDNN's effective instruction set ("" without oneDNN)

  bool has(std::string_view feature) const { return std::find(features.begin(), features.end(), feature) != features.end(); }
  // bf16 arithmetic oneDNN's kernels use (AVX512-BF16 or AMX); elsewhere oneDNN would emulate bf16.
  bool has_bf16() const { return has("avx512_bf16") || has("amx_tile"); }
};

namespace detail {

inline std::string trim(std::string_view s) {
  const auto b = s.find_first_not_of(" \t\r\n");
  if (b == std::string_view::npos) return {};
  const auto e = s.find_last_not_of(" \t\r\n");
  return std::string(s.substr(b, e - b + 1));
}

// Line breaks would split a cache file's record; the key and reason stay on one line.
inline std::string one_line(std::string s) {
  std::replace(s.begin(), s.end(), '\n', ' ');
  std::replace(s.begin(), s.end(), '\r', ' ');
  return s;
}

inline int to_int(const std::string& s) {
  char* end = nullptr;
  const long v = std::strtol(s.c_str(), &end, 10);
  return end != s.c_str() ? static_cast<int>(v) : -1;
}

// The first processor's "model name", "cpu family" and "model" from /proc/cpuinfo (Linux).
inline void read_cpuinfo(machine& m) {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (trim(line).empty()) break;  // the end of the first processor's block
    const auto colon = line.find(':');
    if (colon == std::string::npos) continue;
    const std::string field = trim(std::string_view(line).substr(0, colon));
    const std::string value = trim(std::string_view(line).substr(colon + 1));
    if (field == "model name") m.cpu_model = value;
    else if (field == "cpu family") m.cpu_family = to_int(value);
    else if (field == "model") m.cpu_model_number = to_int(value);
  }
}

inline std::vector<std::string> cpu_features() {
  std::vector<std::string> f;
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx2")) f.emplace_back("avx2");
  if (__builtin_cpu_supports("fma")) f.emplace_back("fma");
  if (__builtin_cpu_supports("avx512f")) f.emplace_back("avx512f");
  if (__builtin_cpu_supports("avx512bf16")) f.emplace_back("avx512_bf16");
  // AMX from cpuid itself (leaf 7, EDX bit 24): clang 14's __builtin_cpu_supports does not know it.
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (__get_cpuid_count(7, 0, &a, &b, &c, &d) && (d & (1u << 24))) f.emplace_back("amx_tile");
#endif
  return f;
}

// FNV-1a: a stable, dependency-free fingerprint of the cache key for the file name.
inline std::uint64_t fnv1a(std::string_view s) {
  std::uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

}  // namespace detail

inline machine this_machine() {
  machine m;
  std::array<char, 256> host{};
  if (::gethostname(host.data(), host.size() - 1) == 0) m.hostname = host.data();
  detail::read_cpuinfo(m);
  m.features = detail::cpu_features();
  if (const char* core = openblas_get_corename()) m.openblas_core = detail::trim(core);
  if (const char* v = std::getenv("OPENBLAS_CORETYPE")) m.openblas_coretype = v;
  if (const char* config = openblas_get_config()) m.libraries = detail::trim(config);
#if LWCL_GEMM_WITH_ONEDNN
  const dnnl_version_t* v = dnnl_version();
  m.libraries += lwcl::detail::concat("; oneDNN ", v->major, '.', v->minor, '.', v->patch);
  m.onednn_isa = dnnl_cpu_isa2str(dnnl_get_effective_cpu_isa());
#endif
#if LWCL_GEMM_WITH_BLIS
  m.libraries += lwcl::detail::concat("; BLIS ", bli_info_get_version_str(), ' ', bli_arch_string(bli_arch_query_id()));
#endif
  return m;
}

// OpenBLAS picks its kernels from the CPU model when it loads; a release older than the CPU falls back to
// older kernels (Debian's 0.3.21 runs Prescott or Haswell kernels on family 6 model 207 Xeons). On a CPU
// with AVX-512 that is worth saying, since it is usually why another provider wins.
inline std::string openblas_core_note(const machine& m) {
  std::string core = m.openblas_core;
  std::transform(core.begin(), core.end(), core.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  const bool avx512_kernels = core == "skylakex" || core == "cooperlake" || core == "sapphirerapids";
  std::string note = "openblas core " + (m.openblas_core.empty() ? std::string("unknown") : m.openblas_core);
  if (!m.openblas_coretype.empty()) note += " (OPENBLAS_CORETYPE=" + m.openblas_coretype + ")";
  if (m.has("avx512f") && !avx512_kernels) note += ": no AVX-512 kernels on this AVX-512 CPU (openblas_get_corename)";
  return note;
}

// What the cached choice is valid for: the machine, the processor, the thread count, the providers
// compiled in and their versions, and OPENBLAS_CORETYPE (which changes OpenBLAS's kernels).
inline std::string cache_key(const machine& m, int threads, const std::vector<provider>& providers) {
  return detail::one_line(lwcl::detail::concat("host=", m.hostname, " | cpu=", m.cpu_model, " | family=", m.cpu_family,
                                         " | model=", m.cpu_model_number, " | threads=", threads,
                                         " | providers=", names_of(providers, ","), " | libraries=", m.libraries,
                                         " | OPENBLAS_CORETYPE=", m.openblas_coretype));
}

// <hostname>-<fingerprint of the key>.txt: one file per key, readable by whoever lists the folder.
inline std::string cache_file_name(const machine& m, const std::string& key) {
  std::string host;
  for (char c : m.hostname)
    host += (std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '.' || c == '_') ? c : '_';
  if (host.empty()) host = "host";
  std::array<char, 17> hex{};
  std::snprintf(hex.data(), hex.size(), "%016llx", static_cast<unsigned long long>(detail::fnv1a(key)));
  return host + "-" + hex.data() + ".txt";
}

// ${XDG_CACHE_HOME:-$HOME/.cache}/lwcl/gemm; empty (no cache) when neither is set. A relative
// XDG_CACHE_HOME is ignored, as the XDG specification asks.
inline std::filesystem::path default_cache_dir() {
  const char* xdg = std::getenv("XDG_CACHE_HOME");
  if (xdg && *xdg && std::filesystem::path(xdg).is_absolute()) return std::filesystem::path(xdg) / "lwcl" / "gemm";
  const char* home = std::getenv("HOME");
  if (home && *home) return std::filesystem::path(home) / ".cache" / "lwcl" / "gemm";
  return {};
}

// ---- the measurement --------------------------------------------------------------------------------------
// The GEMM layouts a transformer layer runs, at 512 tokens of a GPT-2-small-sized model (C = 768, FFN
// 3072): linear_backward's input gradient (N, N), linear_forward's FFN up-projection (N, T: the weight is
// transposed), linear_backward's weight gradient (T, N).
struct shape_class {
  std::string_view name;
  bool ta, tb;
  index_t M, N, K;
  double flops() const { return 2.0 * static_cast<double>(M) * static_cast<double>(N) * static_cast<double>(K); }
};
inline constexpr std::array<shape_class, 3> shape_classes = {{
    {"projection [512x768]x[768x768]", false, false, 512, 768, 768},
    {"ffn [512x768]x[3072x768]^T", false, true, 512, 3072, 768},
    {"weight grad [512x768]^Tx[512x768]", true, false, 768, 768, 512},
}};

// A provider's best time on each shape class, in seconds; +infinity for a shape class it was not timed on
// (measure() stops timing a provider that is far behind).
struct timing {
  provider p = provider::openblas;
  std::array<double, shape_classes.size()> seconds = [] {
    std::array<double, shape_classes.size()> a{};
    a.fill(std::numeric_limits<double>::infinity());
    return a;
  }();
  bool complete() const {
    return std::all_of(seconds.begin(), seconds.end(), [](double s) { return std::isfinite(s); });
  }
  double total() const {
    double t = 0;
    for (double s : seconds) t += s;
    return t;
  }
  double gflops(std::size_t shape) const { return shape_classes[shape].flops() / seconds[shape] * 1e-9; }
  // Over the shape classes it was timed on.
  double gflops() const {
    double f = 0, t = 0;
    for (std::size_t s = 0; s < shape_classes.size(); ++s)
      if (std::isfinite(seconds[s])) f += shape_classes[s].flops(), t += seconds[s];
    return t > 0 ? f / t * 1e-9 : 0.0;
  }
};

// Times every provider on every shape class at the calling thread's OpenMP thread count, keeping each
// shape's best time: a warm-up of 256^3 GEMMs in each layout (oneDNN generates its kernels, BLIS starts its
// threads), then `rounds` rounds in rotating provider order (none begun after `budget_s`). A provider other
// than OpenBLAS that is `behind` times as slow as the best so far on a shape class (1.5x that on the
// warm-up) is timed no further: it cannot come within the margin that would make it worth choosing, and
// a collapsed provider (BLIS's threads on a shared core ran at 3-7 GFLOP/s here) would otherwise cost most
// of the time. About 4 GFLOP per provider and round: 0.1-0.2 s in all at 170 GFLOP/s. bench_gemm_choice
// times every provider in full (behind = infinity).
inline std::vector<timing> measure(const std::vector<provider>& providers, int rounds = 2, double budget_s = 0.5,
                                   double behind = 2.0) {
  std::size_t a_size = 0, b_size = 0, c_size = 0;
  for (const auto& s : shape_classes) {
    a_size = std::max(a_size, static_cast<std::size_t>(s.M * s.K));
    b_size = std::max(b_size, static_cast<std::size_t>(s.K * s.N));
    c_size = std::max(c_size, static_cast<std::size_t>(s.M * s.N));
  }
  auto fill = [](std::size_t n, std::uint32_t seed) {
    std::vector<float> v(n);
    for (std::size_t i = 0; i < n; ++i)
      v[i] = static_cast<float>((static_cast<std::uint32_t>(i) * 2654435761u + seed) % 1024u) / 1024.0f - 0.5f;
    return v;
  };
  const std::vector<float> A = fill(a_size, 1), B = fill(b_size, 2);
  std::vector<float> C(c_size, 0.0f);
  auto run = [&](provider p, const shape_class& s) {
    const index_t lda = s.ta ? s.M : s.K, ldb = s.tb ? s.K : s.N;
    run_on(p, s.ta, s.tb, s.M, s.N, s.K, 1.0f, A.data(), lda, B.data(), ldb, 0.0f, C.data(), s.N);
  };

  auto seconds_of = [](auto&& f) {
    const auto t0 = std::chrono::steady_clock::now();
    f();
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  };
  auto warm_up = [&](provider p) {
    for (const auto& s : shape_classes) run(p, {s.name, s.ta, s.tb, 256, 256, 256});
  };

  std::vector<timing> t(providers.size());
  std::vector<bool> active(providers.size(), true);
  std::vector<double> warm(providers.size());
  for (std::size_t i = 0; i < providers.size(); ++i) {
    t[i].p = providers[i];
    warm_up(providers[i]);
    warm[i] = seconds_of([&] { warm_up(providers[i]); });
  }
  // The second warm-up, timed, screens out a provider that has collapsed (more leniently: small GEMMs say
  // less about large ones).
  const double fastest_warm = *std::min_element(warm.begin(), warm.end());
  for (std::size_t i = 0; i < providers.size(); ++i) active[i] = warm[i] <= 1.5 * behind * fastest_warm;
  // OpenBLAS, the baseline every reason is stated against, is always timed in full: where it runs generic
  // kernels (40 GFLOP/s) that costs about 0.2 s, and the reason can say by how much it lost.
  auto keep_timing = [&](std::size_t i, bool ok) { active[i] = ok || providers[i] == provider::openblas; };
  for (std::size_t i = 0; i < providers.size(); ++i) keep_timing(i, active[i]);
  const auto start = std::chrono::steady_clock::now();
  for (int r = 0; r < rounds; ++r) {
    if (r > 0 && std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() > budget_s) break;
    for (std::size_t j = 0; j < providers.size(); ++j) {
      const std::size_t i = (j + static_cast<std::size_t>(r)) % providers.size();
      for (std::size_t s = 0; s < shape_classes.size() && active[i]; ++s) {
        const double dt = seconds_of([&] { run(providers[i], shape_classes[s]); });
        t[i].seconds[s] = std::min(t[i].seconds[s], std::max(dt, 1e-9));
        double best = t[i].seconds[s];
        for (const auto& x : t) best = std::min(best, x.seconds[s]);
        keep_timing(i, t[i].seconds[s] <= behind * best);
      }
    }
  }
  return t;
}

// ---- the decision -------------------------------------------------------------------------------------
// Another provider replaces OpenBLAS only when it is this much faster over the shape classes: closer
// than that, repeated measurements on a shared machine disagree (on the 2-core EPYC here oneDNN measured
// 184-190 GFLOP/s against OpenBLAS's 167-183), and OpenBLAS is the provider the project knows best.
inline constexpr double switch_margin = 1.05;

// How many times faster `a` is than `b` over the shape classes both were timed on.
inline double speedup(const timing& a, const timing& b) {
  double ta = 0, tb = 0;
  for (std::size_t s = 0; s < shape_classes.size(); ++s)
    if (std::isfinite(a.seconds[s]) && std::isfinite(b.seconds[s])) ta += a.seconds[s], tb += b.seconds[s];
  return ta > 0 ? tb / ta : 0.0;
}

inline provider pick(const std::vector<timing>& t) {
  check(!t.empty(), "gemm::choice::pick: no provider was measured");
  const timing* best = nullptr;
  const timing* incumbent = nullptr;
  for (const auto& x : t) {
    if (!x.complete()) continue;
    if (!best || x.total() < best->total()) best = &x;
    if (x.p == provider::openblas) incumbent = &x;
  }
  check(best != nullptr, "gemm::choice::pick: no provider was timed on every shape class");
  if (incumbent && incumbent->total() < switch_margin * best->total()) return provider::openblas;
  return best->p;
}

// Why `chosen`, in one line: "measured 1.09x openblas on 3 shape classes at 2 threads (GFLOP/s openblas 171
// onednn 186 blis 150); openblas core Zen; onednn isa cpu_isa_avx2; cpu avx2 fma".
inline std::string explain(const std::vector<timing>& t, provider chosen, const machine& m, int threads) {
  const timing* openblas_t = nullptr;
  const timing* chosen_t = nullptr;
  const timing* runner_up = nullptr;
  for (const auto& x : t) {
    if (x.p == provider::openblas) openblas_t = &x;
    if (x.p == chosen) chosen_t = &x;
    if (x.p != chosen && x.complete() && (!runner_up || x.total() < runner_up->total())) runner_up = &x;
  }
  std::ostringstream os;
  os.precision(3);
  if (chosen != provider::openblas && openblas_t && chosen_t)
    os << "measured " << speedup(*chosen_t, *openblas_t) << "x openblas";
  else if (runner_up && chosen_t && runner_up->total() < chosen_t->total())
    os << "measured " << name_of(runner_up->p) << " only " << speedup(*runner_up, *chosen_t)
       << "x openblas, within the " << switch_margin << "x margin";
  else
    os << "measured fastest";
  os << " on " << shape_classes.size() << " shape classes at " << threads << (threads == 1 ? " thread" : " threads")
     << " (GFLOP/s";
  for (const auto& x : t)
    os << ' ' << name_of(x.p) << ' ' << static_cast<long>(x.gflops() + 0.5) << (x.complete() ? "" : " (stopped: over 2x behind)");
  os << "); " << openblas_core_note(m);
  if (!m.onednn_isa.empty()) os << "; onednn isa " << m.onednn_isa;
  os << "; cpu";
  for (const auto& f : m.features) os << ' ' << f;
  if (m.features.empty()) os << " without avx2";
  return detail::one_line(os.str());
}

// LWCL_GEMM's value: "" or "auto" lets the measurement decide; a provider's name forces it.
inline std::optional<provider> parse_forced(std::string_view value, const std::vector<provider>& compiled) {
  if (value.empty() || value == "auto") return std::nullopt;
  const auto p = provider_named(value);
  check(p.has_value(), "LWCL_GEMM=", value, ": not a GEMM provider; expected one of auto, ", names_of(compiled),
        " (providers known: ", names_of({every_provider.begin(), every_provider.end()}), ")");
  check(std::find(compiled.begin(), compiled.end(), *p) != compiled.end(), "LWCL_GEMM=", value,
        ": that GEMM provider is not compiled into this program (its library was not found when it was built); "
        "expected one of auto, ",
        names_of(compiled));
  return p;
}

// How a precision request is named in messages: LWCL_GEMM_PRECISION=bf16, or --dtype bf16 (a program's
// command line).
inline std::string precision_named(std::string_view source, std::string_view value) {
  return lwcl::detail::concat(source, source.rfind("--", 0) == 0 ? " " : "=", value);
}

// A requested precision (LWCL_GEMM_PRECISION's value, or --dtype's: `source` names it): "" or "f32" keeps
// every f32 GEMM in f32; "bf16" rounds its operands to bf16 and accumulates in f32 (gemm::onednn_bf16),
// where oneDNN is compiled in and the CPU has AVX512-BF16 or AMX (elsewhere oneDNN would emulate bf16,
// slower than f32), and LWCL_GEMM forces no other provider.
inline bool parse_precision(std::string_view value, const machine& host, const std::vector<provider>& compiled,
                            std::string_view forced, std::string_view source = "LWCL_GEMM_PRECISION") {
  if (value.empty() || value == "f32") return false;
  const std::string named = precision_named(source, value);
  check(value == "bf16", named, ": expected f32 or bf16");
  check(std::find(compiled.begin(), compiled.end(), provider::onednn) != compiled.end(), named,
        " runs the GEMMs on oneDNN's matmul, which is not compiled into this program "
        "(libdnnl-dev was not found when it was built)");
  check(host.has_bf16(), named, " needs a CPU with AVX512-BF16 or AMX; this one (",
        host.cpu_model.empty() ? "unknown model" : host.cpu_model, ") has neither");
  check(forced.empty() || forced == "auto" || forced == "onednn", named, " runs on oneDNN, but LWCL_GEMM=", forced,
        " forces another provider");
  return true;
}

// The precision a program's command line asked for (--dtype), which takes the place of
// LWCL_GEMM_PRECISION for the process; empty: none asked for.
struct precision_request {
  std::string value, source;
};
inline precision_request& requested_precision() {
  static precision_request r;
  return r;
}
// Whether the process's GEMMs run in bf16, once gemm::chosen has decided (its first f32 GEMM): a request
// after that cannot change them.
inline std::optional<bool>& decided_bf16() {
  static std::optional<bool> d;
  return d;
}

// Asks for the GEMMs' precision from a command line (`source`: the option's name): checked at once on
// this machine and build (a clear error, not one at the first GEMM), and refused once the GEMMs have
// decided otherwise. Not thread-safe: for a program's start, while one thread runs.
inline void request_precision(const std::string& value, const std::string& source) {
  const char* forced = std::getenv("LWCL_GEMM");
  const bool bf16 = parse_precision(value, this_machine(), compiled_in(), forced ? forced : "", source);
  check(!decided_bf16() || *decided_bf16() == bf16, precision_named(source, value), ": the GEMMs of this process "
        "already run in ", *decided_bf16() ? "bf16" : "f32", " (the precision is chosen before the first GEMM)");
  requested_precision() = {value, source};
}

// The cache file: a header line, then key=, provider= and reason= lines.
inline constexpr std::string_view cache_header = "lwcl gemm choice v1";

inline std::string cache_text(const std::string& key, provider p, const std::string& reason) {
  return lwcl::detail::concat(cache_header, "\nkey=", key, "\nprovider=", name_of(p), "\nreason=", detail::one_line(reason), "\n");
}

struct cached {
  provider p;
  std::string reason;
};

// The file's choice when it is whole, made for `key`, and names a provider compiled in; otherwise
// nothing (a missing, corrupt, stale or foreign file is measured again and rewritten).
inline std::optional<cached> read_cache(const std::filesystem::path& file, const std::string& key,
                                        const std::vector<provider>& compiled) {
  std::ifstream in(file);
  std::string line;
  if (!in || !std::getline(in, line) || line != cache_header) return std::nullopt;
  std::optional<std::string> k, name, reason;
  while (std::getline(in, line)) {
    const auto eq = line.find('=');
    if (eq == std::string::npos) return std::nullopt;
    const std::string field = line.substr(0, eq), value = line.substr(eq + 1);
    if (field == "key") k = value;
    else if (field == "provider") name = value;
    else if (field == "reason") reason = value;
    else return std::nullopt;
  }
  if (!k || *k != key || !name || !reason) return std::nullopt;
  const auto p = provider_named(*name);
  if (!p || std::find(compiled.begin(), compiled.end(), *p) == compiled.end()) return std::nullopt;
  return cached{*p, *reason};
}

// What decide() needs from the outside world; inputs_from_environment() fills it for this process.
struct inputs {
  machine host;
  int threads = 1;
  std::vector<provider> providers;   // compiled in
  std::string forced;                // LWCL_GEMM ("" when unset)
  std::string precision;             // LWCL_GEMM_PRECISION, or --dtype where a program asked ("": f32)
  std::string precision_source = "LWCL_GEMM_PRECISION";  // which of the two, for messages and the origin
  std::filesystem::path cache_dir;   // empty: no cache
  std::function<std::vector<timing>(const std::vector<provider>&)> measure = [](const std::vector<provider>& ps) {
    return lwcl::gemm::choice::measure(ps);
  };
};

struct decision {
  provider p = provider::openblas;
  std::string reason;  // why this provider
  std::string origin;  // where the decision came from: measured (and cached where), a cache file, LWCL_GEMM
  bool measured = false;
  bool bf16 = false;   // every f32 GEMM with bf16 operands and f32 accumulation (gemm::onednn_bf16)
};

// The threads a GEMM called here would get: one inside a parallel region that cannot nest.
inline int current_threads() {
  return omp_get_level() >= omp_get_max_active_levels() ? 1 : omp_get_max_threads();
}

inline inputs inputs_from_environment() {
  inputs in;
  in.host = this_machine();
  in.threads = current_threads();
  in.providers = compiled_in();
  if (const char* v = std::getenv("LWCL_GEMM")) in.forced = v;
  if (const auto& r = requested_precision(); !r.source.empty()) {
    in.precision = r.value;
    in.precision_source = r.source;
  } else if (const char* v = std::getenv("LWCL_GEMM_PRECISION")) {
    in.precision = v;
  }
  in.cache_dir = default_cache_dir();
  return in;
}

inline decision decide(const inputs& in) {
  if (parse_precision(in.precision, in.host, in.providers, in.forced, in.precision_source)) {
    std::string cpu;
    for (const auto& f : in.host.features) cpu += " " + f;
    return {provider::onednn,
            "bf16 operands, f32 accumulation: oneDNN's matmul; onednn isa " + in.host.onednn_isa + "; cpu" + cpu,
            precision_named(in.precision_source, in.precision), false, true};
  }
  if (const auto forced = parse_forced(in.forced, in.providers))
    return {*forced, "forced", "LWCL_GEMM=" + in.forced, false};
  if (in.providers.size() == 1)
    return {in.providers.front(), "the only provider compiled in; " + openblas_core_note(in.host), "built so", false};
  const std::string key = cache_key(in.host, in.threads, in.providers);
  std::filesystem::path file;
  std::optional<file_lock> lock;  // held until the decision is cached: processes started together agree
  if (!in.cache_dir.empty()) {
    file = in.cache_dir / cache_file_name(in.host, key);
    std::error_code ec;
    std::filesystem::create_directories(in.cache_dir, ec);
    lock.emplace(std::filesystem::path(file) += ".lock");
    if (const auto c = read_cache(file, key, in.providers)) return {c->p, c->reason, "cached in " + file.string(), false};
  }
  const auto start = std::chrono::steady_clock::now();
  const std::vector<timing> t = in.measure(in.providers);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  decision c;
  c.p = pick(t);
  c.reason = explain(t, c.p, in.host, in.threads);
  c.measured = true;
  c.origin = lwcl::detail::concat("measured in ", static_cast<int>(seconds * 1000 + 0.5), " ms");
  if (file.empty()) {
    c.origin += ", not cached: neither XDG_CACHE_HOME nor HOME is set";
    return c;
  }
  try {
    std::filesystem::create_directories(in.cache_dir);
    write_file_atomic(file, cache_text(key, c.p, c.reason), {.sync = durability::process, .unique_temporary = true});
    c.origin += ", cached in " + file.string();
  } catch (const std::exception& e) {  // an unwritable cache costs a measurement next time, nothing more
    c.origin += std::string(", not cached: ") + e.what();
  }
  return c;
}

// The line gemm::chosen prints once.
inline std::string describe(const decision& c) {
  return lwcl::detail::concat("lwcl gemm: ", name_of(c.p), c.bf16 ? " bf16" : "", " (", c.reason, ") [", c.origin, "]");
}

}  // namespace lwcl::gemm::choice

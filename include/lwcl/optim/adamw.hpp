#pragma once
// AdamW with decoupled weight decay, step for step what torch.optim.AdamW (amsgrad off) computes, as
// one element functor over a flat buffer: a model whose parameters are carved out of one allocation is
// updated by one call. Weight decay applies to the whole buffer; parameters that must not decay
// (biases, norms) go in a second buffer with a second adamw whose weight_decay is 0.
// Mixed precision: for bf16 parameters the optimiser keeps an f32 master copy and f32 moments, updates
// them from the bf16 gradient in f32, and rounds the master into the bf16 parameters, in the same pass.

#include <cmath>
#include <cstdint>
#include <cstring>
#include <istream>
#include <ostream>
#include <string_view>
#include <vector>

#include "lwcl/core/config.hpp"
#include "lwcl/core/math.hpp"
#include "lwcl/ops/common.hpp"
#include "lwcl/tensor/tensor.hpp"

namespace lwcl::optim {

struct adamw_config {
  double lr = 1e-3;  // the base rate; adamw_step takes the rate of each step (e.g. from a schedule)
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.01;
};

namespace kernel {

// The step-dependent scalars are computed once on the host in double and passed in, so the f32
// kernel rounds them once, as PyTorch does with its Python-float coefficients. T is the storage type of
// param and grad; the moments, the master copy and the arithmetic are in A = compute_t<T>.
template <class T>
struct adamw_update {
  using A = compute_t<T>;
  T* param;
  const T* grad;
  A* m;
  A* v;
  A* master;    // the f32 master weights of bf16 parameters; null when T is its own compute type
  A decay;      // 1 - lr * weight_decay, applied before the moment update (PyTorch's order)
  A beta1, one_minus_beta1;
  A beta2, one_minus_beta2;
  A step_size;  // lr / (1 - beta1^step)
  A bc2_sqrt;   // sqrt(1 - beta2^step)
  A eps;

  LWCL_HD void operator()(index_t i) const {
    const A g = grad[i];
    const A mi = m[i] * beta1 + one_minus_beta1 * g;
    const A vi = v[i] * beta2 + one_minus_beta2 * g * g;
    m[i] = mi;
    v[i] = vi;
    const A denom = math::sqrt(vi) / bc2_sqrt + eps;
    const A p = (master ? master[i] : A(param[i])) * decay - step_size * (mi / denom);
    if (master) master[i] = p;
    param[i] = T(p);
  }
};

// Widens bf16 parameters into the master copy.
template <class T>
struct widen_elem {
  compute_t<T>* dst;
  const T* src;
  LWCL_HD void operator()(index_t i) const { dst[i] = compute_t<T>(src[i]); }
};

}  // namespace kernel

inline void validate(const adamw_config& cfg, std::string_view who) {
  check(std::isfinite(cfg.lr) && cfg.lr >= 0, who, ": lr is ", cfg.lr, ", expected a finite value >= 0");
  check(cfg.beta1 >= 0 && cfg.beta1 < 1, who, ": beta1 is ", cfg.beta1, ", expected a value in [0, 1)");
  check(cfg.beta2 >= 0 && cfg.beta2 < 1, who, ": beta2 is ", cfg.beta2, ", expected a value in [0, 1)");
  check(std::isfinite(cfg.eps) && cfg.eps >= 0, who, ": eps is ", cfg.eps, ", expected a finite value >= 0");
  check(std::isfinite(cfg.weight_decay) && cfg.weight_decay >= 0, who, ": weight_decay is ", cfg.weight_decay,
        ", expected a finite value >= 0");
}

// One AdamW update of every element of param with gradient grad and moments m, v. param and grad share
// a dtype; m and v are its compute type (f32 for bf16 parameters), and `master` (f32, bf16 parameters
// only, else empty) holds the weights the update is applied to before they are rounded into param.
// `step` is 1-based: the number of updates including this one. `lr` is this step's rate; cfg.lr is not
// used here.
//   param *= 1 - lr * weight_decay
//   m = beta1 * m + (1 - beta1) * grad;  v = beta2 * v + (1 - beta2) * grad^2
//   param -= lr / (1 - beta1^step) * m / (sqrt(v) / sqrt(1 - beta2^step) + eps)
template <class Backend>
void adamw_step(Backend& be, const tensor& param, const tensor& grad, const tensor& m, const tensor& v,
                const adamw_config& cfg, long step, double lr, const tensor& master = tensor()) {
  constexpr std::string_view op = "adamw_step";
  ops::expect_nonempty(op, "param", param);
  const index_t n = param.numel();
  ops::expect_numel(op, "grad", grad, n);
  ops::expect_numel(op, "m", m, n);
  ops::expect_numel(op, "v", v, n);
  ops::expect_same_dtype(op, {{"param", &param}, {"grad", &grad}});
  ops::expect_same_dtype(op, {{"m", &m}, {"v", &v}, {"master", &master}});
  const bool mixed = param.type == dtype::bf16;
  check(m.type == (mixed ? dtype::f32 : param.type), op, ": m has dtype ", dtype_name(m.type), ", expected ",
        mixed ? "f32 (the compute type of bf16 parameters)" : dtype_name(param.type));
  check(mixed == (master.data != nullptr), op, ": ",
        mixed ? "bf16 parameters need an f32 master copy, none was given"
              : "a master copy is only for bf16 parameters, these are ",
        mixed ? "" : dtype_name(param.type));
  if (mixed) ops::expect_numel(op, "master", master, n);
  validate(cfg, op);
  check(step >= 1, op, ": step is ", step, ", expected >= 1 (steps are 1-based)");
  check(std::isfinite(lr) && lr >= 0, op, ": lr is ", lr, ", expected a finite value >= 0");
  const double s = static_cast<double>(step);
  const double step_size = lr / (1.0 - std::pow(cfg.beta1, s));
  const double bc2_sqrt = std::sqrt(1.0 - std::pow(cfg.beta2, s));
  ops::dispatch_storage(op, param.type, [&](auto t) {
    using T = decltype(t);
    using A = compute_t<T>;
    be.for_each(n,
                kernel::adamw_update<T>{param.ptr<T>(), grad.ptr<T>(), m.ptr<A>(), v.ptr<A>(), static_cast<A*>(master.data),
                                        static_cast<A>(1.0 - lr * cfg.weight_decay), static_cast<A>(cfg.beta1),
                                        static_cast<A>(1.0 - cfg.beta1), static_cast<A>(cfg.beta2),
                                        static_cast<A>(1.0 - cfg.beta2), static_cast<A>(step_size),
                                        static_cast<A>(bc2_sqrt), static_cast<A>(cfg.eps)},
                12);
  });
}

// The dtype of the moments (and the master copy) for parameters of dtype t.
inline dtype state_dtype(dtype t) { return t == dtype::bf16 ? dtype::f32 : t; }

// AdamW over one flat parameter tensor: owns the moments (zero at the start, as in PyTorch) and counts
// steps. The parameter memory belongs to the caller. save/load round-trip the optimiser state exactly,
// so a run resumed from a checkpoint continues bit for bit. For bf16 parameters it also owns the f32
// master copy, taken from the parameters at construction and again before the first step; after
// writing new values into the parameters later, call reset_master() so that the next step starts from
// them.
template <class Backend>
class adamw {
 public:
  adamw(Backend& be, const tensor& param, const adamw_config& cfg)
      : be_(&be), param_(param), cfg_(cfg) {
    ops::expect_nonempty("adamw", "param", param);
    ops::dispatch_storage("adamw", param.type, [](auto) {});
    validate(cfg, "adamw");
    const dtype st = state_dtype(param.type);
    m_ = owned_tensor<Backend>(be, st, param.shape);
    v_ = owned_tensor<Backend>(be, st, param.shape);
    if (param.type == dtype::bf16) {
      master_ = owned_tensor<Backend>(be, st, param.shape);
      reset_master();
    }
  }

  // Copies the (bf16) parameters into the f32 master copy; nothing to do for f32/f64 parameters.
  void reset_master() {
    if (param_.type != dtype::bf16) return;
    be_->for_each(param_.numel(), kernel::widen_elem<bf16>{master_.view().template ptr<float>(), param_.template ptr<bf16>()});
  }

  // One update with this step's learning rate; the step counter advances only if the update ran.
  void step(const tensor& grad, double lr) {
    // The first update starts from the parameters as they are then, whatever was written into them
    // after construction (a model initialised after its optimiser was built).
    if (step_ == 0) reset_master();
    adamw_step(*be_, param_, grad, m_.view(), v_.view(), cfg_, step_ + 1, lr, master_.view());
    ++step_;
  }
  void step(const tensor& grad) { step(grad, cfg_.lr); }

  long steps() const { return step_; }
  const adamw_config& config() const { return cfg_; }
  const tensor& param() const { return param_; }
  const tensor& m() const { return m_.view(); }
  const tensor& v() const { return v_.view(); }
  // The f32 master weights (bf16 parameters only; empty otherwise).
  const tensor& master() const { return master_.view(); }
  // Bytes of optimiser state held in backend memory: the moments and the master copy.
  std::size_t state_bytes() const {
    return m_.view().bytes() + v_.view().bytes() + (master_.view().data ? master_.view().bytes() : 0);
  }

  // ---- state: header (magic, version, dtype, element count, step) then m, v and (bf16 parameters)
  // the master copy, native byte order ----
  std::vector<char> save_state() const {
    const std::size_t bytes = m_.view().bytes();
    std::vector<char> out(header_bytes + state_arrays() * bytes);
    write_header(out.data());
    be_->to_host(out.data() + header_bytes, m_.view().data, bytes);
    be_->to_host(out.data() + header_bytes + bytes, v_.view().data, bytes);
    if (master_.view().data) be_->to_host(out.data() + header_bytes + 2 * bytes, master_.view().data, bytes);
    return out;
  }
  void save(std::ostream& os) const {
    const std::vector<char> state = save_state();
    os.write(state.data(), static_cast<std::streamsize>(state.size()));
    check(os.good(), "adamw::save: writing ", state.size(), " bytes of optimiser state failed");
  }
  // Restores step count and moments saved from an adamw over the same dtype and element count. Nothing
  // changes unless the whole state is valid.
  void load_state(const std::vector<char>& state) {
    check(state.size() >= header_bytes, "adamw::load: state has ", state.size(), " bytes, shorter than its ",
          header_bytes, "-byte header");
    const long step = read_header(state.data());
    const std::size_t bytes = m_.view().bytes();
    check(state.size() == header_bytes + state_arrays() * bytes, "adamw::load: state has ", state.size(),
          " bytes, expected ", header_bytes + state_arrays() * bytes);
    be_->from_host(m_.view().data, state.data() + header_bytes, bytes);
    be_->from_host(v_.view().data, state.data() + header_bytes + bytes, bytes);
    if (master_.view().data) be_->from_host(master_.view().data, state.data() + header_bytes + 2 * bytes, bytes);
    step_ = step;
  }
  // Reads exactly the bytes save() wrote, so other records may follow in the same stream.
  void load(std::istream& is) {
    std::vector<char> state(header_bytes);
    is.read(state.data(), static_cast<std::streamsize>(header_bytes));
    check(is.good(), "adamw::load: stream ended inside the optimiser state header");
    read_header(state.data());
    const std::size_t bytes = state_arrays() * m_.view().bytes();
    state.resize(header_bytes + bytes);
    is.read(state.data() + header_bytes, static_cast<std::streamsize>(bytes));
    check(is.good(), "adamw::load: stream ended inside the optimiser moments (expected ", bytes, " bytes)");
    load_state(state);
  }

 private:
  static constexpr char magic[8] = {'L', 'W', 'C', 'L', 'A', 'D', 'W', '1'};
  static constexpr std::uint32_t version = 1;
  static constexpr std::size_t header_bytes = 8 + 4 + 4 + 8 + 8;

  std::size_t state_arrays() const { return master_.view().data ? 3 : 2; }

  void write_header(char* p) const {
    const std::uint32_t type = static_cast<std::uint32_t>(param_.type);
    const std::int64_t numel = param_.numel(), step = step_;
    std::memcpy(p, magic, 8);
    std::memcpy(p + 8, &version, 4);
    std::memcpy(p + 12, &type, 4);
    std::memcpy(p + 16, &numel, 8);
    std::memcpy(p + 24, &step, 8);
  }
  // Checks the header against this optimiser and returns the saved step count.
  long read_header(const char* p) const {
    std::uint32_t ver = 0, type = 0;
    std::int64_t numel = 0, step = 0;
    check(std::memcmp(p, magic, 8) == 0, "adamw::load: not an adamw state (bad magic)");
    std::memcpy(&ver, p + 8, 4);
    std::memcpy(&type, p + 12, 4);
    std::memcpy(&numel, p + 16, 8);
    std::memcpy(&step, p + 24, 8);
    check(ver == version, "adamw::load: state version ", ver, ", expected ", version);
    check(type == static_cast<std::uint32_t>(param_.type), "adamw::load: state holds dtype ",
          type <= static_cast<std::uint32_t>(dtype::i32) ? dtype_name(static_cast<dtype>(type)) : "?",
          ", this optimiser has ", dtype_name(param_.type));
    check(numel == param_.numel(), "adamw::load: state holds ", numel, " elements, this optimiser has ",
          param_.numel());
    check(step >= 0, "adamw::load: state has a negative step count ", step);
    return static_cast<long>(step);
  }

  Backend* be_;
  tensor param_;
  adamw_config cfg_;
  owned_tensor<Backend> m_, v_, master_;
  long step_ = 0;
};

}  // namespace lwcl::optim

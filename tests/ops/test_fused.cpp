// Fused backend kernels are named capabilities (ops/fused.hpp): a backend that declares one gets its
// members called by the op, every time, and a backend that declares none keeps the row functors. The
// counting backend below declares every kernel; if an op stopped calling one, these checks fail.
#include <doctest/doctest.h>

#include <cstdint>
#include <vector>

#include "lwcl/backend/host/host.hpp"
#include "lwcl/ops/cross_entropy.hpp"
#include "lwcl/ops/flash_attention.hpp"
#include "lwcl/ops/layernorm.hpp"
#include "lwcl/ops/linear.hpp"
#include "lwcl/ops/rmsnorm.hpp"

using namespace lwcl;

namespace {

// The host backend plus every fused kernel, each of which only counts its calls (and zero-fills what it
// is meant to write, so that nothing reads uninitialised memory).
struct counting_backend : backend::cpu {
  static constexpr bool fused_layernorm = true, fused_rmsnorm = true, fused_flash_attention = true,
                        fused_cross_entropy = true, fused_linear_epilogue = true;
  int layernorm_f = 0, layernorm_b = 0, rmsnorm_f = 0, rmsnorm_b = 0, flash_f = 0, flash_b = 0, ce_rows = 0,
      epilogue = 0;

  void zero(const tensor& t) {
    if (t.data) fill_zero(t.data, t.bytes());
  }
  void layernorm_forward(const tensor& out, const tensor& mean, const tensor& rstd, const tensor&, const tensor&,
                         const tensor&, double) {
    ++layernorm_f;
    zero(out), zero(mean), zero(rstd);
  }
  void layernorm_backward(const tensor&, const tensor&, const tensor&, const tensor&, const tensor&, const tensor&,
                          const tensor&, const tensor&) {
    ++layernorm_b;
  }
  void rmsnorm_forward(const tensor& out, const tensor& rstd, const tensor&, const tensor&, double) {
    ++rmsnorm_f;
    zero(out), zero(rstd);
  }
  void rmsnorm_backward(const tensor&, const tensor&, const tensor&, const tensor&, const tensor&, const tensor&) {
    ++rmsnorm_b;
  }
  void flash_attention_forward(const tensor& out, const tensor& lse, const tensor&, const tensor&, const tensor&, bool) {
    ++flash_f;
    zero(out), zero(lse);
  }
  void flash_attention_backward(const tensor&, const tensor&, const tensor&, const tensor& delta, const tensor&,
                                const tensor&, const tensor&, const tensor&, const tensor&, const tensor&, bool) {
    ++flash_b;
    zero(delta);
  }
  void cross_entropy_rows(const tensor&, const tensor& row_loss, const tensor&, const tensor&, double) {
    ++ce_rows;
    zero(row_loss);
  }
  // Declines the case, as backend::cuda does for shapes its epilogue does not take: the op falls back.
  bool linear_epilogue_forward(const tensor&, const tensor&, const tensor&, const tensor&, const tensor&, bool) {
    ++epilogue;
    return false;
  }
};

static_assert(ops::offers_fused_layernorm<counting_backend> && ops::offers_fused_rmsnorm<counting_backend> &&
              ops::offers_fused_flash_attention<counting_backend> && ops::offers_fused_cross_entropy<counting_backend> &&
              ops::offers_fused_linear_epilogue<counting_backend>);
static_assert(!ops::offers_fused_layernorm<backend::cpu> && !ops::offers_fused_rmsnorm<backend::cpu> &&
              !ops::offers_fused_flash_attention<backend::cpu> && !ops::offers_fused_cross_entropy<backend::cpu> &&
              !ops::offers_fused_linear_epilogue<backend::cpu> && !ops::offers_device_ranking<backend::cpu>);

// A backend with a member of the right name but no declaration: the op does not call it.
struct undeclared_backend : backend::cpu {
  int calls = 0;
  void layernorm_forward(const tensor&, const tensor&, const tensor&, const tensor&, const tensor&, const tensor&, double) {
    ++calls;
  }
};

}  // namespace

TEST_CASE("an op calls every fused kernel its backend declares") {
  counting_backend be;
  const index_t N = 4, C = 8;
  std::vector<float> x(N * C, 0.5f), w(C, 1.0f), b(C, 0.0f), out(N * C), d(N * C, 0.1f), dx(N * C), dw(C), db(C), mean(N),
      rstd(N);
  const tensor X(x.data(), {N, C}), W(w.data(), {C}), Bt(b.data(), {C}), O(out.data(), {N, C}), D(d.data(), {N, C}),
      DX(dx.data(), {N, C}), DW(dw.data(), {C}), DB(db.data(), {C}), M(mean.data(), {N}), R(rstd.data(), {N});
  ops::layernorm_forward(be, O, M, R, X, W, Bt);
  ops::layernorm_backward(be, DX, DW, DB, D, X, W, M, R);
  ops::rmsnorm_forward(be, O, R, X, W, 1e-6);
  ops::rmsnorm_backward(be, DX, DW, D, X, W, R);
  CHECK(be.layernorm_f == 1);
  CHECK(be.layernorm_b == 1);
  CHECK(be.rmsnorm_f == 1);
  CHECK(be.rmsnorm_b == 1);

  // Attention: B 1, T 4, H 2, KVH 1, D 4.
  const index_t T = 4, H = 2, KVH = 1, Dh = 4;
  std::vector<float> q(T * H * Dh, 0.1f), k(T * KVH * Dh, 0.2f), v(T * KVH * Dh, 0.3f), ao(T * H * Dh), lse(H * T),
      dq(T * H * Dh), dk(T * KVH * Dh), dv(T * KVH * Dh), delta(H * T), dao(T * H * Dh, 0.1f);
  const tensor Q(q.data(), {1, T, H, Dh}), K(k.data(), {1, T, KVH, Dh}), V(v.data(), {1, T, KVH, Dh}),
      AO(ao.data(), {1, T, H, Dh}), L(lse.data(), {1, H, T});
  ops::flash_attention_forward(be, AO, L, Q, K, V, true);
  ops::flash_attention_backward(be, tensor(dq.data(), Q.shape), tensor(dk.data(), K.shape), tensor(dv.data(), V.shape),
                                tensor(delta.data(), L.shape), tensor(dao.data(), Q.shape), Q, K, V, AO, L, true);
  CHECK(be.flash_f == 1);
  CHECK(be.flash_b == 1);

  std::vector<float> logits(N * C, 0.0f), dlogits(N * C), rows(N);
  std::vector<std::int32_t> targets = {0, 1, 2, 3};
  ops::cross_entropy(be, tensor(dlogits.data(), {N, C}), tensor(rows.data(), {N}), tensor(logits.data(), {N, C}),
                     tensor(targets.data(), dtype::i32, {N}));
  CHECK(be.ce_rows == 1);

  // The epilogue is tried, declines, and the op computes linear + GELU itself: the host result.
  const index_t Out = 3;
  std::vector<float> lw(Out * C, 0.25f), lb(Out, 0.5f), pre(N * Out), act(N * Out), pre_ref(N * Out), act_ref(N * Out);
  backend::cpu host;
  ops::linear_gelu_forward(be, tensor(act.data(), {N, Out}), tensor(pre.data(), {N, Out}), X, tensor(lw.data(), {Out, C}),
                           tensor(lb.data(), {Out}), ops::gelu_kind::tanh);
  ops::linear_gelu_forward(host, tensor(act_ref.data(), {N, Out}), tensor(pre_ref.data(), {N, Out}), X,
                           tensor(lw.data(), {Out, C}), tensor(lb.data(), {Out}), ops::gelu_kind::tanh);
  CHECK(be.epilogue == 1);
  CHECK(act == act_ref);
}

TEST_CASE("a member that is not declared as a fused kernel is not called") {
  undeclared_backend be;
  const index_t N = 2, C = 4;
  std::vector<float> x = {1, 2, 3, 4, -1, 0, 1, 2}, w(C, 1.0f), b(C, 0.0f), out(N * C), mean(N), rstd(N);
  ops::layernorm_forward(be, tensor(out.data(), {N, C}), tensor(mean.data(), {N}), tensor(rstd.data(), {N}),
                         tensor(x.data(), {N, C}), tensor(w.data(), {C}), tensor(b.data(), {C}));
  CHECK(be.calls == 0);
  CHECK(mean[0] == doctest::Approx(2.5));  // the row functor ran
}

#pragma once
// Distillation losses between a student's and a teacher's features or logits: MSE, normalised MSE, cosine
// and temperature-scaled logit KL. Each returns the loss and, when dstudent is non-empty, accumulates
// grad_scale * dLoss/dstudent. `scratch` (student's dtype, at least 2 * rows elements, rows = numel / last
// extent) receives per-row partial sums, which the backend then reduces, so no kernel needs atomics.

#include "lwcl/core/config.hpp"
#include "lwcl/core/math.hpp"
#include "lwcl/ops/common.hpp"

namespace lwcl::ops {

namespace kernel {

// partial[row] = sum (s - t)^2; dstudent += scale * (s - t) with scale = 2 * grad_scale / numel.
template <class T>
struct mse_row {
  T* dstudent;  // may be null
  T* partial;
  const T* student;
  const T* teacher;
  index_t C;
  compute_t<T> scale;

  LWCL_HD void operator()(index_t row) const {
    using A = compute_t<T>;
    const T* s = student + row * C;
    const T* t = teacher + row * C;
    A acc = 0;
    for (index_t i = 0; i < C; ++i) {
      const A d = A(s[i]) - A(t[i]);
      acc += d * d;
    }
    partial[row] = T(acc);
    if (!dstudent) return;
    T* ds = dstudent + row * C;
    for (index_t i = 0; i < C; ++i) ds[i] += scale * (A(s[i]) - A(t[i]));
  }
};

// partial[row] = sum (s - t)^2 and partial[rows + row] = sum t^2: the two whole-tensor sums of the
// normalised MSE, which must both be known before its gradient.
template <class T>
struct nmse_row {
  T* partial;
  const T* student;
  const T* teacher;
  index_t rows;
  index_t C;

  LWCL_HD void operator()(index_t row) const {
    const T* s = student + row * C;
    const T* t = teacher + row * C;
    using A = compute_t<T>;
    A err = 0, ref = 0;
    for (index_t i = 0; i < C; ++i) {
      const A d = A(s[i]) - A(t[i]);
      err += d * d;
      ref += A(t[i]) * A(t[i]);
    }
    partial[row] = T(err);
    partial[rows + row] = T(ref);
  }
};

// dstudent += scale * (s - t).
template <class T>
struct scaled_difference_elem {
  T* dstudent;
  const T* student;
  const T* teacher;
  compute_t<T> scale;
  LWCL_HD void operator()(index_t i) const {
    dstudent[i] += scale * (compute_t<T>(student[i]) - compute_t<T>(teacher[i]));
  }
};

// partial[row] = 1 - cos(s, t) with cos = s.t / (max(|s|, eps) max(|t|, eps)), as PyTorch's
// cosine_similarity clamps each norm; dstudent += scale * dcos/ds with scale = -grad_scale / rows.
template <class T>
struct cosine_row {
  T* dstudent;  // may be null
  T* partial;
  const T* student;
  const T* teacher;
  index_t C;
  compute_t<T> scale;
  compute_t<T> eps;

  LWCL_HD void operator()(index_t row) const {
    using A = compute_t<T>;
    const T* s = student + row * C;
    const T* t = teacher + row * C;
    A st = 0, ss = 0, tt = 0;
    for (index_t i = 0; i < C; ++i) {
      const A si = s[i], ti = t[i];
      st += si * ti;
      ss += si * si;
      tt += ti * ti;
    }
    const A ns = math::sqrt(ss), nt = math::sqrt(tt);
    const bool s_clamped = !(ns > eps);
    const A inv = A(1) / ((s_clamped ? eps : ns) * math::max(nt, eps));
    const A cos = st * inv;
    partial[row] = T(A(1) - cos);
    if (!dstudent) return;
    T* ds = dstudent + row * C;
    // dcos/ds = t / (|s||t|) - cos * s / |s|^2; with |s| clamped its norm is a constant and the second
    // term drops. A clamped |t| is constant in s either way.
    const A s_coef = s_clamped ? A(0) : cos / ss;
    for (index_t i = 0; i < C; ++i) ds[i] += scale * (A(t[i]) * inv - s_coef * A(s[i]));
  }
};

// partial[row] = tau^2 KL(p || q) with p = softmax(t / tau), q = softmax(s / tau), both computed from
// max-subtracted logits; dstudent += scale * (q - p) with scale = grad_scale * tau / rows.
template <class T>
struct logit_kl_row {
  T* dstudent;  // may be null
  T* partial;
  const T* student;
  const T* teacher;
  index_t V;
  compute_t<T> inv_tau;
  compute_t<T> tau2;
  compute_t<T> scale;

  LWCL_HD void operator()(index_t row) const {
    using A = compute_t<T>;
    const T* s = student + row * V;
    const T* t = teacher + row * V;
    A ms = s[0], mt = t[0];
    for (index_t i = 1; i < V; ++i) {
      ms = math::max(ms, A(s[i]));
      mt = math::max(mt, A(t[i]));
    }
    A zs = 0, zt = 0;
    for (index_t i = 0; i < V; ++i) {
      zs += math::exp((A(s[i]) - ms) * inv_tau);
      zt += math::exp((A(t[i]) - mt) * inv_tau);
    }
    const A lzs = math::log(zs), lzt = math::log(zt);
    T* ds = dstudent ? dstudent + row * V : nullptr;
    A kl = 0;
    for (index_t i = 0; i < V; ++i) {
      const A log_q = (A(s[i]) - ms) * inv_tau - lzs;
      const A log_p = (A(t[i]) - mt) * inv_tau - lzt;
      const A p = math::exp(log_p);  // an underflowed p contributes 0, never 0 * inf
      kl += p * (log_p - log_q);
      if (ds) ds[i] += scale * (math::exp(log_q) - p);
    }
    partial[row] = T(tau2 * kl);
  }
};

}  // namespace kernel

namespace detail {

// Checks shared by every distillation loss; returns the number of rows.
inline index_t distill_check(std::string_view op, const tensor& dstudent, const tensor& scratch, const tensor& student,
                             const tensor& teacher) {
  expect_nonempty(op, "student", student);
  expect_shape(op, "teacher", teacher, student.shape);
  if (dstudent.data) expect_shape(op, "dstudent", dstudent, student.shape);
  const index_t rows = rows_of(student);
  check(scratch.data != nullptr && scratch.numel() >= 2 * rows, op, ": scratch has shape ", scratch.shape.str(), " (",
        scratch.numel(), " elements), expected at least 2 * rows = ", 2 * rows, " elements for student ", student.shape.str());
  expect_same_dtype(op, {{"student", &student}, {"teacher", &teacher}, {"dstudent", &dstudent}, {"scratch", &scratch}});
  return rows;
}

}  // namespace detail

// mean over all elements of (student - teacher)^2.
template <class Backend>
double mse_loss(Backend& be, const tensor& dstudent, const tensor& scratch, const tensor& student, const tensor& teacher,
                double grad_scale = 1.0) {
  constexpr std::string_view op = "mse_loss";
  const index_t rows = detail::distill_check(op, dstudent, scratch, student, teacher);
  const index_t C = student.shape.last(), n = student.numel();
  return dispatch_storage(op, student.type, [&](auto t) -> double {
    using T = decltype(t);
    T* partial = scratch.ptr<T>();
    be.for_each(rows,
                kernel::mse_row<T>{static_cast<T*>(dstudent.data), partial, student.ptr<T>(), teacher.ptr<T>(), C,
                                   static_cast<compute_t<T>>(2 * grad_scale / static_cast<double>(n))},
                5 * C);
    return be.sum(partial, rows) / static_cast<double>(n);
  });
}

// sum (student - teacher)^2 / sum teacher^2 over the whole tensor: the squared error relative to the
// teacher's energy, comparable across layers whose feature scales differ. An all-zero teacher is an error.
template <class Backend>
double nmse_loss(Backend& be, const tensor& dstudent, const tensor& scratch, const tensor& student, const tensor& teacher,
                 double grad_scale = 1.0) {
  constexpr std::string_view op = "nmse_loss";
  const index_t rows = detail::distill_check(op, dstudent, scratch, student, teacher);
  const index_t C = student.shape.last();
  return dispatch_storage(op, student.type, [&](auto t) -> double {
    using T = decltype(t);
    T* partial = scratch.ptr<T>();
    be.for_each(rows, kernel::nmse_row<T>{partial, student.ptr<T>(), teacher.ptr<T>(), rows, C}, 5 * C);
    const double err = be.sum(partial, rows), ref = be.sum(partial + rows, rows);
    check(ref > 0, op, ": the teacher ", teacher.shape.str(), " is all zeros, so the normalised MSE is undefined");
    if (dstudent.data)
      be.for_each(student.numel(), kernel::scaled_difference_elem<T>{dstudent.ptr<T>(), student.ptr<T>(), teacher.ptr<T>(),
                                                                     static_cast<compute_t<T>>(2 * grad_scale / ref)},
                  3);
    return err / ref;
  });
}

// mean over rows (the last axis holds the features) of 1 - cos(student_row, teacher_row). A row norm
// below 1e-8 is replaced by 1e-8, as torch.nn.functional.cosine_similarity does, so zero rows give cos 0.
template <class Backend>
double cosine_loss(Backend& be, const tensor& dstudent, const tensor& scratch, const tensor& student, const tensor& teacher,
                   double grad_scale = 1.0) {
  constexpr std::string_view op = "cosine_loss";
  const index_t rows = detail::distill_check(op, dstudent, scratch, student, teacher);
  const index_t C = student.shape.last();
  return dispatch_storage(op, student.type, [&](auto t) -> double {
    using T = decltype(t);
    T* partial = scratch.ptr<T>();
    be.for_each(rows,
                kernel::cosine_row<T>{static_cast<T*>(dstudent.data), partial, student.ptr<T>(), teacher.ptr<T>(), C,
                                      static_cast<compute_t<T>>(-grad_scale / static_cast<double>(rows)), static_cast<compute_t<T>>(1e-8)},
                9 * C);
    return be.sum(partial, rows) / static_cast<double>(rows);
  });
}

// mean over rows of tau^2 KL(softmax(teacher / tau) || softmax(student / tau)), the last axis holding the
// vocabulary: Hinton's distillation loss, whose tau^2 keeps gradient magnitudes comparable across
// temperatures. For 2-D (rows, V) inputs this is kl_div(log_softmax(s/tau), log_softmax(t/tau),
// log_target=True, reduction='batchmean') * tau^2 (batchmean divides by the first extent only).
template <class Backend>
double logit_kl_loss(Backend& be, const tensor& dstudent, const tensor& scratch, const tensor& student, const tensor& teacher,
                     double temperature = 1.0, double grad_scale = 1.0) {
  constexpr std::string_view op = "logit_kl_loss";
  const index_t rows = detail::distill_check(op, dstudent, scratch, student, teacher);
  check(temperature > 0, op, ": temperature is ", temperature, ", expected a value > 0");
  const index_t V = student.shape.last();
  return dispatch_storage(op, student.type, [&](auto t) -> double {
    using T = decltype(t);
    T* partial = scratch.ptr<T>();
    be.for_each(rows,
                kernel::logit_kl_row<T>{static_cast<T*>(dstudent.data), partial, student.ptr<T>(), teacher.ptr<T>(), V,
                                        static_cast<compute_t<T>>(1 / temperature), static_cast<compute_t<T>>(temperature * temperature),
                                        static_cast<compute_t<T>>(grad_scale * temperature / static_cast<double>(rows))},
                20 * V);
    return be.sum(partial, rows) / static_cast<double>(rows);
  });
}

}  // namespace lwcl::ops

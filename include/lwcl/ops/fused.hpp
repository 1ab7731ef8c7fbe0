#pragma once
// The fused kernels a backend may offer the ops beyond backend_interface, as named capabilities. A
// backend declares one with a static constexpr bool member set to true (backend::cuda declares them
// all); the op then calls the backend's members unconditionally, so a backend that declares a kernel
// with a slipped signature fails to compile instead of falling back to the row functors in silence.
//
//   fused_layernorm        layernorm_forward(out, mean, rstd, inp, weight, bias, eps) and
//                          layernorm_backward(dinp, dweight, dbias, dout, inp, weight, mean, rstd)
//   fused_rmsnorm          rmsnorm_forward(out, rstd, inp, weight, eps) and
//                          rmsnorm_backward(dinp, dweight, dout, inp, weight, rstd)
//   fused_flash_attention  flash_attention_forward(out, lse, q, k, v, causal) and
//                          flash_attention_backward(dq, dk, dv, delta, dout, q, k, v, out, lse, causal)
//   fused_cross_entropy    cross_entropy_rows(dlogits, row_loss, logits, targets, scale)
//   fused_linear_epilogue  bool linear_epilogue_forward(out, pre, inp, weight, bias, gelu), false when it
//                          does not take the case
//   device_ranking         rank_descending(order_host, keys_host, n), behind prune::allocate
// Every member takes the op's arguments after the op has checked them.

namespace lwcl::ops {

template <class B>
concept offers_fused_layernorm = requires { requires B::fused_layernorm; };
template <class B>
concept offers_fused_rmsnorm = requires { requires B::fused_rmsnorm; };
template <class B>
concept offers_fused_flash_attention = requires { requires B::fused_flash_attention; };
template <class B>
concept offers_fused_cross_entropy = requires { requires B::fused_cross_entropy; };
template <class B>
concept offers_fused_linear_epilogue = requires { requires B::fused_linear_epilogue; };
template <class B>
concept offers_device_ranking = requires { requires B::device_ranking; };

}  // namespace lwcl::ops

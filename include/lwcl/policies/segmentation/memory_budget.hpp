#pragma once
// memory_budget: the largest contiguous segments whose training state fits a byte budget, counted as
// distill::segment_trainer allocates it (parameters, gradients, AdamW moments, block_stack activations
// for a (batch, seq) batch, loss buffers) plus the input and target features its caller holds.

#include <cstddef>
#include <string_view>
#include <vector>

#include "lwcl/model/block_stack.hpp"
#include "lwcl/policies/segmentation/concept.hpp"
#include "lwcl/tensor/dtype.hpp"

namespace lwcl::policies::segmentation {

// Elements an arena reserves for a tensor of n elements: every tensor starts 16 elements (64 bytes
// for f32) after the previous one's start, rounded up.
inline index_t arena_elements(index_t n) { return (n + 15) / 16 * 16; }

// Elements of one model::block_acts for a (B, T) batch, tensor by tensor as its constructor declares
// them (for_grads: the gradient scratch, which adds RoPE's pre-rotation q, k and drops the norm
// statistics).
inline index_t block_activation_elements(const model::block_shape& sh, index_t B, index_t T, bool for_grads = false) {
  const auto& tr = sh.tr;
  const index_t N = B * T, C = N * sh.C, F = N * sh.F, q = N * sh.H * sh.D, kv = N * sh.KVH * sh.D;
  index_t n = 0;
  if (!tr.post_norm) n += arena_elements(C);                              // h1
  n += arena_elements(q) + 2 * arena_elements(kv);                        // q, k, v
  if (tr.rope && for_grads) n += arena_elements(q) + arena_elements(kv);  // q_in, k_in
  n += arena_elements(B * sh.H * T * T);                                  // probs
  n += arena_elements(q);                                                 // att
  if (tr.post_norm) n += arena_elements(C);                               // x2pre
  n += arena_elements(C);                                                 // x2
  if (!tr.post_norm) n += arena_elements(C);                              // h2
  n += 2 * arena_elements(F);                                             // f, g
  if (tr.gated_mlp) n += arena_elements(F);                               // s
  if (tr.post_norm) n += arena_elements(C);                               // ypre
  if (!for_grads) n += (tr.rms_norm ? 2 : 4) * arena_elements(N);         // norm means and reciprocal std devs
  return n;
}
inline std::size_t block_activation_bytes(const model::block_shape& sh, index_t B, index_t T, dtype t,
                                          bool for_grads = false) {
  return static_cast<std::size_t>(block_activation_elements(sh, B, T, for_grads)) * dtype_size(t);
}

// Bytes model::block_stack allocates for layers [s.first, s.last) at (B, T): the hidden states between
// blocks and two gradient streams, each block's saved activations, and one gradient scratch per
// distinct (H, KVH, F) width, which layers of equal widths share.
inline std::size_t stack_activation_bytes(const model::model_config& m, segment s, index_t B, index_t T, dtype t) {
  const index_t hidden = arena_elements(B * T * m.d_model);
  index_t n = (s.size() - 1 + 2) * hidden;
  std::vector<model::block_shape> scratch;
  for (index_t l = s.first; l < s.last; ++l) {
    const model::block_shape sh = model::shape_of_layer(m, l);
    n += block_activation_elements(sh, B, T);
    bool shared = false;
    for (const auto& o : scratch) shared = shared || (o.H == sh.H && o.KVH == sh.KVH && o.F == sh.F);
    if (!shared) {
      scratch.push_back(sh);
      n += block_activation_elements(sh, B, T, true);
    }
  }
  return static_cast<std::size_t>(n) * dtype_size(t);
}

// Elements of the parameters of layers [s.first, s.last) as a segment stores them: prune::layer_parameters
// per layer, plus each tensor's padding to a 16-element boundary in the segment's flat buffer.
inline index_t stored_parameter_elements(const model::model_config& m, segment s) {
  tensor_layout layout;
  model::add_stack_params(layout, m, s.first, s.last);
  return layout.numel();
}

// A segment's bytes, part by part, for reports. total() - inputs is what
// distill::segment_trainer::resident_bytes() reports once it has seen a batch.
struct segment_memory {
  std::size_t parameters = 0;   // stored, with alignment padding
  std::size_t gradients = 0;    // same layout as the parameters
  std::size_t optimizer = 0;    // AdamW's first and second moments
  std::size_t activations = 0;  // block_stack: saved activations, hidden states, gradient scratch
  std::size_t work = 0;         // the trainer's output, output gradient and loss scratch
  std::size_t inputs = 0;       // the input and target features of the current batch
  std::size_t total() const { return parameters + gradients + optimizer + activations + work + inputs; }
};

struct memory_budget {
  static constexpr std::string_view name = "memory_budget";

  std::size_t budget_bytes = 0;
  index_t batch = 0;  // B
  index_t seq = 0;    // T
  dtype type = dtype::f32;
  // (B, T, C) feature tensors resident besides the trainer's own: by default the segment's input and
  // its target. distill::pipeline, filling in batch and seq when they are left 0, sets its own count:
  // teacher input, student input and target, twice when the next step's are copied ahead.
  index_t input_tensors = 2;

  // The bytes segment s needs, whatever the budget.
  // Parameters and gradients are counted in `type`; AdamW keeps both moments in the compute type, plus
  // an f32 master copy for bf16 parameters (optim::adamw).
  segment_memory memory_of(const model::model_config& m, segment s) const {
    validate(m);
    check(0 <= s.first && s.first < s.last && s.last <= m.n_layers(), name, ": segment [", s.first, ", ", s.last,
          ") is not a non-empty range inside the model's ", m.n_layers(), " layers");
    const std::size_t size = dtype_size(type);
    const auto features = static_cast<std::size_t>(batch * seq * m.d_model) * size;
    segment_memory out;
    out.parameters = static_cast<std::size_t>(stored_parameter_elements(m, s)) * size;
    out.gradients = out.parameters;
    const auto elements = static_cast<std::size_t>(stored_parameter_elements(m, s));
    out.optimizer = type == dtype::bf16 ? 3 * elements * dtype_size(dtype::f32) : 2 * out.parameters;
    out.activations = stack_activation_bytes(m, s, batch, seq, type);
    out.work = 2 * features + static_cast<std::size_t>(2 * batch * seq) * size;
    out.inputs = static_cast<std::size_t>(input_tensors) * features;
    return out;
  }

  // Greedy from the front: a segment's bytes never shrink when a layer joins it, so taking as many
  // layers as fit each time gives the fewest segments.
  std::vector<segment> segments(const model::model_config& m) const {
    validate(m);
    check(budget_bytes > 0, name, ": budget_bytes is 0, expected the bytes one segment may use");
    const index_t L = m.n_layers();
    std::vector<segment> segs;
    for (index_t a = 0; a < L;) {
      const segment_memory one = memory_of(m, {a, a + 1});
      check(one.total() <= budget_bytes, name, ": layer ", a, " alone needs ", one.total(), " bytes (parameters ",
            one.parameters, ", gradients ", one.gradients, ", AdamW moments ", one.optimizer, ", activations ",
            one.activations, " for batch ", batch, " x seq ", seq, ", loss buffers ", one.work, ", input features ",
            one.inputs, "), more than the budget of ", budget_bytes,
            " bytes; raise the budget or lower the batch or sequence length");
      index_t b = a + 1;
      while (b < L && memory_of(m, {a, b + 1}).total() <= budget_bytes) ++b;
      segs.push_back({a, b});
      a = b;
    }
    check_tiling(segs, L, name);
    return segs;
  }

 private:
  void validate(const model::model_config& m) const {
    check(m.n_layers() > 0, name, ": the model has no layers to segment");
    check(batch > 0 && seq > 0, name, ": batch ", batch, " x seq ", seq, ", expected both positive");
    check(input_tensors >= 0, name, ": input_tensors is ", input_tensors, ", expected a count >= 0");
    check(type != dtype::i32, name, ": type is ", dtype_name(type), ", expected a floating-point type");
  }
};
static_assert(segmentation_policy<memory_budget> && needs_batch_shape<memory_budget>);

}  // namespace lwcl::policies::segmentation

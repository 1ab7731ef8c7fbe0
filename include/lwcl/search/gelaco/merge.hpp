#pragma once
// GeLaCo's parametrised layer merge: teacher layers [b, e] become one layer
//   theta_b + sum_{k = b+1..e} alpha_k (theta_k - theta_b)
// over every parameter of the layer (norms, biases, attention and MLP weights, whatever the family
// holds; GQA only changes the shapes, which the merged layers share). alpha_k = 1 is LaCo's merge
// (prune::merge_layers), alpha_k = 0 drops layer k. The student is dense and physically smaller, and its
// layer map (decoded_genome::boundaries) says which teacher layers each of its layers stands for.

#include <memory>
#include <span>
#include <vector>

#include "lwcl/core/error.hpp"
#include "lwcl/search/gelaco/genome.hpp"
#include "lwcl/model/layer_map.hpp"
#include "lwcl/model/transformer.hpp"
#include "lwcl/prune/layer_collapse.hpp"
#include "lwcl/prune/surgery.hpp"

namespace lwcl::gelaco {

// The merged parameter vector of span s, from per-layer parameter vectors and per-layer alphas.
inline std::vector<double> merge_span(const std::vector<std::vector<double>>& layers, collapse_span s,
                                      std::span<const double> alpha) {
  check(0 <= s.first && s.first < s.last && s.last < static_cast<index_t>(layers.size()), "gelaco: span [", s.first, ", ",
        s.last, "] is not inside ", layers.size(), " layers");
  check(alpha.size() == layers.size(), "gelaco: ", alpha.size(), " merge weights for ", layers.size(), " layers");
  const auto& base = layers[static_cast<std::size_t>(s.first)];
  std::vector<double> out = base;
  for (index_t k = s.first + 1; k <= s.last; ++k) {
    const auto& f = layers[static_cast<std::size_t>(k)];
    check(f.size() == base.size(), "gelaco: layer ", k, " has ", f.size(), " parameters, layer ", s.first, " has ",
          base.size(), "; the layers of a merged span must share one shape");
    const double a = alpha[static_cast<std::size_t>(k)];
    for (std::size_t i = 0; i < out.size(); ++i) out[i] += a * (f[i] - base[i]);
  }
  return out;
}

// The student `g` makes of `teacher` (a host-backend model), in the teacher's dtype.
template <class Backend>
std::unique_ptr<model::transformer<Backend>> collapse(model::transformer<Backend>& teacher, const decoded_genome& g) {
  static_assert(!Backend::is_device, "gelaco::collapse works on host-backend models");
  const auto& cfg = teacher.config();
  check(g.teacher_layers == cfg.n_layers(), "gelaco: a genome for ", g.teacher_layers, " layers, the teacher has ",
        cfg.n_layers());
  model::check_boundary_map(g.boundaries, g.student_layers(), cfg.n_layers(), "gelaco");
  const auto src = prune::detail::host_params(teacher);
  const auto layers = prune::collapse_detail::split(teacher.layout(), src, cfg.n_layers()).layers;
  model::model_config scfg = cfg;
  scfg.layers.clear();
  std::vector<std::vector<double>> merged;
  for (index_t i = 0; i < g.student_layers(); ++i) {
    const index_t b = g.boundaries[static_cast<std::size_t>(i)], e = g.boundaries[static_cast<std::size_t>(i) + 1] - 1;
    const auto& lb = cfg.layers[static_cast<std::size_t>(b)];
    for (index_t k = b + 1; k <= e; ++k) {
      const auto& lk = cfg.layers[static_cast<std::size_t>(k)];
      check(lk.n_heads == lb.n_heads && lk.n_kv_heads == lb.n_kv_heads && lk.ffn == lb.ffn, "gelaco: teacher layers ", b,
            " and ", k, " differ in shape (heads ", lb.n_heads, "/", lk.n_heads, ", KV heads ", lb.n_kv_heads, "/",
            lk.n_kv_heads, ", FFN ", lb.ffn, "/", lk.ffn, "); only layers of one shape merge");
    }
    merged.push_back(b == e ? layers[static_cast<std::size_t>(b)] : merge_span(layers, {b, e}, g.alpha));
    scfg.layers.push_back(lb);
  }
  return prune::collapse_detail::assemble(teacher.backend(), scfg, teacher.type(), teacher.layout(), src, merged);
}

}  // namespace lwcl::gelaco

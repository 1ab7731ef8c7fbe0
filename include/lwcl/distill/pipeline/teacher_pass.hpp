#pragma once
// The teacher pass of a layer-wise run: the teacher's features at the student's boundaries (through the
// layer map) for the training batches 0 .. feature_batches - 1, into the run's feature cache. Only the
// batches the cache does not hold yet are run (a disk store reopened by a resumed run holds them all, and
// the teacher is then never loaded); the teacher is released before the visits start.

#include <algorithm>
#include <cstdint>
#include <vector>

#include "lwcl/core/error.hpp"
#include "lwcl/core/timer.hpp"
#include "lwcl/distill/pipeline/run_state.hpp"
#include "lwcl/model/layer_map.hpp"
#include "lwcl/model/layer_outputs.hpp"
#include "lwcl/prune/plan.hpp"

namespace lwcl::distill {

template <class Backend, class CachePolicy, class Loss>
void teacher_pass(run_state<Backend, CachePolicy, Loss>& s, const teacher_loader<Backend>& load_teacher) {
  timer t;
  const auto& wanted = s.tlo;  // strictly increasing, from 0
  std::unique_ptr<model::weights<Backend>> teacher;
  std::vector<std::int32_t> ids, targets;
  for (index_t b = 0; b < s.opt.feature_batches; ++b) {
    bool have = true;
    for (index_t tb : wanted) {
      const auto m = s.cache->find_meta({tb, cache::source::teacher, b});
      have = have && m && m->shape == s.sf->feature_shape() && m->type == s.st.type;
    }
    if (have) continue;
    if (!teacher) {
      teacher = load_teacher();
      check(teacher != nullptr, "pipeline: the teacher source returned no model");
      teacher->freeze();  // run forward only: no gradient buffer
      const auto& tc = teacher->config();
      check(tc.d_model == s.st.config.d_model, "pipeline: teacher width ", tc.d_model, " != student width ",
            s.st.config.d_model);
      check(tc.fam == s.st.config.fam, "pipeline: the teacher is ", model::family_name(tc.fam), ", the student ",
            model::family_name(s.st.config.fam));
      model::check_boundary_map(s.tlo, s.st.config.n_layers(), tc.n_layers(), "pipeline");
      check(teacher->type() == s.st.type, "pipeline: the teacher is ", dtype_name(teacher->type()), ", the student ",
            dtype_name(s.st.type), "; features are cached in one dtype");
      s.res.teacher_loaded = true;
    }
    s.loader.batch(static_cast<std::uint64_t>(b), ids, targets);
    const double flops =
        static_cast<double>(s.B * s.T) * prune::layers_flops_per_token(teacher->config(), 0, wanted.back(), s.T);
    s.res.flops += flops;
    s.teacher_pass_flops += flops;
    model::for_each_layer_output(
        *teacher, ids, s.B, s.T,
        [&](index_t boundary, const tensor& h) {
          if (std::binary_search(wanted.begin(), wanted.end(), boundary))
            s.sf->put({boundary, cache::source::teacher, b}, h, 0);
        },
        wanted.back());
  }
  teacher.reset();
  s.res.teacher_pass_seconds += t.seconds();
  if (s.metrics.is_open())
    s.metrics.write({{"event", "teacher_pass"},
                     {"teacher_loaded", s.res.teacher_loaded},
                     {"boundaries", wanted.size()},
                     {"batches", s.opt.feature_batches},
                     {"cache_stored_bytes", s.cache->stats().store.stored_bytes},
                     {"seconds", t.seconds()}});
}

}  // namespace lwcl::distill

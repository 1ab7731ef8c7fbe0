#pragma once
// How a pipeline run judges the student it recovered (with pipeline_options::validation_ids): the
// validation perplexity with its protocol, and the cumulative error against the teacher by depth,
// before recovery and after, on the first eval_batches batches of the validation tokens.

#include <cstdint>
#include <vector>

#include "lwcl/core/error.hpp"
#include "lwcl/distill/pipeline/options.hpp"
#include "lwcl/distill/pipeline/result.hpp"
#include "lwcl/distill/student_state.hpp"
#include "lwcl/eval/cumulative_error.hpp"
#include "lwcl/eval/perplexity.hpp"

namespace lwcl::distill {

// Fills res.val_ppl, res.val_protocol, res.cumulative_error (of `after`) and res.cumulative_error_before
// (of `before`), windows and batches of B x T tokens, the teacher from `load_teacher`.
template <class Backend, class TeacherSource>
void evaluate_recovery(Backend& be, const pipeline_options& opt, index_t B, index_t T, const std::vector<index_t>& tlo,
                       const TeacherSource& load_teacher, const student_state& after, const student_state& before,
                       pipeline_result& res) {
  auto net = after.to_transformer(be);
  const auto p = eval::perplexity(*net, opt.validation_ids, T, T, "validation");
  res.val_ppl = p.perplexity();
  res.val_protocol = p.protocol();
  const auto batches = eval::token_batches(opt.validation_ids, B, T, opt.eval_batches);
  auto teacher = load_teacher();
  check(teacher != nullptr, "pipeline: the teacher source returned no model");
  res.cumulative_error = eval::cumulative_error(*teacher, *net, tlo, batches, B, T);
  net.reset();
  auto initial = before.to_transformer(be);
  res.cumulative_error_before = eval::cumulative_error(*teacher, *initial, tlo, batches, B, T);
}

}  // namespace lwcl::distill

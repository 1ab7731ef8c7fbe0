#pragma once
// distill::compress: the whole compression a policy bundle describes, in one call. The teacher is loaded
// and cut by the criterion in the bundle's pruning slot, with the allocation in compress_options
// (policies::pruning::prune_with, calibrated on the first batches of the training loader), then released;
// the pruned student is recovered layer-wise by the bundle's segmentation, curriculum, cache and loss
// (distill::pipeline) through the layer map of the layers the pruning kept. The run directory holds
// pruning.json (criterion, allocation, layers kept, parameters before and after, calibration cost) beside
// the pipeline's own files (config.json, metrics.jsonl, report.json, student/, the plots).
//
//   auto bundle = make_policies(slot<key::pruning>(policies::pruning::wanda_sp{}));
//   distill::compress_options o;
//   o.prune.alloc.ratio = 0.5;                        // half the KV groups and FFN channels
//   o.recovery.total = distill::parse_budget("steps:400");
//   auto r = distill::compress(be, load_teacher, bundle, loader, "runs/c", o);

#include <filesystem>
#include <string>
#include <type_traits>
#include <vector>

#include <nlohmann/json.hpp>

#include "lwcl/core/error.hpp"
#include "lwcl/core/fs.hpp"
#include "lwcl/core/timer.hpp"
#include "lwcl/data/loader.hpp"
#include "lwcl/distill/pipeline.hpp"
#include "lwcl/distill/student_state.hpp"
#include "lwcl/model/encoder.hpp"
#include "lwcl/model/transformer.hpp"
#include "lwcl/policies/pruning/prune.hpp"
#include "lwcl/prune/allocate.hpp"

namespace lwcl::distill {

struct compress_options {
  policies::pruning::prune_options prune;  // the allocation, calibration batches, FLAP's bias compensation
  pipeline_options recovery;               // the layer-wise recovery's budget and settings
};

struct compress_result {
  student_state student;            // pruned and recovered (also in <run>/student unless recovery.save_student is off)
  std::vector<index_t> boundaries;  // the layer map of the recovery
  index_t teacher_parameters = 0, student_parameters = 0;
  double group_ratio = 0;    // the allocation's ratio (param_ratio's search result)
  double prune_seconds = 0;  // calibration, scoring and surgery
  index_t calib_tokens = 0;  // 0 for a criterion that reads the weights only
  pipeline_result recovery;
};

// Prunes the teacher `load_teacher` gives with `bundle`'s pruning criterion and `o.prune`'s allocation,
// then recovers the student with `bundle`'s pipeline on `loader`'s batches, in `run_dir`. The teacher
// (a decoder or an encoder) is loaded for the pruning and again by the pipeline's teacher pass (and its
// final KD stage), never resident while segments train.
template <class PolicySet, class Backend>
compress_result compress(Backend& be, const std::type_identity_t<teacher_loader<Backend>>& load_teacher, const PolicySet& bundle,
                         const data::batch_loader& loader, const std::filesystem::path& run_dir,
                         const compress_options& o = {}) {
  compress_result r;
  const std::string criterion(PolicySet::pruning_type::name);
  nlohmann::ordered_json summary;
  {
    timer clock;
    const auto teacher = load_teacher();
    check(teacher != nullptr, "compress: the teacher source returned no model");
    const auto cut = [&](const auto& net) {
      const auto p = policies::pruning::prune_with(bundle.pruning, net, loader, o.prune);
      r.student = student_state::of(*p.student);
      r.boundaries = p.boundaries();
      r.teacher_parameters = net.num_parameters();
      r.student_parameters = p.student->num_parameters();
      r.group_ratio = p.group_ratio;
      r.calib_tokens = p.calib_tokens;
      summary["bias_compensation"] = p.bias_compensation;
      summary["kept_layers"] = p.kept;
    };
    if (const auto* dec = dynamic_cast<const model::transformer<Backend>*>(teacher.get()))
      cut(*dec);
    else if (const auto* enc = dynamic_cast<const model::encoder<Backend>*>(teacher.get()))
      cut(*enc);
    else
      fail("compress: the teacher source gave a model that is neither a model::transformer nor a model::encoder");
    r.prune_seconds = clock.seconds();
  }
  summary["criterion"] = criterion;
  summary["granularity"] = prune::granularity_name(o.prune.alloc.gran);
  summary["group_ratio"] = r.group_ratio;
  if (o.prune.param_ratio >= 0) summary["target_parameter_fraction"] = o.prune.param_ratio;
  summary["global"] = o.prune.alloc.global;
  summary["joint"] = o.prune.alloc.joint;
  summary["boundaries"] = r.boundaries;
  summary["teacher_parameters"] = r.teacher_parameters;
  summary["student_parameters"] = r.student_parameters;
  summary["calibration_tokens"] = r.calib_tokens;
  summary["seconds"] = r.prune_seconds;
  std::filesystem::create_directories(run_dir);
  write_text_atomic(run_dir / "pruning.json", summary.dump(2) + "\n");
  r.recovery = make_pipeline(be, bundle, o.recovery).run(load_teacher, r.student, r.boundaries, loader, run_dir);
  return r;
}

}  // namespace lwcl::distill

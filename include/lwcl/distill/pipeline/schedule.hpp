#pragma once
// run_schedule: what a pipeline run asks of its bundle's segmentation and curriculum, behind one
// interface: the phases over the student's layers, each phase's visiting order, the student-input share
// of a step, whether a final KD stage follows. The runtime inputs a segmentation reads from the run
// (segmentation_inputs) are measured by the run and handed in; no policy is written to.
// The run (pipeline_run) is then compiled once per backend, cache policy and loss, not once per bundle:
// a sweep over curricula or segmentations adds one small bundle_schedule per bundle, not a pipeline.

#include <span>
#include <utility>
#include <vector>

#include "lwcl/model/config.hpp"
#include "lwcl/policies/curriculum/concept.hpp"
#include "lwcl/policies/segmentation/concept.hpp"
#include "lwcl/tensor/dtype.hpp"

namespace lwcl::distill {

// What a segmentation may read from the run (policies::needs_layer_difficulty, needs_batch_shape),
// measured by the run. A value the bundle's segmentation sets itself wins over the measured one.
struct segmentation_inputs {
  std::vector<double> layer_difficulty;  // each student layer's initial local loss on teacher inputs; empty: none
  index_t batch = 0, seq = 0;            // the run's batch shape
  dtype type = dtype::f32;               // its features' dtype
  index_t input_tensors = 0;             // (B, T, C) feature tensors the run holds besides the trainer's own
};

class run_schedule {
 public:
  virtual ~run_schedule() = default;

  // The curriculum's phases over the segmentation's stages of `student`, each checked to tile it; the
  // segmentation reads `measured` where it needs a runtime input its bundle left unset.
  virtual std::vector<policies::curriculum_phase> phases(const model::model_config& student,
                                                         const segmentation_inputs& measured) const = 0;
  // A permutation of the phase's segments; `difficulty` has one entry per segment, or none.
  virtual std::vector<index_t> visiting_order(const policies::curriculum_phase& phase,
                                              std::span<const double> difficulty) const = 0;
  // The share of student inputs at a visit's optimiser step (0-based), in [0, 1].
  virtual double student_fraction(const policies::curriculum_phase& phase, index_t step) const = 0;
  virtual bool has_final_kd() const = 0;

  // Whether the segmentation reads per-layer difficulties (policies::needs_layer_difficulty) that its
  // bundle left for the run to measure.
  virtual bool measures_layer_difficulty() const = 0;
};

// run_schedule over a bundle's segmentation and curriculum, held as given.
template <policies::segmentation_policy Segmentation, policies::curriculum_policy Curriculum>
class bundle_schedule final : public run_schedule {
 public:
  bundle_schedule(Segmentation segmentation, Curriculum curriculum)
      : seg_(std::move(segmentation)), cur_(std::move(curriculum)) {}

  std::vector<policies::curriculum_phase> phases(const model::model_config& student,
                                                 const segmentation_inputs& measured) const override {
    Segmentation seg = seg_;  // this call's copy, with the run's inputs where the bundle left them unset
    if constexpr (policies::needs_layer_difficulty<Segmentation>)
      if (seg.layer_difficulty.empty()) seg.layer_difficulty = measured.layer_difficulty;
    if constexpr (policies::needs_batch_shape<Segmentation>) {
      if (seg.batch == 0 && seg.seq == 0) {
        seg.batch = measured.batch;
        seg.seq = measured.seq;
        seg.type = measured.type;
        seg.input_tensors = measured.input_tensors;
      }
    }
    return policies::curriculum_phases(cur_, policies::segmentation_stages(seg, student), student.n_layers());
  }
  std::vector<index_t> visiting_order(const policies::curriculum_phase& phase,
                                      std::span<const double> difficulty) const override {
    return policies::visiting_order(cur_, phase, difficulty);
  }
  double student_fraction(const policies::curriculum_phase& phase, index_t step) const override {
    return policies::student_fraction(cur_, phase, step);
  }
  bool has_final_kd() const override { return cur_.has_final_kd(); }

  bool measures_layer_difficulty() const override {
    if constexpr (policies::needs_layer_difficulty<Segmentation>)
      return seg_.layer_difficulty.empty();
    else
      return false;
  }

 private:
  Segmentation seg_;
  Curriculum cur_;
};

}  // namespace lwcl::distill

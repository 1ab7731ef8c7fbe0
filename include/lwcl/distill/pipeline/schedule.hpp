#pragma once
// run_schedule: what a pipeline run asks of its bundle's segmentation and curriculum, behind one
// interface: the phases over the student's layers, each phase's visiting order, the student-input share
// of a step, whether a final KD stage follows, and the runtime inputs a segmentation reads from the run.
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

class run_schedule {
 public:
  virtual ~run_schedule() = default;

  // The curriculum's phases over the segmentation's stages of `student`, each checked to tile it.
  virtual std::vector<policies::curriculum_phase> phases(const model::model_config& student) const = 0;
  // A permutation of the phase's segments; `difficulty` has one entry per segment, or none.
  virtual std::vector<index_t> visiting_order(const policies::curriculum_phase& phase,
                                              std::span<const double> difficulty) const = 0;
  // The share of student inputs at a visit's optimiser step (0-based), in [0, 1].
  virtual double student_fraction(const policies::curriculum_phase& phase, index_t step) const = 0;
  virtual bool has_final_kd() const = 0;

  // The segmentation's per-layer difficulties (policies::needs_layer_difficulty), or nullptr when it
  // reads none: the run fills them when empty, and a resumed run restores the measured ones.
  virtual std::vector<double>* layer_difficulty() = 0;
  // Sets the segmentation's batch shape (policies::needs_batch_shape) when it reads one and it is unset.
  virtual void fill_batch_shape(index_t batch, index_t seq, dtype type, index_t input_tensors) = 0;
};

// run_schedule over a bundle's segmentation and curriculum (copies: the run fills in the inputs it
// measures without changing the bundle it was given).
template <policies::segmentation_policy Segmentation, policies::curriculum_policy Curriculum>
class bundle_schedule final : public run_schedule {
 public:
  bundle_schedule(Segmentation segmentation, Curriculum curriculum)
      : seg_(std::move(segmentation)), cur_(std::move(curriculum)) {}

  std::vector<policies::curriculum_phase> phases(const model::model_config& student) const override {
    return policies::curriculum_phases(cur_, policies::segmentation_stages(seg_, student), student.n_layers());
  }
  std::vector<index_t> visiting_order(const policies::curriculum_phase& phase,
                                      std::span<const double> difficulty) const override {
    return policies::visiting_order(cur_, phase, difficulty);
  }
  double student_fraction(const policies::curriculum_phase& phase, index_t step) const override {
    return policies::student_fraction(cur_, phase, step);
  }
  bool has_final_kd() const override { return cur_.has_final_kd(); }

  std::vector<double>* layer_difficulty() override {
    if constexpr (policies::needs_layer_difficulty<Segmentation>)
      return &seg_.layer_difficulty;
    else
      return nullptr;
  }
  void fill_batch_shape(index_t batch, index_t seq, dtype type, index_t input_tensors) override {
    if constexpr (policies::needs_batch_shape<Segmentation>) {
      if (seg_.batch != 0 || seg_.seq != 0) return;
      seg_.batch = batch;
      seg_.seq = seq;
      seg_.type = type;
      seg_.input_tensors = input_tensors;
    } else {
      (void)batch, (void)seq, (void)type, (void)input_tensors;
    }
  }

 private:
  Segmentation seg_;
  Curriculum cur_;
};

}  // namespace lwcl::distill

#pragma once
// pipeline_options: the runtime numbers of a layer-wise recovery (budget, learning rates, checkpoints,
// prefetching, evaluation, labels). Structure is in the policy bundle; everything here is data.

#include <cstdint>
#include <cstdio>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "lwcl/cache/prefetcher.hpp"
#include "lwcl/core/config.hpp"
#include "lwcl/distill/encoder_objective.hpp"
#include "lwcl/distill/pipeline/budget.hpp"
#include "lwcl/model/checkpoint/save_options.hpp"
#include "lwcl/quant/format.hpp"

namespace lwcl::distill {

struct student_state;

struct pipeline_options {
  index_t feature_batches = 8;             // training batches whose boundary features are cached (cycled)
  // Which cached batch a step reads: false, batch s mod feature_batches for step s of every visit (each
  // visit starts at batch 0); true, the run's segment step count mod feature_batches, so that with
  // feature_batches equal to the run's segment steps every step reads a batch of its own, as end-to-end
  // KD does.
  bool running_batches = false;
  budget total{budget_unit::steps, 400};   // the whole recovery
  double final_kd_share = 0.2;             // of the budget, when the curriculum closes with KD
  double lr = 1e-3, min_lr = 1e-4;         // cosine decay over each visit's steps
  // The final KD stage's peak learning rate, decaying to a tenth of it (0: lr to min_lr, as the
  // visits): its optimiser starts afresh on the whole student, which a rate tuned for one-layer
  // segments can throw off in the stage's first steps.
  double kd_lr = 0;
  // The final KD stage's batch of B sequences as kd_micro_batches micro-batches of B / kd_micro_batches
  // (a divisor of B) with their gradients accumulated: the same update within rounding, at a smaller
  // activation peak, so that the closing stage can stay near the visits' memory.
  index_t kd_micro_batches = 1;
  // The final KD stage's loss and start. A decoder's: the logit KL, plus kd_hidden_mse times the MSE
  // between the student's and the teacher's last hidden states where that is > 0 (end-to-end KD's
  // hidden_mse_weight; it needs the two widths equal, as width pruning of heads and MLPs and depth
  // pruning leave them). An encoder, which has no logits, closes with end-to-end distillation on
  // kd_encoder_objective (e2e_encoder.hpp). Either way its learning rate rises linearly over its first
  // kd_warmup_steps steps.
  double kd_hidden_mse = 0;
  encoder_objective kd_encoder_objective = encoder_objective::embedding;
  long kd_warmup_steps = 0;
  double weight_decay = 0, clip = 1.0;
  double kd_temperature = 1.0;
  long checkpoint_every = 50;              // segment steps; a visit's end always checkpoints; 0: only those
  bool resume = true;                      // continue from <run>/checkpoints/latest when present
  cache::prefetch_options prefetch{1, 3};         // threads and ring beyond what a step holds (hold is set here)
  // Queue the copies of step s + 1's features to compute memory before step s runs, into a second set
  // of feature buffers, so that they overlap it (on a device backend: the copy stream). Unset: on
  // device backends only. Results are the same either way.
  std::optional<bool> upload_ahead;
  long max_visit_steps = 20000;            // the most steps a visit may take under a seconds budget
  // Each visit's schedule: a fresh AdamW whose learning rate rises linearly over the first warmup_steps
  // steps (at most half the visit; 10 by default, chosen on validation over 0, 1, 3, 5 and 10 at 10 and 50
  // steps a visit: experiments/results.md) and then decays by a cosine to min_lr at the visit's last step. Under
  // a steps or tokens budget the visit's length is known; under seconds it is planned from the first step
  // at the pace measured so far (the finished visits', or the teacher pass's) and refitted after three
  // steps. No visit is planned with fewer than min_visit_steps steps (a steps budget too small for that
  // is refused; under seconds a visit runs past its deadline to reach it). `share` splits the layer-wise
  // budget among the visits: equally, or within each phase by the segments' measured difficulty.
  long warmup_steps = 10;
  long min_visit_steps = 1;
  // true: a visit whose first step, on the teacher's inputs, has a local loss of exactly 0 ends after that
  // step (its segment computes the teacher's own function there, as a depth-pruned student's segment of
  // one kept teacher layer does: nothing to learn); under a seconds budget its time goes to the visits
  // after it. The visit's report says `exact`.
  bool end_exact_visits = false;
  budget_share share = budget_share::equal;
  // true: a segment's AdamW state (step count, moments) is kept when its visit ends and taken up again
  // at its next visit of the same layers (pipeline/kept_optimizer.hpp), in host memory that counts; false:
  // every visit starts a fresh AdamW.
  bool keep_optimizer_state = false;
  bool progress_bar = true;
  std::FILE* log = stdout;
  long halt_after_steps = 0;               // > 0: throw pipeline_halted after that many segment steps (tests)
  bool save_student = true;                // write <run>/student (HF safetensors + config.json)
  checkpoint::hf_save_options student_as;  // the student's weight dtype and the tokenizer written with it
  bool plots = true;                       // write <run>/loss_curves.png, memory.png (and cumulative_error.png)
  // Evaluation after training, on held-out tokens (empty: none): validation perplexity (windows of the
  // loader's sequence length, stride equal to it) and the cumulative error curve of the student before
  // and after recovery on the first eval_batches batches of them; both go into report.json.
  std::vector<std::int32_t> validation_ids;
  index_t eval_batches = 2;
  // The quality curve (pipeline_result::curve): the held-out perplexity of the student as it stands,
  // before the first visit, after every visit, every eval_every steps and/or every eval_every_seconds
  // training seconds of the final KD stage (0 and 0: at its end only) and at the end. Its time is
  // excluded from the run's seconds, processor seconds and budget, its memory from the tracker's peaks.
  std::function<double(const student_state&)> probe;
  long eval_every = 0;
  double eval_every_seconds = 0;
  // Names written for a slot instead of the bundle's policy name, in config.json, report.json and the
  // checkpoint fingerprint: a pipeline handed a pruned student never runs its pruning slot, so a program
  // that recovers a student pruned elsewhere labels the run with the criterion that really pruned it
  // (experiments/recover).
  std::map<std::string, std::string> policy_labels;
  // Quantisation-aware layer-wise training (segment_trainer::set_fake_quant): every visit trains its
  // segment on linear weights fake-quantised to this format, straight through. The student written and
  // evaluated holds the f32 weights; quant::quantize_model with quantisers::rtn at the same format gives
  // the quantised model the training saw. A curriculum closing with logit KD is refused with it.
  std::optional<quant::weight_format> fake_quant;
};

struct pipeline_halted {};

}  // namespace lwcl::distill

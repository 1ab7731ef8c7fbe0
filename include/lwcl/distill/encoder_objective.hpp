#pragma once
// What end-to-end distillation of an encoder (e2e_encoder.hpp) minimises against the frozen teacher:
//   embedding: 1 - cos(mean-pooled student output, mean-pooled teacher output) per sequence;
//   hidden:    the mean squared error between the two last hidden states.
// Apart from e2e_encoder.hpp so that pipeline_options can name it without the trainer.

#include <string_view>

namespace lwcl::distill {

enum class encoder_objective { embedding, hidden };

inline std::string_view objective_name(encoder_objective o) {
  return o == encoder_objective::embedding ? "embedding" : "hidden";
}

}  // namespace lwcl::distill

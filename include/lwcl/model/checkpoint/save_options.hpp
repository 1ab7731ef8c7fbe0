#pragma once
// How checkpoint::save_hf writes a folder: the weights' dtype and the tokenizer that goes with them.
// Apart from hf.hpp so that option structs (the pipeline's, the comparison's) can hold it cheaply.

#include <optional>
#include <string>

#include "lwcl/core/error.hpp"
#include "lwcl/tensor/dtype.hpp"

namespace lwcl::checkpoint {

struct hf_save_options {
  // The weights' dtype in model.safetensors: f32, bf16 or f16 (f64 too for an f64 model); unset: the
  // model's own. Half types round to nearest even.
  std::optional<dtype> weights;
  // A folder whose tokenizer files go with the checkpoint (checkpoint::copy_tokenizer); empty: none.
  std::string tokenizer_from;
};

// The value of a --save-dtype option: f32, bf16 or f16.
inline dtype parse_save_dtype(const std::string& name) {
  if (name == "f32") return dtype::f32;
  if (name == "bf16") return dtype::bf16;
  if (name == "f16") return dtype::f16;
  fail("--save-dtype '", name, "' is not a weight type lwcl writes (expected f32, bf16 or f16)");
}

}  // namespace lwcl::checkpoint

#pragma once
// The student as the layer-wise pipeline holds it between segments: its configuration, parameter
// layout and a master copy of every parameter in host memory (as doubles, which hold f32, bf16 and f64
// values exactly), and for an encoder (family bert) its number of token types. Nothing of it lives in
// compute memory; each segment copies its own layers in and writes them back.

#include <memory>
#include <vector>

#include "lwcl/core/error.hpp"
#include "lwcl/model/encoder.hpp"
#include "lwcl/model/host_params.hpp"
#include "lwcl/model/transformer.hpp"

namespace lwcl::distill {

struct student_state {
  model::model_config config;
  tensor_layout layout;
  std::vector<double> params;  // layout.numel() values
  dtype type = dtype::f32;     // the dtype the segments train in
  index_t type_vocab = 0;      // an encoder's token types; 0 for a decoder

  bool is_encoder() const { return type_vocab > 0; }

  // The parameters of `net`, copied to the host.
  template <class Backend>
  static student_state of(const model::transformer<Backend>& net) {
    return student_state{net.config(), net.layout(), model::host_params(net), net.type(), 0};
  }
  template <class Backend>
  static student_state of(const model::encoder<Backend>& net) {
    return student_state{net.config(), net.layout(), model::host_params(net), net.type(), net.type_vocab()};
  }

  // Copies the parameters into `net`, which must have this configuration's layout and dtype.
  template <class Backend>
  void store_into(model::weights<Backend>& net) const {
    check(net.layout().numel() == layout.numel() && net.type() == type, "student_state: a model of ",
          net.layout().numel(), " ", dtype_name(net.type()), " parameters cannot take ", layout.numel(), " ",
          dtype_name(type), " ones");
    model::set_host_params(net, params);
  }

  // A transformer on `be` holding these parameters (a decoder's state only).
  template <class Backend>
  std::unique_ptr<model::transformer<Backend>> to_transformer(Backend& be) const {
    check(!is_encoder(), "student_state: the student is an encoder (family bert); it has no language-model head");
    auto net = std::make_unique<model::transformer<Backend>>(be, config, type);
    store_into(*net);
    return net;
  }
  // An encoder on `be` holding these parameters (an encoder's state only).
  template <class Backend>
  std::unique_ptr<model::encoder<Backend>> to_encoder(Backend& be) const {
    check(is_encoder(), "student_state: the student is a decoder (family ", model::family_name(config.fam), "), not an encoder");
    auto net = std::make_unique<model::encoder<Backend>>(be, model::encoder_config{config, type_vocab}, type);
    store_into(*net);
    return net;
  }
};

}  // namespace lwcl::distill

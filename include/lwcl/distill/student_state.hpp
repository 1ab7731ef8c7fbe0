#pragma once
// The student as the layer-wise pipeline holds it between segments: its configuration, parameter
// layout and a master copy of every parameter in host memory (as doubles, which hold f32, bf16 and f64
// values exactly). Nothing of it lives in compute memory; each segment copies its own layers in and
// writes them back.

#include <memory>
#include <vector>

#include "lwcl/core/error.hpp"
#include "lwcl/model/host_params.hpp"
#include "lwcl/model/transformer.hpp"

namespace lwcl::distill {

struct student_state {
  model::model_config config;
  tensor_layout layout;
  std::vector<double> params;  // layout.numel() values
  dtype type = dtype::f32;     // the dtype the segments train in

  // The parameters of `net`, copied to the host.
  template <class Backend>
  static student_state of(const model::transformer<Backend>& net) {
    return student_state{net.config(), net.layout(), model::host_params(net), net.type()};
  }

  // Copies the parameters into `net`, which must have this configuration's layout and dtype.
  template <class Backend>
  void store_into(model::transformer<Backend>& net) const {
    check(net.layout().numel() == layout.numel() && net.type() == type, "student_state: a model of ",
          net.layout().numel(), " ", dtype_name(net.type()), " parameters cannot take ", layout.numel(), " ",
          dtype_name(type), " ones");
    model::set_host_params(net, params);
  }

  // A transformer on `be` holding these parameters.
  template <class Backend>
  std::unique_ptr<model::transformer<Backend>> to_transformer(Backend& be) const {
    auto net = std::make_unique<model::transformer<Backend>>(be, config, type);
    store_into(*net);
    return net;
  }
};

}  // namespace lwcl::distill

#pragma once
// A model's parameters as doubles in host memory, and back: the master copies that pruning surgery, the
// layer-wise pipeline's student state and tests work on. Doubles hold f32, bf16 and f64 values exactly.

#include <vector>

#include "lwcl/core/error.hpp"
#include "lwcl/model/weights.hpp"
#include "lwcl/ops/common.hpp"

namespace lwcl::model {

template <class Backend>
std::vector<double> host_params(const weights<Backend>& net) {
  std::vector<double> out(static_cast<std::size_t>(net.layout().numel()));
  ops::dispatch_storage("host_params", net.type(), [&](auto z) {
    using T = decltype(z);
    std::vector<T> tmp(out.size());
    net.backend().to_host(tmp.data(), net.params().data, tmp.size() * sizeof(T));
    for (std::size_t i = 0; i < tmp.size(); ++i) out[i] = static_cast<double>(tmp[i]);
  });
  return out;
}

// Rounds each value to the model's dtype.
template <class Backend>
void set_host_params(weights<Backend>& net, const std::vector<double>& values) {
  check(values.size() == static_cast<std::size_t>(net.layout().numel()), "set_host_params: ", values.size(),
        " values for a model of ", net.layout().numel(), " parameters");
  ops::dispatch_storage("set_host_params", net.type(), [&](auto z) {
    using T = decltype(z);
    std::vector<T> tmp(values.begin(), values.end());
    net.backend().from_host(net.params().data, tmp.data(), tmp.size() * sizeof(T));
  });
}

}  // namespace lwcl::model

// A downstream program: normalises a row with lwcl's LayerNorm and checks the result's mean and variance.
#include <cmath>
#include <cstdio>
#include <vector>

#include <lwcl/lwcl.hpp>

int main() {
  lwcl::backend::cpu be;
  std::vector<float> x{1, 2, 3, 4, 5, 6, 7, 8}, y(8), w(8, 1.0f), mean(1), rstd(1);
  lwcl::ops::layernorm_forward(be, lwcl::tensor(y.data(), {1, 8}), lwcl::tensor(mean.data(), {1}),
                               lwcl::tensor(rstd.data(), {1}), lwcl::tensor(x.data(), {1, 8}),
                               lwcl::tensor(w.data(), {8}), lwcl::tensor());
  double m = 0, v = 0;
  for (float f : y) m += f;
  for (float f : y) v += f * f;
  m /= 8;
  v /= 8;
  std::printf("consumer: mean %.6f var %.6f\n", m, v);
  return (std::abs(m) < 1e-5 && std::abs(v - 1) < 1e-3) ? 0 : 1;
}

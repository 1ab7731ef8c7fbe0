#pragma once
// --dtype: the arithmetic of the host backend's GEMMs for a whole program. f32 keeps them exact; bf16
// rounds each GEMM's operands to bf16 and accumulates in f32 (oneDNN's matmul, AMX tiles where present),
// while weights, gradients, optimiser state and every other op stay f32 (the CUDA backend's recipe). The
// choice is checked while the command line is read: bf16 on a CPU without AVX512-BF16 or AMX, or in a
// build without oneDNN, is refused there with the reason. Without --dtype, LWCL_GEMM_PRECISION decides
// (the option's default shows its value); given, --dtype takes its place.
//   std::string dtype;
//   studies::add_dtype_option(app, dtype);

#include <CLI/CLI.hpp>

#include <cstdlib>
#include <string>

#include "lwcl/backend/host/gemm_choice.hpp"
#include "lwcl/core/error.hpp"

namespace lwcl::studies {

// The precision in force when no --dtype is given: LWCL_GEMM_PRECISION's value, else f32.
inline std::string default_dtype() {
  const char* v = std::getenv("LWCL_GEMM_PRECISION");
  return v && *v ? v : "f32";
}

inline void add_dtype_option(CLI::App& app, std::string& dtype) {
  if (dtype.empty()) dtype = default_dtype();
  app.add_option("--dtype", dtype, "arithmetic of the CPU's GEMMs: f32, or bf16 (operands rounded to bf16, f32 "
                 "accumulation; weights, gradients and optimiser state stay f32), where the CPU has AVX512-BF16 or "
                 "AMX; default: LWCL_GEMM_PRECISION's value, else f32")
      ->capture_default_str()
      ->check(CLI::Validator(
          [](std::string& value) -> std::string {
            try {
              gemm::choice::request_precision(value, "--dtype");
            } catch (const lwcl::error& e) {
              // CLI11 names the option ("--dtype: "): the reason without the name again.
              std::string why = e.what();
              if (why.rfind("--dtype ", 0) == 0) why.erase(0, 8);
              return why;
            }
            return {};
          },
          "f32|bf16", "dtype"));
}

}  // namespace lwcl::studies

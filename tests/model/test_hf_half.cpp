// Half-precision Hugging Face checkpoints: the tiny gpt2 and llama saved by transformers in float16
// and bfloat16 (tools/fixtures/hf_half.py) load into f32 and f64 transformers with every weight equal
// to the exact value of its stored 16 bits, and give the float64 logits transformers computes from
// the same half-precision weights.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "lwcl/backend/host/host.hpp"
#include "lwcl/model/checkpoint/hf.hpp"
#include "support/check.hpp"
#include "support/fixture.hpp"

using namespace lwcl;

namespace {

// The value of a stored 16-bit element, decoded from the IEEE field definitions with ldexp rather than
// by lwcl's bit-shifting conversion, so the two are checked against each other. Both conversions to
// float and double are exact.
double decode_f16(std::uint16_t h) {
  const double sign = (h & 0x8000u) ? -1.0 : 1.0;
  const int exp = (h >> 10) & 0x1f;
  const int mant = h & 0x3ff;
  if (exp == 0x1f) return mant ? std::numeric_limits<double>::quiet_NaN() : sign * INFINITY;
  if (exp == 0) return sign * std::ldexp(mant, -24);  // subnormal: mant * 2^-14 / 2^10
  return sign * std::ldexp(1024 + mant, exp - 25);     // (1 + mant / 2^10) * 2^(exp - 15)
}
double decode_bf16(std::uint16_t b) {
  const std::uint32_t u = static_cast<std::uint32_t>(b) << 16;  // bf16 is the top half of a binary32
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

struct raw_tensor {
  shape dims;
  std::vector<double> values;
  int subnormals = 0;
};

// The tensor's stored bits, decoded; also counts f16 subnormals (the conversion's special path).
raw_tensor raw(const checkpoint::safetensors_file& file, const std::string& name) {
  const auto& e = file.entry(name);
  REQUIRE((e.type == dtype::f16 || e.type == dtype::bf16));
  raw_tensor r;
  r.dims = e.dims;
  const unsigned char* p = file.bytes(name);
  r.values.resize(static_cast<std::size_t>(e.dims.numel()));
  for (std::size_t i = 0; i < r.values.size(); ++i) {
    std::uint16_t bits;
    std::memcpy(&bits, p + 2 * i, 2);
    r.values[i] = e.type == dtype::f16 ? decode_f16(bits) : decode_bf16(bits);
    r.subnormals += e.type == dtype::f16 && (bits & 0x7c00u) == 0 && (bits & 0x3ffu) != 0;
  }
  return r;
}

// The values lwcl's tensor `name` must hold, taken from the Hugging Face tensors by the families'
// naming rules, written out here independently of hf.hpp's mapping. GPT-2's Conv1D weights are
// stored (in, out) and its q, k, v are column blocks of c_attn.
std::vector<double> expected(const checkpoint::safetensors_file& file, model::family fam, const std::string& name,
                             const shape& want, index_t C, int& subnormals) {
  std::string hf;
  bool transpose = false;
  index_t first = 0;
  if (fam == model::family::gpt2) {
    if (name == "wte") hf = "transformer.wte.weight";
    else if (name == "wpe") hf = "transformer.wpe.weight";
    else if (name.rfind("norm_f.", 0) == 0) hf = "transformer.ln_f." + name.substr(7);
    else {
      const auto dot = name.find('.', 7);
      const std::string h = "transformer.h." + name.substr(7, dot - 7) + ".", p = name.substr(dot + 1);
      const std::string kind = p.substr(p.rfind('.') + 1);  // weight or bias
      transpose = kind == "weight" && p.rfind("norm", 0) != 0;
      if (p.rfind("norm1.", 0) == 0) hf = h + "ln_1." + kind;
      else if (p.rfind("norm2.", 0) == 0) hf = h + "ln_2." + kind;
      else if (p.rfind("attn.q.", 0) == 0) hf = h + "attn.c_attn." + kind;
      else if (p.rfind("attn.k.", 0) == 0) hf = h + "attn.c_attn." + kind, first = C;
      else if (p.rfind("attn.v.", 0) == 0) hf = h + "attn.c_attn." + kind, first = 2 * C;
      else if (p.rfind("attn.o.", 0) == 0) hf = h + "attn.c_proj." + kind;
      else if (p.rfind("mlp.fc.", 0) == 0) hf = h + "mlp.c_fc." + kind;
      else if (p.rfind("mlp.proj.", 0) == 0) hf = h + "mlp.c_proj." + kind;
    }
  } else {
    if (name == "wte") hf = "model.embed_tokens.weight";
    else if (name == "norm_f.weight") hf = "model.norm.weight";
    else if (name == "lm_head.weight") hf = "lm_head.weight";
    else {
      const auto dot = name.find('.', 7);
      const std::string h = "model.layers." + name.substr(7, dot - 7) + ".", p = name.substr(dot + 1);
      if (p == "norm1.weight") hf = h + "input_layernorm.weight";
      else if (p == "norm2.weight") hf = h + "post_attention_layernorm.weight";
      else if (p.rfind("attn.", 0) == 0) hf = h + "self_attn." + p.substr(5, 1) + "_proj.weight";
      else if (p.rfind("mlp.", 0) == 0) hf = h + "mlp." + p.substr(4, p.find('.', 4) - 4) + "_proj.weight";
    }
  }
  REQUIRE_MESSAGE(!hf.empty(), "no Hugging Face source for ", name);
  const raw_tensor r = raw(file, hf);
  subnormals += r.subnormals;
  std::vector<double> out(static_cast<std::size_t>(want.numel()));
  if (want.rank() == 1) {
    for (index_t i = 0; i < want[0]; ++i) out[static_cast<std::size_t>(i)] = r.values.at(static_cast<std::size_t>(first + i));
  } else if (transpose) {
    const index_t width = r.dims[1];
    for (index_t o = 0; o < want[0]; ++o)
      for (index_t i = 0; i < want[1]; ++i)
        out[static_cast<std::size_t>(o * want[1] + i)] = r.values.at(static_cast<std::size_t>(i * width + first + o));
  } else {
    REQUIRE(r.dims == want);
    out = r.values;
  }
  return out;
}

// Loads checkpoint `name` into a Real transformer; checks every weight against the stored bits and
// returns the logits' error relative to transformers' float64 logits.
template <class Real>
double check_checkpoint(const std::string& name, int& subnormals) {
  const std::string dir = test::data_path("hf/" + name);
  const auto cfg = checkpoint::read_hf_config(dir);
  backend::cpu be;
  model::transformer<backend::cpu> net(be, cfg, dtype_of_v<Real>);
  checkpoint::load_hf_weights(net, dir);

  const checkpoint::safetensors_file file(dir + "/model.safetensors");
  for (const auto& e : net.layout().entries()) {
    CAPTURE(e.name);
    const auto want = expected(file, cfg.fam, e.name, e.shape, cfg.d_model, subnormals);
    const tensor got = net.param(e.name);
    const Real* p = got.ptr<Real>();
    std::size_t mismatches = 0;
    for (std::size_t i = 0; i < want.size(); ++i) mismatches += static_cast<double>(p[i]) != want[i];
    CHECK(mismatches == 0);
  }

  test::fixture fx("hf/" + name + "_logits.lwfx");
  const auto ids64 = fx.ints("ids");
  std::vector<std::int32_t> ids(ids64.begin(), ids64.end());
  const auto& dims = fx.dims("ids");
  const tensor logits = net.forward_logits(tensor(ids.data(), {dims[0], dims[1]}));
  const Real* p = logits.ptr<Real>();
  return test::rel_error(std::vector<Real>(p, p + logits.numel()), fx.f64("logits"));
}

}  // namespace

TEST_CASE("float16 and bfloat16 Hugging Face checkpoints load exactly and give transformers' logits") {
  for (const std::string name : {"gpt2_f16", "gpt2_bf16", "llama_f16", "llama_bf16"}) {
    CAPTURE(name);
    int subnormals = 0;
    // Half precision widens exactly, so the f32 model differs from the float64 oracle only by its
    // own f32 arithmetic (measured 2.6e-7 to 4.1e-7) and the f64 model only by float64 rounding
    // (measured 5.4e-16 to 6.2e-16; the fixture keeps transformers' llama in float64 throughout).
    CHECK(check_checkpoint<float>(name, subnormals) < 1e-4);
    CHECK(check_checkpoint<double>(name, subnormals) < 1e-12);
    // The f16 files hold subnormal weights, so the widening's special path is exercised.
    if (name.find("_f16") != std::string::npos) CHECK(subnormals > 0);
  }
}

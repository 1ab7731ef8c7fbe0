// quant::quantize_model on a small decoder (gpt2 and llama): round-to-nearest without data equals the
// layer quantiser applied to each weight; GPTQ quantises each block on the inputs the already quantised
// blocks before it give (checked for layer 1 against quantize_gptq on a Hessian built here from a
// forward pass of the quantised layer 0); the quantised model computes what its dequantised weights
// do; packed checkpoints round-trip bit for bit; a fake-quantised segment's gradients are the
// straight-through ones; bad settings are refused with the layer named.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "lwcl/backend/host/host.hpp"
#include "lwcl/distill/segment_trainer.hpp"
#include "lwcl/model/checkpoint/hf.hpp"
#include "lwcl/model/decode.hpp"
#include "lwcl/model/transformer.hpp"
#include "lwcl/policies/quantiser/gptq.hpp"
#include "lwcl/policies/quantiser/rtn.hpp"
#include "lwcl/quant/act_quant.hpp"
#include "lwcl/quant/checkpoint.hpp"
#include "lwcl/quant/decode.hpp"
#include "lwcl/quant/fake_quant.hpp"
#include "lwcl/quant/latency.hpp"
#include "lwcl/quant/model.hpp"
#include "support/check.hpp"
#include "support/tiny_lm.hpp"

using namespace lwcl;
namespace qz = lwcl::policies::quantisers;
namespace tl = lwcl::test::tiny_lm;
using net_t = model::transformer<backend::cpu>;

namespace {

std::vector<float> params_of(const net_t& net) {
  std::vector<float> p(static_cast<std::size_t>(net.layout().numel()));
  net.backend().to_host(p.data(), net.params().data, p.size() * sizeof(float));
  return p;
}

std::vector<float> weight_of(const net_t& net, const std::string& name) {
  const tensor t = net.param(name);
  std::vector<float> w(static_cast<std::size_t>(t.shape.numel()));
  net.backend().to_host(w.data(), t.data, w.size() * sizeof(float));
  return w;
}

std::vector<float> logits_of(net_t& net, const std::vector<std::int32_t>& ids) {
  const tensor l = net.forward_logits(tensor(ids.data(), {tl::B, tl::T}));
  const float* p = static_cast<const float*>(l.data);
  return std::vector<float>(p, p + l.shape.numel());
}

std::vector<std::vector<std::int32_t>> calibration(int n) {
  std::vector<std::vector<std::int32_t>> b(static_cast<std::size_t>(n));
  std::vector<std::int32_t> targets;
  for (int k = 0; k < n; ++k) tl::make_batch(k, b[static_cast<std::size_t>(k)], targets);
  return b;
}

quant::weight_format fmt(int bits, index_t group, quant::symmetry s = quant::symmetry::symmetric) {
  quant::weight_format f;
  f.bits = bits;
  f.group = group;
  f.sym = s;
  return f;
}

bool same_packed(const quant::packed_weight& a, const quant::packed_weight& b) {
  return a.rows == b.rows && a.cols == b.cols && a.format.bits == b.format.bits && a.format.group == b.format.group &&
         a.format.sym == b.format.sym && a.format.scale_type == b.format.scale_type && a.codes == b.codes && a.scales == b.scales &&
         a.zeros == b.zeros;
}

std::filesystem::path scratch(const std::string& name) {
  const auto d = std::filesystem::temp_directory_path() / ("lwcl_test_quant_model_" + name);
  std::filesystem::remove_all(d);
  return d;
}

}  // namespace

TEST_CASE("quantize_model: round-to-nearest without data is quantize_rtn of every block linear; the rest stays as it was") {
  for (const auto fam : {model::family::gpt2, model::family::llama}) {
    CAPTURE(model::family_name(fam));
    backend::cpu be;
    net_t net(be, tl::config(fam), dtype::f32);
    net.init(11);
    const std::vector<float> before = params_of(net);
    net_t ref(be, tl::config(fam), dtype::f32);
    ref.init(11);
    const auto f = fmt(4, 32, quant::symmetry::asymmetric);
    const quant::quantized_model q = quant::quantize_model(net, qz::rtn{}, f, {}, 0, 0, false);
    const index_t per_layer = fam == model::family::llama ? 7 : 6;
    REQUIRE(q.layers.size() == static_cast<std::size_t>(2 * per_layer));
    CHECK(q.calibration_tokens == 0);
    std::vector<bool> quantised(static_cast<std::size_t>(net.layout().numel()), false);
    for (std::size_t i = 0; i < q.layers.size(); ++i) {
      const auto& name = q.layers[i].name;
      CAPTURE(name);
      const auto w0 = weight_of(ref, name);
      const auto& e = net.layout().find(name);
      const auto want = quant::quantize_rtn(w0, e.shape[0], e.shape[1], f, name);
      CHECK(same_packed(q.weights[i], want));
      CHECK(weight_of(net, name) == quant::dequantize(want));
      CHECK(std::isnan(q.layers[i].relative_output_error));
      for (index_t k = 0; k < e.shape.numel(); ++k) quantised[static_cast<std::size_t>(e.offset + k)] = true;
    }
    const std::vector<float> after = params_of(net);
    std::size_t changed_elsewhere = 0;
    for (std::size_t k = 0; k < after.size(); ++k)
      if (!quantised[k] && after[k] != before[k]) ++changed_elsewhere;
    CHECK(changed_elsewhere == 0);
    CHECK(q.packed_bytes() * 6 < q.replaced_f32_bytes());  // 4.5 bits + zero points per weight, against 32
  }
}

TEST_CASE("quantize_model: GPTQ quantises block 1 on the inputs of the quantised block 0, and beats RTN on them") {
  for (const auto fam : {model::family::gpt2, model::family::llama}) {
    CAPTURE(model::family_name(fam));
    backend::cpu be;
    const auto calib = calibration(3);
    net_t net(be, tl::config(fam), dtype::f32);
    net.init(5);
    net_t orig(be, tl::config(fam), dtype::f32);
    orig.init(5);
    const auto f = fmt(4, 32);
    qz::gptq g;
    g.options.block = 32;
    const quant::quantized_model q = quant::quantize_model(net, g, f, calib, tl::B, tl::T, false);
    CHECK(q.calibration_tokens == 3 * tl::B * tl::T);
    for (const auto& l : q.layers) {
      CAPTURE(l.name);
      CHECK(std::isfinite(l.relative_output_error));
      CHECK(l.relative_output_error > 0.0);
      CHECK(l.relative_output_error < 0.1);
      CHECK(l.loss > 0.0);
    }

    // Layer 1's attention input, through the quantised layer 0 (its weights as quantize_model left them).
    const auto cfg = net.config();
    const auto sh0 = model::shape_of_layer(cfg, 0), sh1 = model::shape_of_layer(cfg, 1);
    const auto w0 = model::bind_block(net.layout(), model::layer_prefix(0), net.params().data, dtype::f32);
    const auto w1 = model::bind_block(orig.layout(), model::layer_prefix(1), orig.params().data, dtype::f32);
    model::block_acts<backend::cpu> a0(be, sh0, tl::B, tl::T, dtype::f32), a1(be, sh1, tl::B, tl::T, dtype::f32);
    std::vector<float> x(static_cast<std::size_t>(tl::B * tl::T * cfg.d_model)), y(x.size()), z(x.size());
    quant::hessian h(cfg.d_model);
    for (const auto& ids : calib) {
      net.embed_inputs(tensor(ids.data(), {tl::B, tl::T}), tensor(x.data(), {tl::B, tl::T, cfg.d_model}));
      model::block_forward(be, sh0, w0, a0, tensor(x.data(), {tl::B, tl::T, cfg.d_model}), tensor(y.data(), {tl::B, tl::T, cfg.d_model}));
      model::block_forward(be, sh1, w1, a1, tensor(y.data(), {tl::B, tl::T, cfg.d_model}), tensor(z.data(), {tl::B, tl::T, cfg.d_model}));
      h.add(static_cast<const float*>(a1.h1.data), tl::B * tl::T);
    }
    for (const char* which : {"attn.q.weight", "attn.k.weight", "attn.v.weight"}) {
      const std::string name = model::layer_prefix(1) + which;
      CAPTURE(name);
      std::size_t i = 0;
      while (i < q.layers.size() && q.layers[i].name != name) ++i;
      REQUIRE(i < q.layers.size());
      const auto w = weight_of(orig, name);
      const index_t rows = q.weights[i].rows, cols = q.weights[i].cols;
      const quant::quantized want = quant::quantize_gptq(w.data(), rows, cols, h, f, g.options, name);
      CHECK(same_packed(q.weights[i], want.weight));
      CHECK(q.layers[i].loss == doctest::Approx(want.loss).epsilon(1e-12));
      // On these inputs GPTQ's output error is below round-to-nearest's.
      const auto r = quant::dequantize(quant::quantize_rtn(w, rows, cols, f, name));
      CHECK(q.layers[i].relative_output_error < h.relative_output_error(w.data(), r.data(), rows));
    }
  }
}

TEST_CASE("quantize_model: at 8 bits the model's logits stay close to f32, and the mean error falls from RTN to GPTQ") {
  backend::cpu be;
  const auto calib = calibration(2);
  std::vector<std::int32_t> ids, targets;
  tl::make_batch(9, ids, targets);
  net_t f32(be, tl::config(model::family::llama), dtype::f32);
  f32.init(3);
  const auto ref = logits_of(f32, ids);
  double err_rtn = 0, err_gptq = 0;
  for (const bool gptq : {false, true}) {
    net_t net(be, tl::config(model::family::llama), dtype::f32);
    net.init(3);
    const auto q = gptq ? quant::quantize_model(net, qz::gptq{}, fmt(8, 0), calib, tl::B, tl::T, false)
                        : quant::quantize_model(net, qz::rtn{}, fmt(8, 0), calib, tl::B, tl::T, false);
    (gptq ? err_gptq : err_rtn) = q.mean_relative_output_error();
    const auto got = logits_of(net, ids);
    double num = 0, den = 0;
    for (std::size_t k = 0; k < got.size(); ++k) {
      num += (got[k] - ref[k]) * (got[k] - ref[k]);
      den += ref[k] * ref[k];
    }
    CAPTURE(gptq);
    CHECK(std::sqrt(num / den) < 0.01);
  }
  CHECK(err_gptq > 0.0);
  CHECK(err_gptq < err_rtn);
}

TEST_CASE("packed checkpoint: save_packed then load_packed gives back every code, scale, zero point and parameter bit for bit") {
  for (const auto& f : {fmt(4, 32), fmt(4, 0, quant::symmetry::asymmetric), fmt(8, 32, quant::symmetry::asymmetric), fmt(8, 0)}) {
    for (const auto fam : {model::family::gpt2, model::family::llama}) {
      CAPTURE(f.describe());
      CAPTURE(model::family_name(fam));
      backend::cpu be;
      net_t net(be, tl::config(fam), dtype::f32);
      net.init(21);
      auto f2 = f;
      if (f.bits == 8) f2.scale_type = dtype::bf16;
      const auto q = quant::quantize_model(net, qz::gptq{}, f2, calibration(2), tl::B, tl::T, false);
      const auto dir = scratch("roundtrip");
      quant::save_packed(net, q, dir.string());
      auto [back, packed] = quant::load_packed(be, dir.string());
      CHECK(packed.quantiser == "gptq");
      REQUIRE(packed.names.size() == q.layers.size());
      for (std::size_t i = 0; i < q.layers.size(); ++i) {
        CHECK(packed.names[i] == q.layers[i].name);
        CHECK(same_packed(packed.weights[i], q.weights[i]));
      }
      const auto a = params_of(net), b = params_of(*back);
      REQUIRE(a.size() == b.size());
      CHECK(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
      // The file is about the packed size: every f32 parameter that stayed plus the packed weights.
      const double f32_rest = static_cast<double>(net.num_parameters()) * 4.0 - static_cast<double>(q.replaced_f32_bytes());
      CHECK(static_cast<double>(packed.file_bytes) < f32_rest + static_cast<double>(q.packed_bytes()) + 16384.0);
      // The Hugging Face export of the same model reads back to the dequantised weights.
      checkpoint::save_hf(net, (dir / "hf").string());
      net_t hf(be, checkpoint::read_hf_config((dir / "hf").string()), dtype::f32);
      checkpoint::load_hf_weights(hf, (dir / "hf").string());
      const auto c = params_of(hf);
      CHECK(std::memcmp(a.data(), c.data(), a.size() * sizeof(float)) == 0);
      std::filesystem::remove_all(dir);
    }
  }
}

TEST_CASE("quantize_model and packed checkpoints refuse bad input with a clear error") {
  backend::cpu be;
  net_t net(be, tl::config(model::family::llama), dtype::f32);
  net.init(1);
  // Width 64 and FFN 160: group 64 fits the attention's 64 input columns but not the 160 of down.
  CHECK_THROWS_WITH_AS(quant::quantize_model(net, qz::rtn{}, fmt(4, 64), {}, 0, 0, false),
                       doctest::Contains("layers.0.mlp.down.weight: group size 64 does not divide the layer's 160 input columns"),
                       lwcl::error);
  CHECK_THROWS_WITH_AS(quant::quantize_model(net, qz::rtn{}, fmt(3, 0), {}, 0, 0, false),
                       doctest::Contains("3 weight bits are not supported (expected 4 or 8)"), lwcl::error);
  CHECK_THROWS_WITH_AS(quant::quantize_model(net, qz::gptq{}, fmt(4, 32), {}, 0, 0, false),
                       doctest::Contains("gptq needs calibration batches"), lwcl::error);
  std::vector<std::vector<std::int32_t>> short_batch = {std::vector<std::int32_t>(5, 1)};
  CHECK_THROWS_WITH_AS(quant::quantize_model(net, qz::gptq{}, fmt(4, 32), short_batch, tl::B, tl::T, false),
                       doctest::Contains("calibration batch 0 holds 5 token ids, expected 4 x 24"), lwcl::error);
  std::vector<std::vector<std::int32_t>> bad_id = {std::vector<std::int32_t>(static_cast<std::size_t>(tl::B * tl::T), 1000)};
  CHECK_THROWS_WITH_AS(quant::quantize_model(net, qz::gptq{}, fmt(4, 32), bad_id, tl::B, tl::T, false),
                       doctest::Contains("token id 1000 outside the vocabulary of 96"), lwcl::error);

  // A packed file whose codes have the wrong length for their format.
  const auto q = quant::quantize_model(net, qz::rtn{}, fmt(4, 32), {}, 0, 0, false);
  const auto dir = scratch("bad");
  auto broken = q;
  broken.weights[0].codes.pop_back();
  CHECK_THROWS_WITH_AS(quant::save_packed(net, broken, dir.string()),
                       doctest::Contains("layers.0.attn.q.weight: packed codes hold 2047 entries, expected 2048"), lwcl::error);
  // A packed file written with one tensor's shape edited: the loader names the tensor and both shapes.
  quant::save_packed(net, q, dir.string());
  {
    const auto path = (dir / quant::packed_file).string();
    std::ifstream in(path, std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const std::string from = "\"layers.0.attn.q.weight.codes\":{\"dtype\":\"U8\",\"shape\":[64,32]";
    const auto at = bytes.find(from);
    REQUIRE(at != std::string::npos);
    bytes.replace(at, from.size(), "\"layers.0.attn.q.weight.codes\":{\"dtype\":\"U8\",\"shape\":[32,64]");
    std::ofstream(path, std::ios::binary) << bytes;
  }
  net_t other(be, tl::config(model::family::llama), dtype::f32);
  CHECK_THROWS_WITH_AS(quant::load_packed_weights(other, dir.string()),
                       doctest::Contains("tensor 'layers.0.attn.q.weight.codes' has shape [32, 64], expected [64, 32]"), lwcl::error);
  CHECK_THROWS_WITH_AS(quant::load_packed_weights(other, scratch("missing").string()), doctest::Contains("no '"), lwcl::error);
  std::filesystem::remove_all(dir);
}

TEST_CASE("fake quantisation: the weights RTN's codes stand for; a segment's straight-through gradients are those at them") {
  // fake_quantize equals dequantize(quantize_rtn()) in every scheme.
  const auto w = test::random_normal<float>(64 * 96, 4, 0.05);
  for (const auto& f : {fmt(4, 32), fmt(4, 0, quant::symmetry::asymmetric), fmt(8, 32, quant::symmetry::asymmetric), fmt(8, 0)}) {
    CAPTURE(f.describe());
    std::vector<float> q = w;
    quant::fake_quantize(q.data(), 64, 96, f, "w");
    CHECK(q == quant::dequantize(quant::quantize_rtn(w, 64, 96, f, "w")));
  }
  CHECK(quant::is_block_linear("layers.3.attn.q.weight"));
  CHECK(quant::is_block_linear("layers.0.mlp.down.weight"));
  CHECK_FALSE(quant::is_block_linear("layers.0.attn.q.bias"));
  CHECK_FALSE(quant::is_block_linear("layers.0.norm1.weight"));
  CHECK_FALSE(quant::is_block_linear("wte.weight"));

  backend::cpu be;
  net_t net(be, tl::config(model::family::llama), dtype::f32);
  net.init(8);
  const auto& cfg = net.config();
  const auto host = params_of(net);
  const std::vector<double> master(host.begin(), host.end());
  const auto f = fmt(4, 32);
  // The same parameters with layer 1's linear weights already rounded: the plain segment's reference point.
  std::vector<float> rounded = host;
  for (const auto& e : net.layout().entries())
    if (e.name.rfind("layers.1.", 0) == 0 && quant::is_block_linear(e.name))
      quant::fake_quantize(rounded.data() + e.offset, e.shape[0], e.shape[1], f, e.name);
  const std::vector<double> at_grid(rounded.begin(), rounded.end());
  optim::adamw_config oc;
  oc.lr = 1e-3;
  distill::segment_trainer<backend::cpu> qat(be, cfg, 1, 2, net.layout(), master, dtype::f32, oc);
  distill::segment_trainer<backend::cpu> ref(be, cfg, 1, 2, net.layout(), at_grid, dtype::f32, oc);
  qat.set_fake_quant(f);
  REQUIRE(qat.fake_quant().has_value());

  const auto xs = test::random_normal<float>(static_cast<std::size_t>(tl::B * tl::T * cfg.d_model), 1);
  const auto ts = test::random_normal<float>(xs.size(), 2);
  const tensor x(xs.data(), {tl::B, tl::T, cfg.d_model}), t(ts.data(), {tl::B, tl::T, cfg.d_model});
  auto host_of = [&](const tensor& v) {
    const float* p = static_cast<const float*>(v.data);
    return std::vector<float>(p, p + v.numel());
  };
  const auto before = host_of(qat.params());
  const double lq = qat.compute_gradients(x, t), lr = ref.compute_gradients(x, t);
  CHECK(lq == lr);
  CHECK(host_of(qat.grads()) == host_of(ref.grads()));  // every parameter's, the rounded linears' straight through
  CHECK(host_of(qat.params()) == before);               // the f32 weights are back after the pass
  CHECK(qat.loss(x, t) == ref.loss(x, t));
  std::vector<float> y1(xs.size()), y2(xs.size());
  qat.forward(x, tensor(y1.data(), x.shape));
  ref.forward(x, tensor(y2.data(), x.shape));
  CHECK(y1 == y2);
  CHECK(qat.memory_use().work >= 2 * qat.params().bytes());

  // Training at the quantised point lowers its loss, and moves the f32 weights.
  const double l0 = qat.loss(x, t);
  for (int s = 0; s < 20; ++s) qat.step(x, t, 1e-3);
  CHECK(qat.loss(x, t) < l0);
  CHECK(host_of(qat.params()) != before);

  distill::segment_trainer<backend::cpu> bad(be, cfg, 0, 1, net.layout(), master, dtype::f32, oc);
  CHECK_THROWS_WITH_AS(bad.set_fake_quant(fmt(4, 64)),
                       doctest::Contains("layers.0.mlp.down.weight: group size 64 does not divide the layer's 160 input columns"),
                       lwcl::error);
}

TEST_CASE("parse_format reads the command-line spelling of a weight format and refuses others") {
  const auto a = quant::parse_format("int4:g64:asym:bf16");
  CHECK(a.bits == 4);
  CHECK(a.group == 64);
  CHECK(a.sym == quant::symmetry::asymmetric);
  CHECK(a.scale_type == dtype::bf16);
  const auto b = quant::parse_format("int8");
  CHECK(b.describe() == "int8 g0 sym f16");
  CHECK_THROWS_WITH_AS(quant::parse_format("int3"), doctest::Contains("'int3' is not int4 or int8"), lwcl::error);
  CHECK_THROWS_WITH_AS(quant::parse_format("int4:64"), doctest::Contains("'64' is not a group (g64)"), lwcl::error);
  CHECK_THROWS_WITH_AS(quant::parse_format("int4:g64:sym:f16:x"), doctest::Contains("too many fields"), lwcl::error);
}

TEST_CASE("kv_decoder with packed linears gives the logits of the dequantised model, prompt and single-token steps") {
  for (const auto fam : {model::family::gpt2, model::family::llama}) {
    for (const auto& f : {fmt(4, 32), fmt(8, 0, quant::symmetry::asymmetric)}) {
      CAPTURE(model::family_name(fam));
      CAPTURE(f.describe());
      backend::cpu be;
      net_t net(be, tl::config(fam), dtype::f32);
      net.init(17);
      const auto q = quant::quantize_model(net, qz::rtn{}, f, {}, 0, 0, false);
      std::vector<std::string> names;
      for (const auto& l : q.layers) names.push_back(l.name);
      const quant::packed_linears packed(names, q.weights);
      CHECK(packed.size() == q.layers.size());
      CHECK(packed.bytes() == q.packed_bytes());
      model::kv_decoder<backend::cpu> plain(net, 16), fast(net, 16);
      packed.attach(fast, net);
      const std::vector<std::int32_t> prompt = {3, 14, 15, 92, 65, 35};
      std::vector<float> a, b;
      for (int step = 0; step < 4; ++step) {
        const std::vector<std::int32_t> in = step == 0 ? prompt : std::vector<std::int32_t>{static_cast<std::int32_t>(7 * step)};
        model::logits_to_host(be, plain.step(in), 0, static_cast<index_t>(in.size()), a);
        model::logits_to_host(be, fast.step(in), 0, static_cast<index_t>(in.size()), b);
        CAPTURE(step);
        CHECK(test::rel_error(b, a) < 1e-5);
      }
    }
  }
  backend::cpu be;
  net_t net(be, tl::config(model::family::llama), dtype::f32);
  const auto q = quant::quantize_model(net, qz::rtn{}, fmt(4, 32), {}, 0, 0, false);
  std::vector<std::string> names(q.layers.size(), "layers.0.attn.q.weight");
  CHECK_THROWS_WITH_AS(quant::packed_linears(names, q.weights), doctest::Contains("is given twice"), lwcl::error);
}

namespace {

// Quantises the inputs of the chosen sites per token to 8 bits, as a W8A8 model's linears read them.
struct act8_hook : model::linear_input_hook {
  std::set<std::pair<index_t, int>> sites;
  void forward(index_t layer, model::linear_site s, const tensor& x) override {
    if (sites.count({layer, static_cast<int>(s)}))
      quant::fake_quantize_tokens(x.ptr<float>("act8_hook"), x.numel() / x.shape.last(), x.shape.last());
  }
  void backward(index_t, model::linear_site, const tensor&) override {}
};

}  // namespace

TEST_CASE("mixed precision: per-linear formats, f32 linears kept, and 8-bit activations decode as the fake-quantised model") {
  for (const auto fam : {model::family::gpt2, model::family::llama}) {
    CAPTURE(model::family_name(fam));
    backend::cpu be;
    net_t net(be, tl::config(fam), dtype::f32);
    net.init(23);
    // Layer 0: int8 attention, int4 MLP; layer 1: attention f32, MLP int4 g32.
    const quant::format_fn format_of = [](const std::string& n) -> std::optional<quant::weight_format> {
      if (n.rfind("layers.0.attn.", 0) == 0) return fmt(8, 0);
      if (n.rfind("layers.0.mlp.", 0) == 0) return fmt(4, 0);
      if (n.rfind("layers.1.mlp.", 0) == 0) return fmt(4, 32);
      return std::nullopt;
    };
    const auto q = quant::quantize_model(net, qz::rtn{}, format_of, {}, 0, 0, false);
    std::vector<std::string> names;
    for (const auto& l : q.layers) names.push_back(l.name);
    for (const auto& n : names) CHECK(n.rfind("layers.1.attn.", 0) != 0);
    CHECK(q.layers.size() == (fam == model::family::llama ? 3u + 4u + 3u : 2u + 4u + 2u));
    // 8-bit activations: every linear of layer 0 (packed), layer 1's attention (f32) and MLP (packed).
    std::set<std::string> act8;
    act8_hook hook;
    for (index_t l = 0; l < 2; ++l)
      for (const auto& [n, r, c] : quant::block_linears(net.config(), l)) act8.insert(model::layer_prefix(l) + n);
    for (index_t l = 0; l < 2; ++l)
      for (int s = 0; s < 4; ++s) hook.sites.insert({l, s});
    const quant::packed_linears packed(names, q.weights, act8);
    model::kv_decoder<backend::cpu> dec(net, 16);
    packed.attach(dec, net);
    const std::vector<std::int32_t> prompt = {3, 14, 15, 92, 65, 35};
    const auto n = static_cast<index_t>(prompt.size());
    std::vector<float> a;
    model::logits_to_host(be, dec.step(prompt), 0, n, a);
    net.set_infer_hook(&hook);
    owned_tensor<backend::cpu> tok(be, dtype::i32, {1, n}), logits(be, dtype::f32, {1, n, net.config().vocab});
    be.from_host(tok.view().data, prompt.data(), prompt.size() * sizeof(std::int32_t));
    net.infer_logits(tok.view(), logits.view());
    net.set_infer_hook(nullptr);
    std::vector<float> b(static_cast<std::size_t>(logits.view().numel()));
    be.to_host(b.data(), logits.view().data, b.size() * sizeof(float));
    // The decoder's integer products equal the f32 product of the dequantised operands up to f32
    // rounding (measured: about 1e-7 relative over the logits); an activation code could still differ
    // by one where the two paths' f32 inputs straddle a rounding boundary.
    CHECK(test::rel_error(a, b) < 1e-5);
    // And the 8-bit activations do change the logits (the check above is not vacuous).
    model::kv_decoder<backend::cpu> plain(net, 16);
    const quant::packed_linears weights_only(names, q.weights);
    weights_only.attach(plain, net);
    std::vector<float> c;
    model::logits_to_host(be, plain.step(prompt), 0, n, c);
    CHECK(test::rel_error(c, b) > 1e-4);
  }
}

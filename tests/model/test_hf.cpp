// Hugging Face checkpoints: tiny random gpt2, llama (GQA, FFN 88, untied head) and qwen2 (GQA, q/k/v
// bias, tied head) saved by transformers (tools/fixtures/hf_models.py) load into lwcl, whose logits
// match transformers' float64 logits; lwcl's own saves reload bit for bit (uneven pruned layers
// included); malformed checkpoints give clear errors.
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include <unistd.h>

#include "lwcl/backend/host/host.hpp"
#include "lwcl/model/checkpoint/hf.hpp"
#include "support/check.hpp"
#include "support/fixture.hpp"

using namespace lwcl;

namespace {

template <class Real>
double logits_error(const std::string& name) {
  const std::string dir = test::data_path("hf/" + name);
  test::fixture fx("hf/" + name + "_logits.lwfx");
  const auto cfg = checkpoint::read_hf_config(dir);
  backend::cpu be;
  model::transformer<backend::cpu> net(be, cfg, dtype_of_v<Real>);
  checkpoint::load_hf_weights(net, dir);
  const auto ids64 = fx.ints("ids");
  std::vector<std::int32_t> ids(ids64.begin(), ids64.end());
  const auto& dims = fx.dims("ids");
  const tensor logits = net.forward_logits(tensor(ids.data(), {dims[0], dims[1]}));
  const Real* p = logits.ptr<Real>();
  const std::vector<Real> got(p, p + logits.numel());
  return test::rel_error(got, fx.f64("logits"));
}

std::string copy_checkpoint(const std::string& name, const std::string& tag) {
  namespace fs = std::filesystem;
  const auto dst = fs::temp_directory_path() / ("lwcl_hf_" + std::to_string(::getpid()) + "_" + tag);
  fs::remove_all(dst);
  fs::copy(test::data_path("hf/" + name), dst, fs::copy_options::recursive);
  return dst.string();
}

}  // namespace

TEST_CASE("Hugging Face gpt2, llama and qwen2 checkpoints give transformers' logits") {
  for (const char* name : {"gpt2", "llama", "qwen2"}) {
    CAPTURE(name);
    CHECK(logits_error<float>(name) < 1e-4);
    // transformers computes RoPE's inverse frequencies in float32 even in a float64 model, which
    // bounds the agreement of the RoPE families near 1e-7; gpt2 agrees to rounding.
    CHECK(logits_error<double>(name) < 1e-6);
  }
}

TEST_CASE("Hugging Face configs map to lwcl's model_config") {
  const auto g = checkpoint::read_hf_config(test::data_path("hf/gpt2"));
  CHECK(g.fam == model::family::gpt2);
  CHECK(g.d_model == 32);
  CHECK(g.layers.size() == 2);
  CHECK(g.layers[1].ffn == 128);
  CHECK(g.tie_embeddings);
  const auto l = checkpoint::read_hf_config(test::data_path("hf/llama"));
  CHECK(l.layers[0].n_heads == 6);
  CHECK(l.layers[0].n_kv_heads == 2);
  CHECK(l.layers[0].ffn == 88);
  CHECK(l.head_dim == 8);
  CHECK_FALSE(l.tie_embeddings);
  const auto q = checkpoint::read_hf_config(test::data_path("hf/qwen2"));
  CHECK(q.fam == model::family::qwen2);
  CHECK(q.rope_theta == 1000000.0);
  CHECK(q.tie_embeddings);
}

TEST_CASE("malformed Hugging Face checkpoints raise lwcl::error naming the problem") {
  namespace fs = std::filesystem;
  backend::cpu be;
  {
    const auto dir = copy_checkpoint("llama", "badjson");
    std::ofstream(fs::path(dir) / "config.json") << "{\"model_type\": \"llama\",";
    CHECK_THROWS_WITH_AS(checkpoint::read_hf_config(dir), doctest::Contains("is malformed JSON"), lwcl::error);
    fs::remove_all(dir);
  }
  {
    const auto dir = copy_checkpoint("llama", "type");
    std::ofstream(fs::path(dir) / "config.json") << R"({"model_type": "mamba"})";
    CHECK_THROWS_WITH_AS(checkpoint::read_hf_config(dir), doctest::Contains("model_type 'mamba' is not supported"), lwcl::error);
    fs::remove_all(dir);
  }
  {
    // A config that disagrees with the weights: one more layer than the file holds.
    auto cfg = checkpoint::read_hf_config(test::data_path("hf/llama"));
    cfg.layers.push_back(cfg.layers.back());
    model::transformer<backend::cpu> net(be, cfg);
    CHECK_THROWS_WITH_AS(checkpoint::load_hf_weights(net, test::data_path("hf/llama")),
                         doctest::Contains("tensor 'model.layers.2.input_layernorm.weight' is missing"), lwcl::error);
  }
  {
    // Wider FFN in the config than in the file.
    auto cfg = checkpoint::read_hf_config(test::data_path("hf/llama"));
    cfg.layers[0].ffn = 96;
    model::transformer<backend::cpu> net(be, cfg);
    CHECK_THROWS_WITH_AS(checkpoint::load_hf_weights(net, test::data_path("hf/llama")),
                         doctest::Contains("'model.layers.0.mlp.gate_proj.weight' has shape [88, 48], expected [96, 48]"),
                         lwcl::error);
  }
  {
    const auto dir = copy_checkpoint("gpt2", "noweights");
    fs::remove(fs::path(dir) / "model.safetensors");
    model::transformer<backend::cpu> net(be, checkpoint::read_hf_config(dir));
    CHECK_THROWS_WITH_AS(checkpoint::load_hf_weights(net, dir), doctest::Contains("has neither model.safetensors"), lwcl::error);
    fs::remove_all(dir);
  }
}

TEST_CASE("config.json is validated field by field before anything is allocated") {
  namespace fs = std::filesystem;
  const auto dir = copy_checkpoint("llama", "fields");
  std::ifstream in(fs::path(dir) / "config.json");
  const auto good = nlohmann::json::parse(in);
  // Each edit of the good config and the words its error must contain.
  const std::vector<std::pair<nlohmann::json, std::string>> cases = {
      {{{"num_hidden_layers", -3}}, "-3 layers, expected 1 to 65536"},
      {{{"num_hidden_layers", 1e12}}, "'num_hidden_layers' is 1000000000000.0, expected an integer"},
      {{{"num_hidden_layers", "4"}}, "'num_hidden_layers' is \"4\", expected an integer"},
      {{{"hidden_size", 3.5}}, "'hidden_size' is 3.5, expected an integer"},
      {{{"rms_norm_eps", "1e-6"}}, "'rms_norm_eps' is \"1e-6\", expected a number"},
      {{{"rms_norm_eps", -1e-6}}, "norm_eps must be in (0, 1), got -1e-06"},
      {{{"rope_theta", 0}}, "rope_theta must be positive and finite, got 0"},
      {{{"tie_word_embeddings", 1}}, "'tie_word_embeddings' is 1, expected a boolean"},
      {{{"vocab_size", 0}}, "vocab must be in [1, 16777216], got 0"},
      {{{"vocab_size", std::int64_t{1} << 40}}, "vocab must be in [1, 16777216], got 1099511627776"},
      {{{"max_position_embeddings", -1}}, "max_seq must be in [1, 16777216], got -1"},
      {{{"intermediate_size", 0}}, "has FFN width 0, expected 1 to 16777216"},
      {{{"num_key_value_heads", 4}}, "has 4 KV heads, which does not divide its 6 query heads"},
      {{{"head_dim", 3}}, "RoPE needs an even head_dim, got 3"},
      {{{"hidden_act", 7}}, "'hidden_act' is 7, expected a string"},
      {{{"lwcl_layers", {1, 2, 3}}}, "lwcl_layers must list 2 layers"},
      {{{"lwcl_layers", {1, 2}}}, "is not a JSON object"},
      {{{"hidden_size", 1 << 24}, {"vocab_size", 1 << 24}, {"head_dim", 1 << 20}},
       "parameters, more than lwcl's limit of"},
  };
  for (const auto& c : cases) {
    const auto& edit = c.first;
    const auto& want = c.second;
    CAPTURE(edit.dump());
    auto j = good;
    j.update(edit);
    std::ofstream(fs::path(dir) / "config.json") << j.dump();
    CHECK_THROWS_WITH_AS(checkpoint::read_hf_config(dir), doctest::Contains(want.c_str()), lwcl::error);
  }
  std::ofstream(fs::path(dir) / "config.json") << "[1, 2]";
  CHECK_THROWS_WITH_AS(checkpoint::read_hf_config(dir), doctest::Contains("is not a JSON object"), lwcl::error);
  // A config within the limits whose weights this machine cannot hold: the error says how much they
  // need, before any allocation (over a TiB of f32 here).
  auto big = good;
  big.update({{"vocab_size", 1 << 22}, {"hidden_size", 1 << 15}, {"head_dim", 1 << 13}, {"num_attention_heads", 4},
              {"num_key_value_heads", 2}, {"intermediate_size", 64}});
  std::ofstream(fs::path(dir) / "config.json") << big.dump();
  backend::cpu be;
  CHECK_THROWS_WITH_AS(checkpoint::load_hf(be, dir), doctest::Contains("GiB, more than this machine's"), lwcl::error);
  fs::remove_all(dir);
}

namespace {

template <class Real>
std::vector<Real> params_of(const model::transformer<backend::cpu>& net) {
  const Real* p = net.params().ptr<Real>();
  return std::vector<Real>(p, p + net.params().numel());
}

template <class Real>
std::vector<Real> logits_of(model::transformer<backend::cpu>& net) {
  std::vector<std::int32_t> ids{3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8};
  const tensor t = net.forward_logits(tensor(ids.data(), {2, 6}));
  const Real* p = t.ptr<Real>();
  return std::vector<Real>(p, p + t.numel());
}

// Saves `net`, loads the folder into a fresh model and checks weights and logits are bitwise equal.
template <class Real>
void check_round_trip(model::transformer<backend::cpu>& net, const std::string& tag) {
  namespace fs = std::filesystem;
  const auto dir = (fs::temp_directory_path() / ("lwcl_hf_rt_" + std::to_string(::getpid()) + "_" + tag)).string();
  fs::remove_all(dir);
  checkpoint::save_hf(net, dir);
  CHECK_FALSE(fs::exists(fs::path(dir) / "config.json.tmp"));
  const auto cfg = checkpoint::read_hf_config(dir);
  REQUIRE(cfg.layers.size() == net.config().layers.size());
  for (std::size_t l = 0; l < cfg.layers.size(); ++l) {
    CHECK(cfg.layers[l].n_heads == net.config().layers[l].n_heads);
    CHECK(cfg.layers[l].n_kv_heads == net.config().layers[l].n_kv_heads);
    CHECK(cfg.layers[l].ffn == net.config().layers[l].ffn);
  }
  model::transformer<backend::cpu> back(net.backend(), cfg, dtype_of_v<Real>);
  checkpoint::load_hf_weights(back, dir);
  CHECK(params_of<Real>(back) == params_of<Real>(net));
  CHECK(logits_of<Real>(back) == logits_of<Real>(net));
  fs::remove_all(dir);
}

}  // namespace

TEST_CASE("save_hf then load_hf_weights gives bitwise-identical weights and logits") {
  backend::cpu be;
  SUBCASE("checkpoints written by transformers, re-saved by lwcl") {
    for (const char* name : {"gpt2", "llama", "qwen2"}) {
      CAPTURE(name);
      const std::string dir = test::data_path(std::string("hf/") + name);
      model::transformer<backend::cpu> net(be, checkpoint::read_hf_config(dir));
      checkpoint::load_hf_weights(net, dir);
      check_round_trip<float>(net, name);
    }
  }
  SUBCASE("pruned students with uneven layers, f32 and f64") {
    auto llama = model::model_config::uniform(model::family::llama, 64, 32, 48, 3, 6, 2, 88);
    llama.head_dim = 8;
    llama.layers[1] = {3, 1, 40};
    llama.layers[2] = {4, 2, 17};
    auto gpt2 = model::model_config::uniform(model::family::gpt2, 64, 16, 32, 2, 4, 4, 128);
    gpt2.layers[1] = {2, 2, 36};
    for (const auto& cfg : {llama, gpt2}) {
      CAPTURE(std::string(model::family_name(cfg.fam)));
      model::transformer<backend::cpu> a(be, cfg, dtype::f32);
      a.init(11);
      check_round_trip<float>(a, std::string(model::family_name(cfg.fam)) + "_f32");
      model::transformer<backend::cpu> b(be, cfg, dtype::f64);
      b.init(12);
      check_round_trip<double>(b, std::string(model::family_name(cfg.fam)) + "_f64");
    }
  }
}

// BERT as an encoder. A tiny random BertModel saved by transformers (tools/fixtures/hf_bert.py) loads
// into model::encoder, whose last hidden states and mean-pooled sentence embeddings match
// transformers' float64 values; save_hf reloads bit for bit; backward matches finite differences; bad
// checkpoints and inputs are errors. The pretrained all-MiniLM-L6-v2 (tools/install_deps.sh --minilm)
// tokenised by lwcl's WordPiece gives sentence-transformers' ids and embeddings
// (tools/fixtures/minilm.py).
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include <unistd.h>

#include <nlohmann/json.hpp>

#include "lwcl/backend/host/host.hpp"
#include "lwcl/model/checkpoint/hf.hpp"
#include "lwcl/model/encoder.hpp"
#include "lwcl/model/tokenizer/wordpiece.hpp"
#include "support/check.hpp"
#include "support/minilm.hpp"
#include "support/fixture.hpp"

using namespace lwcl;

namespace {

namespace fs = std::filesystem;

std::vector<std::int32_t> ints32(const test::fixture& fx, const std::string& name) {
  const auto v = fx.ints(name);
  return std::vector<std::int32_t>(v.begin(), v.end());
}

template <class Real>
std::vector<Real> to_vector(const tensor& t) {
  const Real* p = t.ptr<Real>();
  return std::vector<Real>(p, p + t.numel());
}

const std::string& bert_dir() {
  static const std::string dir = test::data_path("hf/bert");
  return dir;
}

struct bert_errors {
  double hidden_a, hidden_b, embedding_a, embedding_b;
};

// Relative errors of lwcl's hidden states and embeddings against transformers' float64 ones.
template <class Real>
bert_errors bert_oracle_errors() {
  test::fixture fx("hf/bert_hidden.lwfx");
  backend::cpu be;
  model::encoder<backend::cpu> enc(be, checkpoint::read_hf_encoder_config(bert_dir()), dtype_of_v<Real>);
  checkpoint::load_hf_weights(enc, bert_dir());
  auto ids_a = ints32(fx, "ids_a"), ids_b = ints32(fx, "ids_b"), types_b = ints32(fx, "types_b");
  const tensor ta(ids_a.data(), fx.dims("ids_a")), tb(ids_b.data(), fx.dims("ids_b")), yb(types_b.data(), fx.dims("types_b"));
  bert_errors e{};
  e.hidden_a = test::rel_error(to_vector<Real>(enc.forward(ta)), fx.f64("hidden_a"));
  e.hidden_b = test::rel_error(to_vector<Real>(enc.forward(tb, yb)), fx.f64("hidden_b"));
  e.embedding_a = test::rel_error(to_vector<Real>(enc.embed(ta)), fx.f64("embedding_a"));
  e.embedding_b = test::rel_error(to_vector<Real>(enc.embed(tb, yb)), fx.f64("embedding_b"));
  return e;
}

std::string temp_dir(const std::string& tag) {
  const auto dir = fs::temp_directory_path() / ("lwcl_bert_" + std::to_string(::getpid()) + "_" + tag);
  fs::remove_all(dir);
  return dir.string();
}

// Copies the tiny checkpoint to a temporary folder, renaming each tensor by `rename` (an empty name
// drops it) and editing config.json with `edit`.
std::string copy_bert(const std::string& tag, const std::function<std::string(const std::string&)>& rename,
                      const std::function<void(nlohmann::json&)>& edit = nullptr) {
  const auto dir = temp_dir(tag);
  fs::create_directories(dir);
  nlohmann::json cfg;
  std::ifstream(fs::path(bert_dir()) / "config.json") >> cfg;
  if (edit) edit(cfg);
  std::ofstream(fs::path(dir) / "config.json") << cfg.dump(2);
  const checkpoint::safetensors_file src((fs::path(bert_dir()) / "model.safetensors").string());
  std::vector<checkpoint::safetensors_item> items;
  for (const auto& e : src.entries()) {
    const auto name = rename(e.name);
    if (!name.empty()) items.push_back({name, e.type, e.dims, src.bytes(e.name)});
  }
  checkpoint::write_safetensors((fs::path(dir) / "model.safetensors").string(), items);
  return dir;
}

std::string same_name(const std::string& n) { return n; }

}  // namespace

TEST_CASE("a Hugging Face bert checkpoint gives transformers' hidden states and sentence embeddings") {
  const auto f32 = bert_oracle_errors<float>();
  const auto f64 = bert_oracle_errors<double>();
  MESSAGE("bert hidden states, relative error: f32 ", f32.hidden_a, " / ", f32.hidden_b, " (token types), f64 ",
          f64.hidden_a, " / ", f64.hidden_b, "; embeddings f32 ", f32.embedding_a, " / ", f32.embedding_b, ", f64 ",
          f64.embedding_a, " / ", f64.embedding_b);
  CHECK(f32.hidden_a < 1e-4);
  CHECK(f32.hidden_b < 1e-4);
  CHECK(f32.embedding_a < 1e-4);
  CHECK(f32.embedding_b < 1e-4);
  CHECK(f64.hidden_a < 1e-10);
  CHECK(f64.hidden_b < 1e-10);
  CHECK(f64.embedding_a < 1e-10);
  CHECK(f64.embedding_b < 1e-10);
}

TEST_CASE("bert config.json maps to an encoder_config") {
  const auto c = checkpoint::read_hf_encoder_config(bert_dir());
  CHECK(c.model.fam == model::family::bert);
  CHECK(c.model.vocab == 99);
  CHECK(c.model.max_seq == 64);
  CHECK(c.model.d_model == 32);
  CHECK(c.model.head_dim == 8);
  CHECK(c.model.norm_eps == 1e-12);
  REQUIRE(c.model.layers.size() == 2);
  CHECK(c.model.layers[1].n_heads == 4);
  CHECK(c.model.layers[1].n_kv_heads == 4);
  CHECK(c.model.layers[1].ffn == 37);
  CHECK(c.type_vocab == 2);
  CHECK(checkpoint::read_hf_config(bert_dir()).fam == model::family::bert);
}

TEST_CASE("bert weights load with a task model's \"bert.\" prefix, and absent token types mean type 0") {
  backend::cpu be;
  const auto cfg = checkpoint::read_hf_encoder_config(bert_dir());
  model::encoder<backend::cpu> plain(be, cfg), prefixed(be, cfg);
  checkpoint::load_hf_weights(plain, bert_dir());
  const auto dir = copy_bert("prefix", [](const std::string& n) { return "bert." + n; });
  checkpoint::load_hf_weights(prefixed, dir);
  CHECK(to_vector<float>(prefixed.params()) == to_vector<float>(plain.params()));
  fs::remove_all(dir);

  test::fixture fx("hf/bert_hidden.lwfx");
  auto ids = ints32(fx, "ids_b");
  std::vector<std::int32_t> zeros(ids.size(), 0);
  const tensor t(ids.data(), fx.dims("ids_b"));
  const auto implicit = to_vector<float>(plain.forward(t));
  CHECK(to_vector<float>(plain.forward(t, tensor(zeros.data(), t.shape))) == implicit);
}

TEST_CASE("save_hf(encoder) then load_hf_weights gives bitwise-identical weights and hidden states") {
  backend::cpu be;
  auto check_round_trip = [&](model::encoder<backend::cpu>& enc, const std::string& tag) {
    const auto dir = temp_dir("rt_" + tag);
    checkpoint::save_hf(enc, dir);
    const auto cfg = checkpoint::read_hf_encoder_config(dir);
    CHECK(cfg.type_vocab == enc.type_vocab());
    REQUIRE(cfg.model.layers.size() == enc.config().layers.size());
    for (std::size_t l = 0; l < cfg.model.layers.size(); ++l) {
      CHECK(cfg.model.layers[l].n_heads == enc.config().layers[l].n_heads);
      CHECK(cfg.model.layers[l].ffn == enc.config().layers[l].ffn);
    }
    CHECK(cfg.model.norm_eps == enc.config().norm_eps);
    model::encoder<backend::cpu> back(be, cfg, enc.type());
    checkpoint::load_hf_weights(back, dir);
    std::vector<std::int32_t> ids{3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8}, types{0, 0, 0, 1, 1, 1, 0, 0, 1, 1, 1, 1};
    const tensor t(ids.data(), {2, 6}), y(types.data(), {2, 6});
    ops::dispatch_float("round trip", enc.type(), [&](auto z) {
      using R = decltype(z);
      CHECK(to_vector<R>(back.params()) == to_vector<R>(enc.params()));
      const auto a = to_vector<R>(enc.forward(t, y));
      CHECK(to_vector<R>(back.forward(t, y)) == a);
    });
    fs::remove_all(dir);
  };
  SUBCASE("the transformers-made checkpoint, re-saved by lwcl") {
    model::encoder<backend::cpu> enc(be, checkpoint::read_hf_encoder_config(bert_dir()));
    checkpoint::load_hf_weights(enc, bert_dir());
    check_round_trip(enc, "hf");
  }
  SUBCASE("a pruned student with uneven layers and three token types, f64") {
    model::encoder_config cfg;
    cfg.model = model::model_config::uniform(model::family::bert, 50, 16, 24, 3, 4, 4, 40);
    cfg.model.norm_eps = 1e-12;
    cfg.model.layers[1] = {2, 2, 17};
    cfg.model.layers[2] = {3, 3, 9};
    cfg.type_vocab = 3;
    model::encoder<backend::cpu> enc(be, cfg, dtype::f64);
    enc.init(5);
    check_round_trip(enc, "pruned");
  }
}

TEST_CASE("bert encoder backward matches finite differences (f64)") {
  backend::cpu be;
  model::encoder<backend::cpu> enc(be, checkpoint::read_hf_encoder_config(bert_dir()), dtype::f64);
  checkpoint::load_hf_weights(enc, bert_dir());
  test::fixture fx("hf/bert_hidden.lwfx");
  auto ids = ints32(fx, "ids_b"), types = ints32(fx, "types_b");
  const tensor t(ids.data(), fx.dims("ids_b")), y(types.data(), fx.dims("types_b"));
  const auto& dims = fx.dims("hidden_b");
  auto w = test::random_normal<double>(static_cast<std::size_t>(dims.numel()), 3);
  // loss = sum(hidden * w), so d(loss)/d(hidden) = w.
  enc.zero_grad();
  enc.forward(t, y);
  enc.backward(tensor(w.data(), dims));
  const auto grads = to_vector<double>(enc.grads());
  double largest = 0;
  for (double g : grads) largest = std::max(largest, std::abs(g));
  REQUIRE(largest > 0);
  for (const auto& e : enc.layout().entries()) {
    CAPTURE(e.name);
    const tensor p = enc.param(e.name);
    const auto n = static_cast<std::size_t>(p.numel());
    const std::vector<double> g(grads.begin() + e.offset, grads.begin() + e.offset + static_cast<index_t>(n));
    if (e.name.find("attn.k.bias") != std::string::npos) {
      // A key bias adds the same amount to every score of a query row, which softmax cancels: the
      // true gradient is zero, so check that instead of comparing two rounding noises.
      for (double v : g) CHECK(std::abs(v) < 1e-12 * largest);
      continue;
    }
    std::vector<double> x(p.ptr<double>(), p.ptr<double>() + n);
    auto loss = [&] {
      std::copy(x.begin(), x.end(), p.ptr<double>());
      return test::dot(to_vector<double>(enc.forward(t, y)), w);
    };
    // Errors are relative to the larger of each element's gradient and a thousandth of the tensor's
    // largest: an element whose gradient nearly cancels would otherwise compare rounding noise.
    double scale = 0;
    for (double v : g) scale = std::max(scale, std::abs(v));
    CHECK(test::gradcheck(x, g, loss, 1e-5, 6, 1e-3 * scale) < 1e-5);
    std::copy(x.begin(), x.end(), p.ptr<double>());
  }
}

TEST_CASE("bad bert checkpoints and inputs raise lwcl::error naming the problem") {
  backend::cpu be;
  SUBCASE("hidden_act other than exact gelu") {
    const auto dir = copy_bert("act", same_name, [](nlohmann::json& j) { j["hidden_act"] = "gelu_new"; });
    CHECK_THROWS_WITH_AS(checkpoint::read_hf_config(dir),
                         doctest::Contains("hidden_act 'gelu_new' is not supported (expected gelu, BERT's exact erf GELU)"),
                         lwcl::error);
    fs::remove_all(dir);
  }
  SUBCASE("relative position embeddings") {
    const auto dir = copy_bert("pos", same_name, [](nlohmann::json& j) { j["position_embedding_type"] = "relative_key"; });
    CHECK_THROWS_WITH_AS(checkpoint::read_hf_encoder_config(dir),
                         doctest::Contains("position_embedding_type 'relative_key' is not supported"), lwcl::error);
    fs::remove_all(dir);
  }
  SUBCASE("a missing tensor") {
    const auto dir = copy_bert("missing", [](const std::string& n) {
      return n == "embeddings.token_type_embeddings.weight" ? std::string() : n;
    });
    model::encoder<backend::cpu> enc(be, checkpoint::read_hf_encoder_config(dir));
    CHECK_THROWS_WITH_AS(checkpoint::load_hf_weights(enc, dir),
                         doctest::Contains("tensor 'embeddings.token_type_embeddings.weight' is missing"), lwcl::error);
    fs::remove_all(dir);
    // A config with one layer more than the weights hold.
    auto cfg = checkpoint::read_hf_encoder_config(bert_dir());
    cfg.model.layers.push_back(cfg.model.layers.back());
    model::encoder<backend::cpu> deeper(be, cfg);
    CHECK_THROWS_WITH_AS(checkpoint::load_hf_weights(deeper, bert_dir()),
                         doctest::Contains("tensor 'encoder.layer.2.attention.output.LayerNorm.weight' is missing"),
                         lwcl::error);
  }
  SUBCASE("a token-type table of another size") {
    auto cfg = checkpoint::read_hf_encoder_config(bert_dir());
    cfg.type_vocab = 3;
    model::encoder<backend::cpu> enc(be, cfg);
    CHECK_THROWS_WITH_AS(checkpoint::load_hf_weights(enc, bert_dir()),
                         doctest::Contains("'embeddings.token_type_embeddings.weight' has shape [2, 32], expected [3, 32]"),
                         lwcl::error);
  }
  SUBCASE("decoder checkpoints and configs are not encoders, and the reverse") {
    CHECK_THROWS_WITH_AS(checkpoint::read_hf_encoder_config(test::data_path("hf/gpt2")),
                         doctest::Contains("holds a gpt2 model, expected an encoder (model_type bert)"), lwcl::error);
    model::encoder_config cfg;
    cfg.model = checkpoint::read_hf_config(test::data_path("hf/llama"));
    CHECK_THROWS_WITH_AS(model::encoder<backend::cpu>(be, cfg), doctest::Contains("family llama is a decoder"), lwcl::error);
    CHECK_THROWS_WITH_AS(model::transformer<backend::cpu>(be, checkpoint::read_hf_config(bert_dir())),
                         doctest::Contains("family bert is an encoder"), lwcl::error);
  }
  SUBCASE("token ids, token types and lengths out of range") {
    model::encoder<backend::cpu> enc(be, checkpoint::read_hf_encoder_config(bert_dir()));
    checkpoint::load_hf_weights(enc, bert_dir());
    std::vector<std::int32_t> ids{1, 2, 3, 4, 5, 6}, types{0, 0, 0, 0, 1, 1};
    const tensor t(ids.data(), {2, 3}), y(types.data(), {2, 3});
    ids[4] = 99;
    CHECK_THROWS_WITH_AS(enc.forward(t, y), doctest::Contains("token id 99 at tokens[1, 1] is outside the vocabulary [0, 99)"),
                         lwcl::error);
    ids[4] = -1;
    CHECK_THROWS_WITH_AS(enc.forward(t), doctest::Contains("token id -1 at tokens[1, 1] is outside the vocabulary [0, 99)"),
                         lwcl::error);
    ids[4] = 5;
    types[2] = 2;
    CHECK_THROWS_WITH_AS(enc.forward(t, y),
                         doctest::Contains("token type 2 at token_types[0, 2] is outside the token types [0, 2)"), lwcl::error);
    types[2] = 0;
    CHECK_NOTHROW(enc.forward(t, y));
    CHECK_THROWS_WITH_AS(enc.forward(t, tensor(types.data(), {3, 2})),
                         doctest::Contains("token_types has shape [3, 2], expected [2, 3]"), lwcl::error);
    std::vector<std::int32_t> long_ids(65, 1);
    CHECK_THROWS_WITH_AS(enc.forward(tensor(long_ids.data(), {1, 65})),
                         doctest::Contains("sequence length 65 exceeds the 64 learned positions"), lwcl::error);
    CHECK_THROWS_WITH_AS(enc.backward(tensor(long_ids.data(), {1, 65})), doctest::Contains("encoder::backward: dhidden"),
                         lwcl::error);
  }
}

TEST_CASE("the pretrained bert all-MiniLM-L6-v2 with lwcl's WordPiece gives sentence-transformers' ids and embeddings") {
  const auto dir = test::minilm_dir();
  for (const char* file : {"config.json", "vocab.txt", "model.safetensors", "sentence_bert_config.json"})
    REQUIRE_MESSAGE(fs::exists(fs::path(dir) / file), "the pretrained all-MiniLM-L6-v2 is not installed ('"
                                                          << (fs::path(dir) / file).string()
                                                          << "' is missing): run tools/install_deps.sh --minilm");
  const tokenizer::wordpiece wp((fs::path(dir) / "vocab.txt").string());
  std::int32_t cls = -1, sep = -1;
  for (std::size_t i = 0; i < wp.vocab_size(); ++i) {
    if (wp.token(static_cast<std::int32_t>(i)) == "[CLS]") cls = static_cast<std::int32_t>(i);
    if (wp.token(static_cast<std::int32_t>(i)) == "[SEP]") sep = static_cast<std::int32_t>(i);
  }
  REQUIRE(cls >= 0);
  REQUIRE(sep >= 0);
  nlohmann::json st;
  std::ifstream(fs::path(dir) / "sentence_bert_config.json") >> st;
  const auto max_len = st.at("max_seq_length").get<std::size_t>();

  nlohmann::json sentences;
  std::ifstream(test::data_path("minilm/sentences.json")) >> sentences;
  test::fixture fx("minilm/embeddings.lwfx");
  REQUIRE(sentences.size() >= 20);
  std::vector<std::vector<std::int32_t>> seqs;
  for (std::size_t i = 0; i < sentences.size(); ++i) {
    const auto text = sentences[i].get<std::string>();
    CAPTURE(text);
    // sentence-transformers: [CLS] + the first max_seq_length - 2 pieces + [SEP].
    auto pieces = wp.encode(text);
    if (pieces.size() > max_len - 2) pieces.resize(max_len - 2);
    std::vector<std::int32_t> ids{cls};
    ids.insert(ids.end(), pieces.begin(), pieces.end());
    ids.push_back(sep);
    CHECK(ids == ints32(fx, "ids_" + std::to_string(i)));
    seqs.push_back(std::move(ids));
  }

  backend::cpu be;
  const auto cfg = checkpoint::read_hf_encoder_config(dir);
  for (const dtype t : {dtype::f32, dtype::f64}) {
    model::encoder<backend::cpu> enc(be, cfg, t);
    checkpoint::load_hf_weights(enc, dir);
    const auto got = model::sentence_embeddings(enc, seqs);
    double worst = 1, worst_rel = 0;
    for (std::size_t i = 0; i < seqs.size(); ++i) {
      const auto want = fx.f64("embedding_" + std::to_string(i));
      REQUIRE(got[i].size() == want.size());
      worst_rel = std::max(worst_rel, test::rel_error(got[i], want));
      double dot = 0, na = 0, nb = 0;
      for (std::size_t c = 0; c < want.size(); ++c) {
        dot += got[i][c] * want[c];
        na += got[i][c] * got[i][c];
        nb += want[c] * want[c];
      }
      const double cosine = dot / std::sqrt(na * nb);
      CAPTURE(i);
      CHECK(cosine >= 0.9999);
      worst = std::min(worst, cosine);
    }
    MESSAGE("all-MiniLM-L6-v2 ", dtype_name(t), ": minimum cosine with sentence-transformers over ", seqs.size(),
            " sentences = 1 - ", 1 - worst, ", largest relative error ", worst_rel);
  }
}

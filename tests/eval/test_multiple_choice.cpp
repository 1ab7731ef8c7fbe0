// Zero-shot multiple choice: on the transformers-made llama of tests/data/mc/ every choice's summed
// log-likelihood, token split, pick, acc and acc_norm equal those transformers computed with lm-eval's
// protocol (tools/fixtures/mc_scores.py); the scoring rules on hand-made numbers; clear errors for bad
// items.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "lwcl/backend/host/host.hpp"
#include "lwcl/eval/multiple_choice.hpp"
#include "lwcl/model/checkpoint/hf.hpp"
#include "lwcl/model/tokenizer/byte_bpe.hpp"
#include "support/fixture.hpp"

using namespace lwcl;

namespace {

std::string write_temp(const std::string& name, const std::string& text) {
  const std::string path = "mc_test_" + name + ".jsonl";
  std::ofstream(path) << text;
  return path;
}

std::string error_of(const std::string& text) {
  try {
    eval::read_mc_jsonl(write_temp("bad", text));
  } catch (const lwcl::error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("multiple choice equals transformers' scores with lm-eval's protocol") {
  backend::cpu be;
  const auto dir = test::data_path("mc/llama");
  auto net = checkpoint::load_hf(be, dir, dtype::f32);
  const auto tok = tokenizer::byte_bpe::from_files(dir + "/vocab.json", dir + "/merges.txt");
  const auto items = eval::read_mc_jsonl(test::data_path("mc/items.jsonl"));
  std::ifstream in(test::data_path("mc/reference.json"));
  const auto ref = nlohmann::json::parse(in);
  REQUIRE(ref["items"].size() == items.size());
  REQUIRE(ref["max_length"].get<index_t>() == net->config().max_seq);
  const auto r = eval::multiple_choice(*net, tok, items, "fixture");
  double worst = 0;
  for (std::size_t i = 0; i < items.size(); ++i) {
    const auto& want = ref["items"][i];
    for (std::size_t c = 0; c < items[i].choices.size(); ++c) {
      const auto p = eval::encode_pair(tok, items[i].context, " " + items[i].choices[c]);
      CHECK(static_cast<index_t>(p.context.size()) == want["context_tokens"][c].get<index_t>());
      CHECK(p.continuation == want["continuation_tokens"][c].get<std::vector<std::int32_t>>());
      const double w = want["loglikelihoods"][c].get<double>(), got = r.items[i].loglikelihoods[c];
      worst = std::max(worst, std::abs(got - w) / std::abs(w));
    }
    CHECK(r.items[i].pick == want["pick"].get<index_t>());
    CHECK(r.items[i].pick_norm == want["pick_norm"].get<index_t>());
  }
  MESSAGE("largest relative difference of a choice's log-likelihood (f32 against transformers' f64): ", worst);
  CHECK(worst < 1e-5);
  CHECK(r.n == static_cast<index_t>(items.size()));
  CHECK(r.acc == doctest::Approx(ref["acc"].get<double>()).epsilon(1e-12));
  CHECK(r.acc_norm == doctest::Approx(ref["acc_norm"].get<double>()).epsilon(1e-12));
  CHECK(r.acc_stderr == doctest::Approx(ref["acc_stderr"].get<double>()).epsilon(1e-12));
  CHECK(r.acc_norm_stderr == doctest::Approx(ref["acc_norm_stderr"].get<double>()).epsilon(1e-12));
  CHECK(r.protocol().find("n=8") != std::string::npos);
  // The fixture exercises what it should: a context cut from the left, and acc differing from acc_norm.
  bool cut = false, differ = false;
  for (std::size_t i = 0; i < items.size(); ++i) {
    const auto& want = ref["items"][i];
    for (std::size_t c = 0; c < items[i].choices.size(); ++c)
      cut = cut || want["context_tokens"][c].get<index_t>() + static_cast<index_t>(want["continuation_tokens"][c].size()) >
                       net->config().max_seq + 1;
    differ = differ || r.items[i].pick != r.items[i].pick_norm;
  }
  CHECK(cut);
  CHECK(differ);
  // The cached scorer (context once, then each choice) against one full forward per choice, on items
  // whose choices share their context and on items cut to the window.
  eval::choice_scorer<backend::cpu> scorer(*net);
  bool shared = false;
  double worst_cached = 0;
  for (const auto& it : items) {
    std::vector<eval::encoded_pair> pairs;
    for (const auto& c : it.choices) pairs.push_back(eval::encode_pair(tok, it.context, " " + c));
    const auto got = scorer.score(pairs);
    REQUIRE(got.size() == pairs.size());
    bool fits = true;
    for (std::size_t c = 0; c < pairs.size(); ++c) {
      const double w = eval::continuation_loglikelihood(*net, pairs[c]);
      worst_cached = std::max(worst_cached, std::abs(got[c] - w) / std::abs(w));
      fits = fits && static_cast<index_t>(pairs[c].context.size() + pairs[c].continuation.size()) <= net->config().max_seq + 1;
    }
    shared = shared || fits;
  }
  MESSAGE("cached scoring against a full forward per choice: largest relative difference ", worst_cached);
  CHECK(shared);
  CHECK(worst_cached < 1e-5);
}

TEST_CASE("multiple choice scoring: ties, length normalisation, standard error") {
  std::vector<eval::mc_item> items = {{"c", {"aa", "b", "cccc"}, 2}, {"c", {"x", "y"}, 1},
                                      {"c", {"\xc3\xa9t\xc3\xa9", "ab"}, 1}};
  // Item 0: "b" has the highest sum; per character "cccc" (-4 / 4) beats "aa" (-4 / 2) and "b" (-2.5).
  // Item 1: y wins both. Item 2: the accented word is 3 characters and 5 bytes; per character it loses
  // (-3.5 / 3 < -2 / 2), as lm-eval counts, where per byte it would win (-3.5 / 5 > -1).
  const auto r = eval::score_choices(items, {{-4, -2.5, -4}, {-3, -1}, {-3.5, -2}}, "hand");
  CHECK(r.items[0].pick == 1);
  CHECK(r.items[0].pick_norm == 2);
  CHECK(r.items[1].pick == 1);
  CHECK(r.items[1].pick_norm == 1);
  CHECK(r.items[2].pick == 1);
  CHECK(r.items[2].pick_norm == 1);
  CHECK(eval::utf8_length("\xc3\xa9t\xc3\xa9") == 3);
  CHECK(r.acc == doctest::Approx(2.0 / 3));
  CHECK(r.acc_norm == doctest::Approx(1.0));
  // Outcomes {0, 1, 1}: sample sd sqrt(1/3), standard error sqrt(1/3) / sqrt(3) = 1/3; all 1: 0.
  CHECK(r.acc_stderr == doctest::Approx(1.0 / 3));
  CHECK(r.acc_norm_stderr == doctest::Approx(0.0));
  const auto tie = eval::score_choices({{"c", {"a", "b"}, 0}}, {{-1, -1}}, "tie");
  CHECK(tie.items[0].pick == 0);
  CHECK(tie.items[0].pick_norm == 0);
  CHECK(std::isnan(tie.acc_stderr));  // one item: no spread to estimate
}

TEST_CASE("multiple choice: whitespace ending a context moves into the continuation") {
  const auto dir = test::data_path("mc/llama");
  const auto tok = tokenizer::byte_bpe::from_files(dir + "/vocab.json", dir + "/merges.txt");
  const auto a = eval::encode_pair(tok, "the mill, ", " and");
  const auto b = eval::encode_pair(tok, "the mill,", "  and");
  CHECK(a.context == b.context);
  CHECK(a.continuation == b.continuation);
  CHECK(a.context == tok.encode("the mill,"));
  auto whole = tok.encode("the mill,  and");
  CHECK(std::vector<std::int32_t>(whole.begin() + static_cast<std::ptrdiff_t>(a.context.size()), whole.end()) == a.continuation);
  // Python's rstrip() removes Unicode whitespace too: no-break space, ideographic space, U+001F; not a
  // letter that shares a lead byte with them (U+00E9, U+3001).
  CHECK(eval::trailing_whitespace_start("mill,\xc2\xa0\xe3\x80\x80 \x1f") == 5);
  CHECK(eval::trailing_whitespace_start("caf\xc3\xa9 ") == 5);
  CHECK(eval::trailing_whitespace_start("a\xe3\x80\x81") == 4);
  CHECK(eval::trailing_whitespace_start("\xe2\x80\x8a\xe2\x80\xa8") == 0);
  CHECK(eval::trailing_whitespace_start("x\xe2\x80\x8b") == 4);  // U+200B (zero width) is not whitespace
  CHECK(eval::trailing_whitespace_start("") == 0);
  const auto c = eval::encode_pair(tok, "the mill,\xc2\xa0", " and");
  CHECK(c.context == a.context);
  const auto whole_c = tok.encode("the mill,\xc2\xa0 and");
  CHECK(std::vector<std::int32_t>(whole_c.begin() + static_cast<std::ptrdiff_t>(c.context.size()), whole_c.end()) ==
        c.continuation);
}

TEST_CASE("multiple choice: bad items and requests get clear errors") {
  CHECK(error_of("{\"context\": \"a\", \"choices\": [], \"gold\": 0}\n").find("'choices' is empty") != std::string::npos);
  CHECK(error_of("{\"context\": \"a\", \"choices\": [\"x\"], \"gold\": 1}\n").find("gold 1 is not an index") !=
        std::string::npos);
  CHECK(error_of("{\"context\": \"a\", \"gold\": 0}\n").find("no 'choices' list") != std::string::npos);
  CHECK(error_of("{\"choices\": [\"x\"], \"gold\": 0}\n").find("no string 'context'") != std::string::npos);
  CHECK(error_of("{\"context\": \"a\", \"choices\": [\"x\"], \"gold\": 0}\nnot json\n").find("line 2 is not JSON") !=
        std::string::npos);
  CHECK(error_of("\n\n").find("holds no item") != std::string::npos);
  CHECK_THROWS_WITH_AS(eval::read_mc_jsonl("no/such/file.jsonl"), doctest::Contains("cannot open"), lwcl::error);
  // lm-eval's older field name, and a limit.
  const auto two = eval::read_mc_jsonl(write_temp("query", "{\"query\": \"q\", \"choices\": [\"x\", \"y\"], \"gold\": 1}\n"
                                                           "{\"query\": \"r\", \"choices\": [\"z\"], \"gold\": 0}\n"), 1);
  REQUIRE(two.size() == 1);
  CHECK(two[0].context == "q");
  CHECK(two[0].gold == 1);

  backend::cpu be;
  const auto dir = test::data_path("mc/llama");
  auto net = checkpoint::load_hf(be, dir, dtype::f32);
  const auto tok = tokenizer::byte_bpe::from_files(dir + "/vocab.json", dir + "/merges.txt");
  CHECK_THROWS_WITH_AS(eval::continuation_loglikelihood(*net, eval::encode_pair(tok, "", " x")),
                       doctest::Contains("empty context"), lwcl::error);
  CHECK_THROWS_WITH_AS(eval::continuation_loglikelihood(*net, eval::encode_pair(tok, "a", "")),
                       doctest::Contains("encodes to no token"), lwcl::error);
  const std::string long_choice(200, 'q');
  CHECK_THROWS_WITH_AS(eval::continuation_loglikelihood(*net, eval::encode_pair(tok, "a", " " + long_choice)),
                       doctest::Contains("longer than the model's window of 48"), lwcl::error);
  eval::choice_scorer<backend::cpu> scorer(*net);
  CHECK_THROWS_WITH_AS(scorer.score({eval::encode_pair(tok, "", " x")}), doctest::Contains("empty context"), lwcl::error);
  CHECK_THROWS_WITH_AS(scorer.score({eval::encode_pair(tok, "a", " b"), eval::encode_pair(tok, "a", "")}),
                       doctest::Contains("encodes to no token"), lwcl::error);
  CHECK_THROWS_WITH_AS(scorer.score({eval::encode_pair(tok, "a", " " + long_choice)}),
                       doctest::Contains("longer than the model's window of 48"), lwcl::error);
  model::transformer<backend::cpu> half_net(be, net->config(), dtype::bf16);
  CHECK_THROWS_WITH_AS(eval::choice_scorer<backend::cpu>{half_net}, doctest::Contains("runs f32 or f64 models"), lwcl::error);
}

// Teacher training (train::train_lm): a run stopped abruptly at a random step and resumed from its
// last checkpoint ends with bitwise the same weights, optimiser state and per-step losses as an
// uninterrupted run; the unigram baseline; options checks and a non-finite loss naming its step.
// (tests/train/kill_resume.sh does the same with a real SIGKILL of experiments/train_teacher.)
#include <doctest/doctest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "lwcl/backend/host/host.hpp"
#include "lwcl/core/rng.hpp"
#include "lwcl/train/lm_training.hpp"

using namespace lwcl;
namespace fs = std::filesystem;

namespace {

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  REQUIRE_MESSAGE(in.good(), "cannot read ", p.string());
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Token shards from a sparse random Markov chain (learnable structure) in a fresh temporary folder.
fs::path make_data(const std::string& name, index_t vocab) {
  const fs::path dir = fs::temp_directory_path() / ("lwcl_test_train_" + name);
  fs::remove_all(dir);
  fs::create_directories(dir);
  for (auto [split, n, seed] : {std::tuple{"train", 20000, 1}, std::tuple{"validation", 4000, 2}}) {
    std::vector<std::int32_t> ids(static_cast<std::size_t>(n));
    philox_stream s{static_cast<std::uint64_t>(seed), 7};
    std::int32_t tok = 0;
    for (std::size_t i = 0; i < ids.size(); ++i) {
      const auto r = s.bits(i);
      tok = static_cast<std::int32_t>((tok * 7 + 3 + (r % 3)) % static_cast<std::uint32_t>(vocab));
      ids[i] = tok;
    }
    data::write_shard((dir / (std::string(split) + ".bin")).string(), ids, static_cast<std::uint64_t>(vocab));
  }
  return dir;
}

train::lm_options tiny_options(model::family fam) {
  train::lm_options o;
  o.model = model::model_config::uniform(fam, 40, 16, 32, 2, 4, fam == model::family::gpt2 ? 4 : 2, 48);
  o.batch = 4;
  o.seq = 16;
  o.steps = 14;
  o.warmup = 2;
  o.lr = 1e-2;
  o.min_lr = 1e-3;
  o.checkpoint_every = 3;
  o.eval_every = 5;
  o.eval_tokens = 256;
  return o;
}

// Per-step records without their wall-clock time.
std::vector<std::string> step_records(const fs::path& metrics) {
  std::istringstream in(slurp(metrics));
  std::vector<std::string> out;
  std::string line;
  while (std::getline(in, line)) {
    auto j = nlohmann::json::parse(line);
    j.erase("seconds");
    out.push_back(j.dump());
  }
  return out;
}

train::lm_hooks quiet() {
  train::lm_hooks h;
  h.progress_bar = false;
  h.log = nullptr;
  return h;
}

void check_resume(model::family fam) {
  const auto data = make_data(std::string(model::family_name(fam)), 40);
  const auto opt = tiny_options(fam);
  const fs::path a = data / "run_a", b = data / "run_b";
  backend::cpu be;
  const auto full = train::train_lm(be, opt, data.string(), a.string(), quiet());
  CHECK_FALSE(full.resumed);

  // Stop at a random step (reported on failure), as a kill would: no checkpoint for that step.
  std::random_device rd;
  const long halt = 1 + static_cast<long>(rd() % static_cast<unsigned>(opt.steps - 1));
  INFO("halted after step ", halt);
  auto hooks = quiet();
  hooks.halt_after_step = halt;
  CHECK_THROWS_AS(train::train_lm(be, opt, data.string(), b.string(), hooks), train::halted);
  const auto resumed = train::train_lm(be, opt, data.string(), b.string(), quiet());
  // The halted step itself was not checkpointed, so the run restarts after the checkpoint before it.
  const long restart = (halt - 1) / opt.checkpoint_every * opt.checkpoint_every;
  CHECK(resumed.resumed == (restart > 0));
  CHECK(resumed.first_step == restart + 1);

  // Bitwise: the final model, the last checkpoint's optimiser state, every step's loss and grad norm.
  CHECK(slurp(a / "model" / "model.safetensors") == slurp(b / "model" / "model.safetensors"));
  const auto last = train::detail::step_name(opt.steps);
  CHECK(slurp(a / "checkpoints" / last / "optimizer.bin") == slurp(b / "checkpoints" / last / "optimizer.bin"));
  const auto ra = step_records(a / "metrics.jsonl"), rb = step_records(b / "metrics.jsonl");
  REQUIRE(ra.size() == static_cast<std::size_t>(opt.steps));
  CHECK(ra == rb);
  CHECK(full.val_loss == resumed.val_loss);
  // Only the newest keep_checkpoints folders remain.
  int folders = 0;
  for (const auto& e : fs::directory_iterator(a / "checkpoints")) folders += e.is_directory();
  CHECK(folders == opt.keep_checkpoints);
  fs::remove_all(data);
}

}  // namespace

TEST_CASE("train_lm: a run stopped at a random step and resumed equals an uninterrupted run bit for bit (gpt2)") {
  check_resume(model::family::gpt2);
}

TEST_CASE("train_lm: a run stopped at a random step and resumed equals an uninterrupted run bit for bit (llama, GQA)") {
  check_resume(model::family::llama);
}

TEST_CASE("train_lm: learns the data, beating the unigram baseline; the model folder reloads") {
  const auto data = make_data("learn", 40);
  auto opt = tiny_options(model::family::gpt2);
  opt.steps = 60;
  opt.checkpoint_every = 60;
  opt.eval_every = 60;
  backend::cpu be;
  const auto r = train::train_lm(be, opt, data.string(), (data / "run").string(), quiet());
  // The chain has 3 successors per token: entropy log 3 = 1.10 nats, unigram about log 40 = 3.7.
  CHECK(r.unigram_val_loss > 3.0);
  CHECK(r.val_loss < 0.6 * r.unigram_val_loss);
  const auto cfg = checkpoint::read_hf_config((data / "run" / "model").string());
  model::transformer<backend::cpu> net(be, cfg);
  checkpoint::load_hf_weights(net, (data / "run" / "model").string());
  const data::shard val((data / "validation.bin").string());
  CHECK(train::validation_loss(net, val, opt.batch, opt.seq, opt.eval_tokens) == r.val_loss);
  const auto report = nlohmann::json::parse(slurp(data / "run" / "report.json"));
  CHECK(report["val_loss"].get<double>() == r.val_loss);
  CHECK(report["val_protocol"].get<std::string>() == "split=validation seq_len=16 stride=16 tokens=256");
  fs::remove_all(data);
}

TEST_CASE("unigram_cross_entropy: add-one smoothed unigram of the training shard") {
  const fs::path dir = fs::temp_directory_path() / "lwcl_test_unigram";
  fs::create_directories(dir);
  data::write_shard((dir / "t.bin").string(), {0, 0, 0, 1, 2, 0}, 4);
  data::write_shard((dir / "v.bin").string(), {3, 0, 1, 0}, 4);
  const data::shard t((dir / "t.bin").string()), v((dir / "v.bin").string());
  // counts + 1: {5, 2, 2, 1} / 10; targets after the first token: 0, 1, 0.
  const double expected = -(std::log(0.5) + std::log(0.2) + std::log(0.5)) / 3;
  CHECK(train::unigram_cross_entropy(t, v, 100) == doctest::Approx(expected).epsilon(1e-14));
  CHECK(train::unigram_cross_entropy(t, v, 1) == doctest::Approx(-std::log(0.5)).epsilon(1e-14));
  fs::remove_all(dir);
}

TEST_CASE("train_lm: bad input gives lwcl::error") {
  const auto data = make_data("bad", 40);
  backend::cpu be;
  SUBCASE("a run directory started with other options") {
    auto opt = tiny_options(model::family::gpt2);
    opt.steps = 3;
    train::train_lm(be, opt, data.string(), (data / "run").string(), quiet());
    opt.lr = 5e-3;
    CHECK_THROWS_WITH_AS(train::train_lm(be, opt, data.string(), (data / "run").string(), quiet()),
                         doctest::Contains("was started with different options (lr was"), lwcl::error);
  }
  SUBCASE("a model vocabulary smaller than the data's") {
    auto opt = tiny_options(model::family::gpt2);
    opt.model.vocab = 20;
    CHECK_THROWS_WITH_AS(train::train_lm(be, opt, data.string(), (data / "run").string(), quiet()),
                         doctest::Contains("the data's vocabulary (40) is larger than the model's (20)"), lwcl::error);
  }
  SUBCASE("a missing data folder") {
    CHECK_THROWS_AS(train::train_lm(be, tiny_options(model::family::gpt2), (data / "nope").string(),
                                    (data / "run").string(), quiet()),
                    lwcl::error);
  }
  SUBCASE("seq longer than the model's positions, warmup not below steps") {
    auto opt = tiny_options(model::family::gpt2);
    opt.seq = 32;
    CHECK_THROWS_WITH_AS(opt.validate(), doctest::Contains("seq 32 exceeds the model's max_seq 16"), lwcl::error);
    opt = tiny_options(model::family::gpt2);
    opt.warmup = opt.steps;
    CHECK_THROWS_WITH_AS(opt.validate(), doctest::Contains("warmup 14 must be in [0, steps = 14)"), lwcl::error);
  }
  SUBCASE("a diverging run stops with the step named") {
    auto opt = tiny_options(model::family::gpt2);
    opt.lr = 1e30;
    opt.min_lr = 1e29;
    opt.clip = 1e30;
    CHECK_THROWS_WITH_AS(train::train_lm(be, opt, data.string(), (data / "run").string(), quiet()),
                         doctest::Contains("train_lm: training stopped at step"), lwcl::error);
  }
  SUBCASE("an unknown preset, an encoder family") {
    CHECK_THROWS_WITH_AS(train::lm_preset("huge", model::family::gpt2, 100), doctest::Contains("preset 'huge' is unknown"),
                         lwcl::error);
    CHECK_THROWS_WITH_AS(train::lm_preset("tiny", model::family::bert, 100), doctest::Contains("is not a decoder"),
                         lwcl::error);
  }
  fs::remove_all(data);
}

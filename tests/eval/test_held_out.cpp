// The held-out sample (eval/held_out.hpp): it covers every document of a split, in proportion to their
// lengths, never crossing a document boundary, the same every time; its perplexity is the mean over its
// windows of the model's own per-window loss; and bad requests are refused with lwcl::error.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "lwcl/backend/host/host.hpp"
#include "lwcl/eval/held_out.hpp"
#include "lwcl/model/checkpoint/hf.hpp"
#include "support/fixture.hpp"

using namespace lwcl;

namespace {

constexpr std::int32_t eot = 63;

// Documents of the given lengths joined by eot; document d's tokens are (d * 7 + i) % 60, so that every
// token says which document it came from (d = token's residue pattern checked below).
std::vector<std::int32_t> stream(const std::vector<std::size_t>& lengths, std::vector<std::size_t>& doc_of_position) {
  std::vector<std::int32_t> ids;
  for (std::size_t d = 0; d < lengths.size(); ++d) {
    if (d) {
      ids.push_back(eot);
      doc_of_position.push_back(SIZE_MAX);
    }
    for (std::size_t i = 0; i < lengths[d]; ++i) {
      ids.push_back(static_cast<std::int32_t>((d * 7 + i) % 60));
      doc_of_position.push_back(d);
    }
  }
  return ids;
}

}  // namespace

TEST_CASE("the held-out sample covers every document in proportion to its length, within document bounds") {
  const std::vector<std::size_t> lengths = {5000, 30, 400, 12000, 7, 2600};
  std::vector<std::size_t> where;
  auto ids = stream(lengths, where);
  ids.insert(ids.begin(), eot);  // a separator at the start and two at the end leave no empty document
  where.insert(where.begin(), SIZE_MAX);
  ids.push_back(eot);
  ids.push_back(eot);
  where.push_back(SIZE_MAX);
  where.push_back(SIZE_MAX);
  const auto docs = eval::split_documents(ids, eot);
  REQUIRE(docs.size() == lengths.size());
  for (std::size_t d = 0; d < docs.size(); ++d) CHECK(docs[d].size() == lengths[d]);

  const index_t T = 16;
  const auto s = eval::make_held_out_sample(ids, eot, T, 100, "validation");
  REQUIRE(s.windows.size() == s.document_of.size());
  std::vector<std::size_t> per_doc(lengths.size(), 0);
  for (std::size_t k = 0; k < s.windows.size(); ++k) {
    const std::size_t d = s.document_of[k];
    ++per_doc[d];
    const auto& w = s.windows[k];
    // A full window, or a whole short document; every token from its own document, no separator.
    CHECK(w.size() == std::min<std::size_t>(T + 1, lengths[d]));
    for (std::int32_t t : w) CHECK(t != eot);
    // Contiguous in the document: consecutive tokens follow the document's pattern.
    for (std::size_t i = 1; i < w.size(); ++i) CHECK((w[i] - w[i - 1] + 60) % 60 == 1);
  }
  for (std::size_t d = 0; d < lengths.size(); ++d) {
    CAPTURE(d);
    CHECK(per_doc[d] >= 1);  // every document
  }
  // 100 windows: one each, the other 94 by length (largest remainders); the 30- and 7-token documents
  // get only their one (a share below 1), and the 7-token one, shorter than a window, gives it whole.
  const double total = 5000 + 30 + 400 + 12000 + 7 + 2600;
  for (std::size_t d : {0, 3, 5}) {
    const double share = 1 + 94 * static_cast<double>(lengths[d]) / total;
    CHECK(std::abs(static_cast<double>(per_doc[d]) - share) < 1.0);
  }
  CHECK(per_doc[1] == 1);
  CHECK(per_doc[4] == 1);
  // Evenly spaced from the document's start to its end: the first window starts the document and
  // the last ends it.
  const auto& first = s.windows[0];
  CHECK(first.front() == 0);
  std::size_t last_of_3 = 0;
  for (std::size_t k = 0; k < s.windows.size(); ++k)
    if (s.document_of[k] == 3) last_of_3 = k;
  CHECK(s.windows[last_of_3].back() == static_cast<std::int32_t>((3 * 7 + lengths[3] - 1) % 60));
  // The same request, the same sample; the protocol names it.
  const auto again = eval::make_held_out_sample(ids, eot, T, 100, "validation");
  CHECK(again.windows == s.windows);
  CHECK(s.protocol().find("over all 6 documents") != std::string::npos);
  CHECK(s.windows.size() == 100);
  CHECK(s.predicted_tokens() == static_cast<index_t>(T * (s.windows.size() - 1) + (7 - 1)));
}

TEST_CASE("sample batches take full windows evenly over the sample; bad requests are refused") {
  std::vector<std::size_t> where;
  const auto ids = stream({300, 300, 300}, where);
  const auto s = eval::make_held_out_sample(ids, eot, 8, 12, "validation");
  const auto b = eval::sample_batches(s, 2, 8, 3);
  REQUIRE(b.size() == 3);
  for (const auto& batch : b) CHECK(batch.size() == 16);
  // 6 of the 12 windows, every other one: batch k's first row is window 4k, its second window 4k + 2.
  for (std::size_t k = 0; k < 3; ++k) {
    const auto& w0 = s.windows[4 * k];
    const auto& w1 = s.windows[4 * k + 2];
    CHECK(std::vector<std::int32_t>(b[k].begin(), b[k].begin() + 8) == std::vector<std::int32_t>(w0.begin(), w0.begin() + 8));
    CHECK(std::vector<std::int32_t>(b[k].begin() + 8, b[k].end()) == std::vector<std::int32_t>(w1.begin(), w1.begin() + 8));
  }
  CHECK_THROWS_WITH_AS(eval::make_held_out_sample(ids, eot, 8, 2, "validation"),
                       doctest::Contains("2 windows cannot cover the validation split's 3 documents"), lwcl::error);
  CHECK_THROWS_WITH_AS(eval::make_held_out_sample({eot, eot}, eot, 8, 4, "test"),
                       doctest::Contains("the test split has no document"), lwcl::error);
  CHECK_THROWS_WITH_AS(eval::sample_batches(s, 4, 8, 4), doctest::Contains("fewer than 4 batches of 4"), lwcl::error);
}

TEST_CASE("the sample's perplexity is the exponential of the mean loss over its windows' predictions") {
  const auto dir = test::data_path("hf/gpt2");
  backend::cpu be;
  model::transformer<backend::cpu> net(be, checkpoint::read_hf_config(dir), dtype::f64);
  checkpoint::load_hf_weights(net, dir);
  std::vector<std::size_t> where;
  const auto ids = stream({40, 9, 25}, where);
  const auto s = eval::make_held_out_sample(ids, eot, 6, 7, "validation");
  // Each window on its own: the model's mean next-token loss times its predictions.
  double nll = 0;
  index_t n = 0;
  for (const auto& w : s.windows) {
    const auto len = static_cast<index_t>(w.size()) - 1;
    const std::vector<std::int32_t> inp(w.begin(), w.end() - 1), tgt(w.begin() + 1, w.end());
    nll += net.forward(tensor(const_cast<std::int32_t*>(inp.data()), dtype::i32, {1, len}),
                       tensor(const_cast<std::int32_t*>(tgt.data()), dtype::i32, {1, len})) *
           static_cast<double>(len);
    n += len;
  }
  const auto r = eval::perplexity(net, s);
  CHECK(r.tokens == n);
  CHECK(std::abs(r.perplexity() - std::exp(nll / static_cast<double>(n))) < 1e-12 * r.perplexity());
  CHECK(r.protocol() == s.protocol());
}

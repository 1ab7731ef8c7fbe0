// prepare_data: turns the corpora written by tools/fetch_corpus.sh into what teacher training reads.
// Learns a byte-level BPE vocabulary on the training split only, then tokenises every split (documents
// joined by <|endoftext|>) into token shards:
//   <out>/tokenizer/{vocab.json, merges.txt}   <out>/{train,validation,test}.bin   <out>/summary.json
// and each corpus's held-out documents apart, <out>/{validation,test}.<corpus>.bin (manifest entries
// with a "corpus"). --train-corpus kjv learns the vocabulary and writes train.bin from that corpus alone.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "lwcl/core/fs.hpp"
#include "lwcl/core/timer.hpp"
#include "lwcl/data/shards.hpp"
#include "lwcl/model/tokenizer/bpe_trainer.hpp"
#include "lwcl/core/program.hpp"
#include "studies/validators.hpp"

using namespace lwcl;


int main(int argc, char** argv) {
  CLI::App app{"lwcl prepare_data: BPE vocabulary from the training split, token shards for every split"};
  std::string corpus = "data/corpus", out = "data/prepared", train_corpus;
  std::size_t vocab = 2048;
  app.add_option("--corpus", corpus, "folder written by tools/fetch_corpus.sh");
  app.add_option("--out", out, "output folder");
  app.add_option("--vocab", vocab, "vocabulary size (256 bytes + merges + <|endoftext|>)")->check(studies::within(257, 1 << 20));
  app.add_option("--train-corpus", train_corpus, "train (vocabulary and train.bin) on this corpus's documents only, e.g. "
                 "kjv: a teacher of one corpus, the other's test documents out of its domain");
  CLI11_PARSE(app, argc, argv);
  return lwcl::guard_main([&] {
    try {
      namespace fs = std::filesystem;
      const auto manifest_path = (fs::path(corpus) / "manifest.json").string();
      check(fs::exists(manifest_path), "prepare_data: no '", manifest_path, "' (run tools/fetch_corpus.sh first)");
      nlohmann::json manifest;
      try {
        manifest = nlohmann::json::parse(read_text(manifest_path));
      } catch (const nlohmann::json::exception& e) {
        fail("prepare_data: '", manifest_path, "' is malformed JSON: ", e.what());
      }
      std::map<std::string, std::vector<std::string>> docs;  // split -> texts, in manifest order
      std::map<std::string, std::map<std::string, std::vector<std::string>>> by_corpus;  // split -> corpus -> texts
      std::set<std::string> corpora;
      for (const auto& d : manifest.at("documents")) {
        const std::string split = d.at("split").get<std::string>();
        const std::string name = d.contains("corpus") ? d.at("corpus").get<std::string>() : "";
        if (!name.empty()) corpora.insert(name);
        if (split == "train" && !train_corpus.empty() && name != train_corpus) continue;
        auto text = read_text((fs::path(corpus) / d.at("path").get<std::string>()).string());
        if (!name.empty() && split != "train") by_corpus[split][name].push_back(text);
        docs[split].push_back(std::move(text));
      }
      if (!train_corpus.empty()) {
        std::string known;
        for (const auto& c : corpora) known += (known.empty() ? "" : ", ") + c;
        check(corpora.count(train_corpus) == 1, "prepare_data: --train-corpus '", train_corpus, "' is not a corpus of the "
              "manifest (it has: ", known.empty() ? std::string("none named") : known, ")");
      }
      check(!docs["train"].empty(), "prepare_data: the manifest lists no training documents");

      timer clock;
      std::printf("prepare_data: learning %zu-token BPE vocabulary on %zu training documents\n", vocab, docs["train"].size());
      const auto v = tokenizer::train_byte_bpe(docs["train"], vocab, {"<|endoftext|>"}, true);
      const auto tok_dir = (fs::path(out) / "tokenizer").string();
      tokenizer::save_bpe_vocabulary(v, tok_dir);
      std::printf("prepare_data: %zu merges in %.1f s\n", v.merges.size(), clock.seconds());
      const auto bpe = tokenizer::byte_bpe::from_files(tok_dir + "/vocab.json", tok_dir + "/merges.txt");
      const auto eot = static_cast<std::int32_t>(v.tokens.size() - 1);

      nlohmann::json summary = {{"vocab_size", v.tokens.size()}, {"merges", v.merges.size()}};
      if (!train_corpus.empty()) summary["train_corpus"] = train_corpus;
      // <name>.bin: the documents joined by <|endoftext|>.
      const auto write = [&](const std::string& name, const std::vector<std::string>& texts) {
        std::vector<std::int32_t> ids;
        std::size_t bytes = 0;
        for (const auto& text : texts) {
          const auto e = bpe.encode(text);
          ids.insert(ids.end(), e.begin(), e.end());
          ids.push_back(eot);
          bytes += text.size();
        }
        data::write_shard((fs::path(out) / (name + ".bin")).string(), ids, v.tokens.size());
        summary[name] = {{"documents", texts.size()}, {"bytes", bytes}, {"tokens", ids.size()}};
        std::printf("prepare_data: %-18s %3zu documents, %9zu bytes -> %8zu tokens (%.2f bytes/token)\n", name.c_str(),
                    texts.size(), bytes, ids.size(), ids.empty() ? 0.0 : static_cast<double>(bytes) / static_cast<double>(ids.size()));
      };
      for (const char* split : {"train", "validation", "test"}) write(split, docs[split]);
      // Each corpus's held-out documents apart too (validation.kjv.bin, test.austen.bin, ...).
      for (const auto& [split, parts] : by_corpus)
        for (const auto& [name, texts] : parts) write(split + "." + name, texts);
      write_text_atomic(out + "/summary.json", summary.dump(2) + "\n");
      std::printf("prepare_data: wrote %s/ in %.1f s\n", out.c_str(), clock.seconds());
      return 0;
    } catch (const nlohmann::json::exception& e) {
      fail("prepare_data: the corpus manifest lacks a field: ", e.what());
    }
  });
}

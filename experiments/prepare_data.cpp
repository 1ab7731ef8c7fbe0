// prepare_data: turns the corpora written by tools/fetch_corpus.sh into what teacher training reads.
// Learns a byte-level BPE vocabulary on the training split only, then tokenises every split (documents
// joined by <|endoftext|>) into token shards:
//   <out>/tokenizer/{vocab.json, merges.txt}   <out>/{train,validation,test}.bin   <out>/summary.json
#include <CLI/CLI.hpp>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "lwcl/core/fs.hpp"
#include "lwcl/core/timer.hpp"
#include "lwcl/data/shards.hpp"
#include "lwcl/model/tokenizer/bpe_trainer.hpp"

using namespace lwcl;


int main(int argc, char** argv) {
  CLI::App app{"lwcl prepare_data: BPE vocabulary from the training split, token shards for every split"};
  std::string corpus = "data/corpus", out = "data/prepared";
  std::size_t vocab = 2048;
  app.add_option("--corpus", corpus, "folder written by tools/fetch_corpus.sh");
  app.add_option("--out", out, "output folder");
  app.add_option("--vocab", vocab, "vocabulary size (256 bytes + merges + <|endoftext|>)")->check(CLI::Range(257, 1 << 20));
  CLI11_PARSE(app, argc, argv);
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
    for (const auto& d : manifest.at("documents"))
      docs[d.at("split").get<std::string>()].push_back(read_text((fs::path(corpus) / d.at("path").get<std::string>()).string()));
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
    for (const char* split : {"train", "validation", "test"}) {
      std::vector<std::int32_t> ids;
      std::size_t bytes = 0;
      for (const auto& text : docs[split]) {
        const auto e = bpe.encode(text);
        ids.insert(ids.end(), e.begin(), e.end());
        ids.push_back(eot);
        bytes += text.size();
      }
      const auto path = (fs::path(out) / (std::string(split) + ".bin")).string();
      data::write_shard(path, ids, v.tokens.size());
      summary[split] = {{"documents", docs[split].size()}, {"bytes", bytes}, {"tokens", ids.size()}};
      std::printf("prepare_data: %-10s %3zu documents, %9zu bytes -> %8zu tokens (%.2f bytes/token)\n", split,
                  docs[split].size(), bytes, ids.size(), ids.empty() ? 0.0 : static_cast<double>(bytes) / static_cast<double>(ids.size()));
    }
    write_text_atomic(out + "/summary.json", summary.dump(2) + "\n");
    std::printf("prepare_data: wrote %s/ in %.1f s\n", out.c_str(), clock.seconds());
    return 0;
  } catch (const lwcl::error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 2;
  } catch (const nlohmann::json::exception& e) {
    std::fprintf(stderr, "error: prepare_data: the corpus manifest lacks a field: %s\n", e.what());
    return 2;
  }
}

// export: a checkpoint folder written by lwcl (a Hugging Face folder from train_teacher, prune, recover or
// compress, or a packed folder from quantize --save) as a file another runtime loads. --format gguf writes
// llama.cpp's GGUF (model/checkpoint/gguf_model.hpp): matrices as F32, F16 or BF16 (--type), and a packed
// folder's int8 / int4 codes with groups of 32 and f16 scales as Q8_0 / Q4_0 blocks, bit for bit; a packed
// folder in another format is refused unless --requantise names Q8_0 or Q4_0. eval_model and generate read
// the file back.
//   export <folder> --format gguf --out model.gguf [--type f16] [--requantise q4_0] [--name NAME]
#include <CLI/CLI.hpp>

#include <cstdio>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "lwcl/backend/host/host.hpp"
#include "lwcl/model/checkpoint/gguf.hpp"
#include "lwcl/model/checkpoint/gguf_model.hpp"
#include "lwcl/model/checkpoint/hf.hpp"
#include "lwcl/quant/checkpoint.hpp"
#include "lwcl/quant/gguf.hpp"
#include "lwcl/report/format.hpp"

#include "host_instances.hpp"
#include "lwcl/core/program.hpp"

using namespace lwcl;

int main(int argc, char** argv) {
  CLI::App app{"lwcl export: a checkpoint folder as a GGUF file for llama.cpp"};
  std::string folder, format, out, type = "f32", requantise = "none", name;
  app.add_option("folder", folder, "checkpoint folder (config.json with model.safetensors or model.packed.safetensors, and the tokenizer)")
      ->required()
      ->check(CLI::ExistingDirectory);
  app.add_option("--format", format, "the file format to write: gguf")->required()->check(CLI::IsMember({"gguf"}));
  app.add_option("--out", out, "the file to write")->required();
  app.add_option("--type", type, "the type of every matrix not quantised: f32, f16 or bf16 (vectors stay f32)")
      ->capture_default_str()
      ->check(CLI::IsMember({"f32", "f16", "bf16"}));
  app.add_option("--requantise", requantise,
                 "a packed folder whose format is no GGUF block type (not int8/int4 g32 sym f16): quantise its dequantised "
                 "weights again by round to nearest into q8_0 or q4_0 (none: refuse)")
      ->capture_default_str()
      ->check(CLI::IsMember({"none", "q8_0", "q4_0"}));
  app.add_option("--name", name, "general.name in the file (default: the output file's stem)");
  CLI11_PARSE(app, argc, argv);

  return lwcl::guard_main([&] {
    namespace fs = std::filesystem;
    namespace gg = checkpoint::gguf;
    backend::cpu be;
    const auto cfg = checkpoint::read_hf_config(folder);
    model::transformer<backend::cpu> net(be, cfg, dtype::f32);
    checkpoint::gguf_save_options o;
    o.weights = type == "f16" ? gg::tensor_type::f16 : type == "bf16" ? gg::tensor_type::bf16 : gg::tensor_type::f32;
    o.name = name;
    o.tokenizer_from = folder;
    const bool packed = !fs::exists(fs::path(folder) / "model.safetensors") && fs::exists(fs::path(folder) / quant::packed_file);
    std::vector<std::string> requantised;
    if (packed) {
      const auto p = quant::load_packed_weights(net, folder);
      const int bits = requantise == "q8_0" ? 8 : requantise == "q4_0" ? 4 : 0;
      auto q = quant::gguf_blocks_of(p.names, p.weights, bits);
      o.blocks = std::move(q.blocks);
      o.quantiser = p.quantiser;
      requantised = std::move(q.requantised);
      std::printf("export: packed folder, %zu quantised linears (%s, quantiser %s)\n", p.names.size(),
                  p.weights.empty() ? "none" : p.weights.front().format.describe().c_str(), p.quantiser.c_str());
    } else {
      check(requantise == "none", "export: --requantise ", requantise, " applies to a packed folder (quantize --save), and '", folder,
            "' holds model.safetensors");
      checkpoint::load_hf_weights(net, folder);
    }
    checkpoint::save_gguf(net, out, o);

    // What was written, read back by lwcl's reader.
    const gg::file f(out);
    std::map<std::string, int> by_type;
    for (const auto& t : f.tensors()) ++by_type[std::string(gg::tensor_type_name(static_cast<gg::tensor_type>(t.type)))];
    std::string types;
    for (const auto& [t, n] : by_type) types += (types.empty() ? "" : ", ") + std::to_string(n) + " " + t;
    std::printf("export: wrote %s: GGUF v%u, architecture %s, %zu tensors (%s), %s\n", out.c_str(), f.file_version(),
                f.get_string("general.architecture").c_str(), f.tensors().size(), types.c_str(),
                report::human_bytes(static_cast<double>(f.bytes())).c_str());
    if (!requantised.empty())
      std::printf("export: %zu linears were requantised by round to nearest into %s (their stored format is no GGUF block "
                  "type), the first '%s'\n",
                  requantised.size(), requantise.c_str(), requantised.front().c_str());
    return 0;
  });
}

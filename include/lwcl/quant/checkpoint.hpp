#pragma once
// Packed checkpoints: a quantised model as lwcl stores it, at its quantised size. A folder holds
// config.json and the tokenizer as save_hf writes them, and model.packed.safetensors, in lwcl's
// parameter names:
//   <name>            F32, every parameter that was not quantised (embeddings, norms, biases, LM head)
//   <name>.codes      U8 (rows, cols * bits / 8): the codes, int4 in quant/packed.hpp's tile layout
//   <name>.scales     F16 or BF16 (rows, groups): one scale per row and group
//   <name>.zeros      U8 (rows, groups): the zero points, asymmetric formats only
// and, in the header's __metadata__, "lwcl_format": "packed-1", "quantiser", and for every quantised
// <name> a JSON string {"bits", "group", "symmetry", "scale_dtype", "rows", "cols"}. load_packed reads
// it back bit for bit and builds the model with the dequantised weights. A Hugging Face export of the
// same model (dequantised, loadable by transformers) is save_hf of that model.

#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "lwcl/core/error.hpp"
#include "lwcl/model/checkpoint/hf.hpp"
#include "lwcl/model/checkpoint/safetensors.hpp"
#include "lwcl/model/transformer.hpp"
#include "lwcl/quant/model.hpp"
#include "lwcl/quant/packed.hpp"

namespace lwcl::quant {

inline constexpr const char* packed_file = "model.packed.safetensors";
inline constexpr const char* packed_format_version = "packed-1";

struct packed_checkpoint {
  std::string quantiser;
  std::vector<std::string> names;      // the quantised parameters, in file order
  std::vector<packed_weight> weights;  // weights[i] is names[i]'s
  // Bytes of model.packed.safetensors on disk.
  std::size_t file_bytes = 0;
};

// Writes `net`, whose block linears `q` quantised (quantize_model leaves their dequantised values in the
// net), as a packed folder `dir`; tokenizer files are copied from `tokenizer_from` when it is not empty.
template <class Backend>
void save_packed(const model::transformer<Backend>& net, const quantized_model& q, const std::string& dir,
                 const std::string& tokenizer_from = {}) {
  namespace fs = std::filesystem;
  check(net.type() == dtype::f32, "save_packed: the model holds ", dtype_name(net.type()), " weights (expected f32)");
  check(q.layers.size() == q.weights.size(), "save_packed: ", q.layers.size(), " quantised layers with ", q.weights.size(),
        " packed weights");
  std::map<std::string, const packed_weight*> packed;
  for (std::size_t i = 0; i < q.layers.size(); ++i) {
    const auto& name = q.layers[i].name;
    check(net.layout().contains(name), "save_packed: the model has no parameter '", name, "' that was quantised");
    const auto& e = net.layout().find(name);
    const packed_weight& w = q.weights[i];
    check(e.shape.rank() == 2 && e.shape[0] == w.rows && e.shape[1] == w.cols, "save_packed: '", name, "' is ", e.shape.str(),
          " in the model but ", w.rows, " x ", w.cols, " packed");
    w.validate(name);
    packed[name] = &w;
  }
  fs::create_directories(dir);
  checkpoint::hf_save_options o;
  o.weights = dtype::f32;
  o.tokenizer_from = tokenizer_from;
  checkpoint::save_hf_config(net, dir, o);

  std::vector<float> params(static_cast<std::size_t>(net.layout().numel()));
  net.backend().to_host(params.data(), net.params().data, params.size() * sizeof(float));
  std::vector<checkpoint::safetensors_item> items;
  std::map<std::string, std::string> meta = {{"lwcl_format", packed_format_version}, {"quantiser", q.quantiser}};
  for (const auto& e : net.layout().entries()) {
    const auto it = packed.find(e.name);
    if (it == packed.end()) {
      items.push_back({e.name, dtype::f32, e.shape, params.data() + e.offset});
      continue;
    }
    const packed_weight& w = *it->second;
    items.push_back({e.name + ".codes", dtype::f32, shape{w.rows, w.row_bytes()}, w.codes.data(), "U8"});
    items.push_back({e.name + ".scales", w.format.scale_type, shape{w.rows, w.groups()}, w.scales.data()});
    if (w.format.sym == symmetry::asymmetric)
      items.push_back({e.name + ".zeros", dtype::f32, shape{w.rows, w.groups()}, w.zeros.data(), "U8"});
    const nlohmann::ordered_json j = {{"bits", w.format.bits},
                                      {"group", w.format.group},
                                      {"symmetry", std::string(symmetry_name(w.format.sym))},
                                      {"scale_dtype", std::string(checkpoint::safetensors_dtype_name(w.format.scale_type))},
                                      {"rows", w.rows},
                                      {"cols", w.cols}};
    meta[e.name] = j.dump();
  }
  checkpoint::write_safetensors((fs::path(dir) / packed_file).string(), items, meta);
}

namespace checkpoint_detail {

inline weight_format format_of(const std::string& name, const std::string& text, const std::string& path, index_t& rows,
                               index_t& cols) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const std::exception&) {
    fail("load_packed: '", path, "': the format of '", name, "' is not JSON: '", text, "'");
  }
  const auto need = [&](const char* key) -> const nlohmann::json& {
    check(j.is_object() && j.contains(key), "load_packed: '", path, "': the format of '", name, "' has no '", key, "'");
    return j.at(key);
  };
  weight_format f;
  try {
    f.bits = need("bits").get<int>();
    f.group = need("group").get<index_t>();
    const auto sym = need("symmetry").get<std::string>();
    check(sym == "sym" || sym == "asym", "load_packed: '", path, "': '", name, "' has symmetry '", sym, "' (expected sym or asym)");
    f.sym = sym == "sym" ? symmetry::symmetric : symmetry::asymmetric;
    const auto st = need("scale_dtype").get<std::string>();
    check(checkpoint::parse_safetensors_dtype(st, f.scale_type), "load_packed: '", path, "': '", name, "' has scale dtype '", st,
          "' (expected F16 or BF16)");
    rows = need("rows").get<index_t>();
    cols = need("cols").get<index_t>();
  } catch (const nlohmann::json::exception& e) {
    fail("load_packed: '", path, "': the format of '", name, "' has a field of the wrong type (", e.what(), ")");
  }
  f.check_for(rows, cols, name);
  return f;
}

// Copies a U8 or half tensor's bytes, checking its dtype and shape.
inline void read_raw(const checkpoint::safetensors_file& file, const std::string& name, const std::string& want_dtype,
                     const shape& want, void* out, std::size_t bytes) {
  check(file.contains(name), "load_packed: '", file.path(), "' has no tensor '", name, "'");
  const auto& e = file.entry(name);
  const std::string have = e.skipped.empty() ? std::string(checkpoint::safetensors_dtype_name(e.type)) : e.skipped;
  check(have == want_dtype, "load_packed: '", file.path(), "': tensor '", name, "' is ", have, ", expected ", want_dtype);
  check(e.dims == want, "load_packed: '", file.path(), "': tensor '", name, "' has shape ", e.dims.str(), ", expected ", want.str());
  check(e.end - e.begin == bytes, "load_packed: '", file.path(), "': tensor '", name, "' holds ", e.end - e.begin, " bytes, expected ",
        bytes);
  std::memcpy(out, file.bytes(name), bytes);
}

}  // namespace checkpoint_detail

// Reads a packed folder into `net` (built from the folder's config.json, f32): every plain parameter
// as stored, every quantised one dequantised; returns the packed weights as stored.
template <class Backend>
packed_checkpoint load_packed_weights(model::transformer<Backend>& net, const std::string& dir) {
  namespace fs = std::filesystem;
  check(net.type() == dtype::f32, "load_packed: the model holds ", dtype_name(net.type()), " weights (expected f32)");
  const std::string path = (fs::path(dir) / packed_file).string();
  check(fs::exists(path), "load_packed: no '", path, "' (a packed folder is written by quant::save_packed)");
  const checkpoint::safetensors_file file(path);
  const auto& meta = file.metadata();
  const auto fmt = meta.find("lwcl_format");
  check(fmt != meta.end() && fmt->second == packed_format_version, "load_packed: '", path, "' is not a packed checkpoint of format ",
        packed_format_version, " (its metadata has lwcl_format '", fmt == meta.end() ? std::string("(none)") : fmt->second, "')");
  packed_checkpoint out;
  if (const auto q = meta.find("quantiser"); q != meta.end()) out.quantiser = q->second;
  out.file_bytes = static_cast<std::size_t>(fs::file_size(path));

  std::vector<float> params(static_cast<std::size_t>(net.layout().numel()), 0.0f);
  std::size_t expected_tensors = 0;
  for (const auto& e : net.layout().entries()) {
    float* dst = params.data() + e.offset;
    const auto m = meta.find(e.name);
    if (m == meta.end()) {
      file.read(e.name, e.shape, dst);
      ++expected_tensors;
      continue;
    }
    index_t rows = 0, cols = 0;
    const weight_format f = checkpoint_detail::format_of(e.name, m->second, path, rows, cols);
    check(e.shape.rank() == 2 && e.shape[0] == rows && e.shape[1] == cols, "load_packed: '", path, "': '", e.name, "' is packed as ",
          rows, " x ", cols, " but the model's is ", e.shape.str());
    packed_weight w = make_packed(rows, cols, f, e.name);
    checkpoint_detail::read_raw(file, e.name + ".codes", "U8", shape{rows, w.row_bytes()}, w.codes.data(), w.codes.size());
    checkpoint_detail::read_raw(file, e.name + ".scales", std::string(checkpoint::safetensors_dtype_name(f.scale_type)),
                                shape{rows, w.groups()}, w.scales.data(), w.scales.size() * 2);
    expected_tensors += 2;
    if (f.sym == symmetry::asymmetric) {
      checkpoint_detail::read_raw(file, e.name + ".zeros", "U8", shape{rows, w.groups()}, w.zeros.data(), w.zeros.size());
      ++expected_tensors;
    }
    w.validate(e.name);
    const std::vector<float> deq = dequantize(w);
    std::memcpy(dst, deq.data(), deq.size() * sizeof(float));
    out.names.push_back(e.name);
    out.weights.push_back(std::move(w));
  }
  check(file.entries().size() == expected_tensors, "load_packed: '", path, "' holds ", file.entries().size(), " tensors, the model ",
        expected_tensors, " (tensors the model does not have)");
  net.backend().from_host(net.params().data, params.data(), params.size() * sizeof(float));
  return out;
}

// The model of a packed folder, its weights dequantised, and the packed weights.
template <class Backend>
std::pair<std::unique_ptr<model::transformer<Backend>>, packed_checkpoint> load_packed(Backend& be, const std::string& dir) {
  auto net = std::make_unique<model::transformer<Backend>>(be, checkpoint::read_hf_config(dir), dtype::f32);
  auto p = load_packed_weights(*net, dir);
  return {std::move(net), std::move(p)};
}

}  // namespace lwcl::quant

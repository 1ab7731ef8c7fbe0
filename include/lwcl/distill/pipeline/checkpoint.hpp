#pragma once
// A pipeline checkpoint: <run>/checkpoints/<name>/ holds student.bin (every student parameter as a
// double), segment.bin (the visit's segment parameters and AdamW state, mid-visit only) and state.json,
// the checkpoint_state below, which is where the run stands (phase, visit, step), what it has done so
// far (run_totals), and what it must match to be resumed (the fingerprint, the student's size). One
// struct, one JSON form (nlohmann's type macro), written and read in one place each.

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "lwcl/core/config.hpp"
#include "lwcl/core/error.hpp"
#include "lwcl/core/fs.hpp"
#include "lwcl/distill/pipeline/result.hpp"

namespace lwcl::distill {

struct checkpoint_state {
  std::size_t metrics_records = 0;  // metrics.jsonl records written when it was taken
  // Where the run stands: the next step is step `visit_step` of visit `position` of phase `phase`.
  std::size_t phase = 0;
  index_t position = 0;
  long visit_step = 0;
  std::vector<index_t> order;      // the phase's visiting order
  std::vector<double> difficulty;  // the phase's measured segment difficulties (empty: not measured)
  bool kd_done = false;
  nlohmann::json partial;  // the report of the visit under way (mid-visit), else null
  // What it has done.
  run_totals totals;
  double seconds = 0;  // wall clock so far, all processes
  std::size_t peak_staging_bytes = 0;
  // What a resumed run must match, and the runtime inputs it must reuse.
  std::size_t student_parameters = 0;
  nlohmann::json fingerprint, segmentation_inputs, feature_versions;
};
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE(checkpoint_state, metrics_records, phase, position, visit_step, order, difficulty,
                                   kd_done, partial, totals, seconds, peak_staging_bytes, student_parameters, fingerprint,
                                   segmentation_inputs, feature_versions)

// A checkpoint folder's name: ck_<segment steps>_p<phase>_v<visit>, so that names sort in run order.
inline std::string checkpoint_name(long global_step, std::size_t phase, index_t position) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "ck_%09ld_p%03zu_v%04lld", global_step, phase, static_cast<long long>(position));
  return buf;
}

// Writes the files of a checkpoint into `dir` (checkpoint_dir::start made it; commit names it latest
// after): the student's parameters, the segment's state when `seg` is given, and state.json.
template <class Segment>
void write_checkpoint(const std::filesystem::path& dir, const checkpoint_state& state, std::span<const double> params,
                      const Segment* seg) {
  write_file_atomic(dir / "student.bin",
                    std::string_view(reinterpret_cast<const char*>(params.data()), params.size_bytes()));
  if (seg) write_stream_atomic(dir / "segment.bin", [&](std::ostream& f) { seg->save_state(f); });
  write_text_atomic(dir / "state.json", nlohmann::json(state).dump() + "\n");
}

namespace checkpoint_detail {

// nlohmann reads a JSON float into an integer field with a plain cast, undefined for a value outside the
// field's range: wherever `shape` (a written state) holds an integer, `in` may not hold a float.
inline void check_integers(const nlohmann::json& in, const nlohmann::json& shape, const std::string& where,
                           const std::string& at) {
  if (shape.is_number_integer()) {
    check(!in.is_number_float(), where, ": ", at.empty() ? "a field" : at, " is ", in.dump(), ", expected an integer");
  } else if (shape.is_object() && in.is_object()) {
    for (const auto& [key, value] : shape.items())
      if (in.contains(key)) check_integers(in.at(key), value, where, at.empty() ? key : at + "." + key);
  } else if (shape.is_array() && !shape.empty() && in.is_array()) {
    for (std::size_t i = 0; i < in.size(); ++i) check_integers(in[i], shape[0], where, at + "[" + std::to_string(i) + "]");
  }
}

// A written state with every list and optional part filled, whose integers mark the integer fields.
inline const nlohmann::json& state_shape() {
  static const nlohmann::json shape = [] {
    checkpoint_state s;
    s.order = {0};
    s.difficulty = {0.5};
    s.totals.visits.emplace_back();
    s.totals.curve.emplace_back();
    nlohmann::json j = s;
    j["partial"] = visit_report{}.to_json();
    return j;
  }();
  return shape;
}

}  // namespace checkpoint_detail

// Reads the checkpoint in `dir` into `params` (the student's parameters) and returns its state, after
// checking that it belongs to this student and to a run with this `fingerprint`.
inline checkpoint_state read_checkpoint(const std::filesystem::path& dir, std::span<double> params,
                                        const nlohmann::json& fingerprint) {
  checkpoint_state state;
  const std::string where = "pipeline: '" + (dir / "state.json").string() + "' is not a checkpoint state";
  try {
    const auto j = nlohmann::json::parse(read_text(dir / "state.json"));
    checkpoint_detail::check_integers(j, checkpoint_detail::state_shape(), where, "");
    state = j.get<checkpoint_state>();
    if (!state.partial.is_null()) (void)visit_report::from_json(state.partial);
  } catch (const nlohmann::json::exception& e) {
    fail(where, ": ", e.what());
  }
  check(state.student_parameters == params.size(), "pipeline: checkpoint '", dir.string(), "' holds ",
        state.student_parameters, " student parameters, this student has ", params.size(),
        " (a run directory belongs to one student)");
  for (const auto& [field, value] : fingerprint.items()) {
    const bool has = state.fingerprint.contains(field);
    check(has && state.fingerprint.at(field) == value, "pipeline: checkpoint '", dir.string(), "' was made with ", field,
          " = ", has ? state.fingerprint.at(field).dump() : std::string("(none)"), ", this run has ", value.dump(),
          "; resume with the same settings, or start afresh (another run directory, or resume = false)");
  }
  // Read aside and checked whole before `params` changes.
  std::vector<double> read(params.size());
  std::ifstream f(dir / "student.bin", std::ios::binary);
  f.read(reinterpret_cast<char*>(read.data()), static_cast<std::streamsize>(read.size() * sizeof(double)));
  check(f.good(), "pipeline: '", (dir / "student.bin").string(), "' is shorter than the student's parameters");
  check(f.peek() == std::char_traits<char>::eof(), "pipeline: '", (dir / "student.bin").string(),
        "' is longer than the student's ", params.size(), " parameters");
  for (std::size_t i = 0; i < read.size(); ++i)
    check(std::isfinite(read[i]), "pipeline: '", (dir / "student.bin").string(), "' holds ", read[i],
          " at parameter ", i, "; the checkpoint is damaged");
  std::copy(read.begin(), read.end(), params.begin());
  return state;
}

// Restores a segment's state from the checkpoint in `dir`, which was taken at step `step` of its visit.
template <class Segment>
void read_segment_state(const std::filesystem::path& dir, Segment& seg, long step) {
  const auto path = dir / "segment.bin";
  std::ifstream in(path, std::ios::binary);
  check(in.good(), "pipeline: cannot read '", path.string(), "'");
  seg.load_state(in);
  check(seg.steps() == step, "pipeline: the segment state in '", path.string(), "' is at step ", seg.steps(),
        ", the checkpoint at ", step);
}

}  // namespace lwcl::distill

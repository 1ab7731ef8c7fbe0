#pragma once
// What a recovery may spend: optimiser steps, training tokens or wall-clock seconds, parsed from
// "steps:400", "tokens:2e6", "seconds:90" (or a bare number of steps).

#include <algorithm>
#include <cmath>
#include <exception>
#include <sstream>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "lwcl/core/config.hpp"
#include "lwcl/core/error.hpp"

namespace lwcl::distill {

enum class budget_unit { steps, tokens, seconds };

inline std::string_view budget_unit_name(budget_unit u) {
  switch (u) {
    case budget_unit::steps: return "steps";
    case budget_unit::tokens: return "tokens";
    case budget_unit::seconds: return "seconds";
  }
  return "?";
}

// What a whole recovery may spend: optimiser steps (segment steps, plus the final KD's), training tokens
// (steps x batch tokens), or wall-clock seconds (teacher pass included). Steps and tokens make a run
// deterministic; seconds make methods comparable on one machine.
struct budget {
  budget_unit unit = budget_unit::steps;
  double amount = 0;
  // The optimiser steps this budget allows at `batch_tokens` tokens a step (not rounded); 0 under seconds.
  double steps_at(index_t batch_tokens) const {
    if (unit == budget_unit::steps) return amount;
    if (unit == budget_unit::tokens) return amount / static_cast<double>(batch_tokens);
    return 0;
  }

  std::string str() const {
    std::ostringstream os;
    os << amount << ' ' << budget_unit_name(unit);
    return os.str();
  }
};

// A budget in config.json and report.json: {"unit": "steps", "amount": 400}.
template <class Json>
void to_json(Json& j, const budget& b) {
  j = Json{{"unit", budget_unit_name(b.unit)}, {"amount", b.amount}};
}

// "400", "steps:400", "tokens:2e6" or "seconds:90".
inline budget parse_budget(const std::string& text) {
  budget b;
  std::string number = text;
  if (const auto colon = text.find(':'); colon != std::string::npos) {
    const std::string unit = text.substr(0, colon);
    number = text.substr(colon + 1);
    if (unit == "steps") b.unit = budget_unit::steps;
    else if (unit == "tokens") b.unit = budget_unit::tokens;
    else if (unit == "seconds") b.unit = budget_unit::seconds;
    else fail("budget '", text, "': unknown unit '", unit, "', expected steps, tokens or seconds");
  }
  std::size_t used = 0;
  try {
    b.amount = std::stod(number, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  check(used == number.size() && !number.empty() && std::isfinite(b.amount) && b.amount > 0, "budget '", text,
        "': expected a positive number, optionally after steps:, tokens: or seconds:");
  return b;
}

// The rule every trainer under a seconds budget plans by (the pipeline's visits, end-to-end KD): it
// times its first steps, then plans those plus as many more as the seconds left hold at their pace,
// never more than it had planned. `done`: steps taken so far; `seconds_done`: what they took (so the
// pace is seconds_done / measured, `measured` of them timed); `seconds_left`: the budget still open.
inline long steps_within_seconds(long planned, long done, long measured, double seconds_done, double seconds_left) {
  const double per_step = seconds_done / static_cast<double>(measured);
  return std::min(planned, done + static_cast<long>(seconds_left / std::max(per_step, 1e-9)));
}

// How a recovery shares its budget: the optimiser steps each segment visit may take, in visiting order,
// and the steps of the final KD stage.
struct budget_plan {
  std::vector<long> visit_steps;
  long kd_steps = 0;

  long visit_total() const {
    long n = 0;
    for (long s : visit_steps) n += s;
    return n;
  }
};

// Under steps or tokens (tokens / batch_tokens steps): the final KD stage, when there is one, takes
// kd_share of the steps, and the rest go equally to the `visits` visits, the first ones taking the
// remainder; fewer than min_visit_steps a visit is an error. Under seconds, every visit may take
// max_visit_steps (its deadline stops it) and the KD stage runs on its share of the time.
inline budget_plan plan_budget(const budget& total, index_t visits, bool final_kd, double kd_share, index_t batch_tokens,
                               long max_visit_steps, long min_visit_steps = 1) {
  check(min_visit_steps >= 1, "pipeline: min_visit_steps is ", min_visit_steps, ", expected at least 1");
  budget_plan plan;
  plan.visit_steps.assign(static_cast<std::size_t>(visits), 0);
  if (total.unit == budget_unit::seconds) {
    plan.kd_steps = final_kd ? 1 : 0;
    for (auto& s : plan.visit_steps) s = max_visit_steps;
    return plan;
  }
  const long steps = static_cast<long>(std::floor(total.steps_at(batch_tokens)));
  plan.kd_steps = final_kd ? static_cast<long>(std::llround(static_cast<double>(steps) * kd_share)) : 0;
  const long layerwise = steps - plan.kd_steps;
  if (min_visit_steps == 1)
    check(layerwise >= visits, "pipeline: a budget of ", total.str(), " gives ", layerwise, " segment steps for ", visits,
          " segment visits; give at least one step per visit");
  else
    check(layerwise >= visits * min_visit_steps, "pipeline: a budget of ", total.str(), " gives ", layerwise,
          " segment steps for ", visits, " segment visits of at least ", min_visit_steps,
          " steps (min_visit_steps); give at least ", visits * min_visit_steps, " segment steps or lower the minimum");
  for (index_t g = 0; g < visits; ++g)
    plan.visit_steps[static_cast<std::size_t>(g)] = layerwise / visits + (g < layerwise % visits ? 1 : 0);
  return plan;
}

// How the layer-wise budget is shared among a phase's visits: equally, or in proportion to each
// segment's measured difficulty (its loss before training, which the curriculum's difficulty pass
// measures), so that the segments furthest from the teacher get the most steps.
enum class budget_share { equal, difficulty };

inline std::string_view budget_share_name(budget_share s) { return s == budget_share::equal ? "equal" : "difficulty"; }

inline budget_share parse_budget_share(const std::string& name) {
  if (name == "equal") return budget_share::equal;
  if (name == "difficulty") return budget_share::difficulty;
  fail("budget share '", name, "' is unknown; expected equal or difficulty");
}

// The weight of each of a phase's visits (in visiting order) under `share`: 1 each, or the segments'
// difficulties scaled to a mean of 1. A difficulty that is not finite and positive is refused.
inline std::vector<double> share_weights(budget_share share, const std::vector<double>& difficulty) {
  std::vector<double> w(difficulty.size(), 1.0);
  if (share == budget_share::equal || difficulty.empty()) return w;
  double sum = 0;
  for (std::size_t i = 0; i < difficulty.size(); ++i) {
    check(std::isfinite(difficulty[i]) && difficulty[i] > 0, "pipeline: segment visit ", i, " has difficulty ",
          difficulty[i], "; sharing the budget by difficulty needs finite positive losses");
    sum += difficulty[i];
  }
  for (std::size_t i = 0; i < w.size(); ++i) w[i] = difficulty[i] * static_cast<double>(w.size()) / sum;
  return w;
}

// `total` steps shared in proportion to `weights`, each share at least `min_steps` and whole (largest
// remainders, ties to the first): the minimum first, the rest by weight. Equal weights give the first
// visits the remainder, as plan_budget does.
inline std::vector<long> share_steps(long total, const std::vector<double>& weights, long min_steps) {
  const auto n = static_cast<long>(weights.size());
  check(n > 0, "share_steps: no visits to share ", total, " steps among");
  check(min_steps >= 0 && total >= n * min_steps, "share_steps: ", total, " steps cannot give ", n, " visits ", min_steps,
        " steps each");
  double sum = 0;
  for (const double w : weights) {
    check(std::isfinite(w) && w >= 0, "share_steps: a weight of ", w, ", expected finite and >= 0");
    sum += w;
  }
  const long spare = total - n * min_steps;
  std::vector<long> out(weights.size(), min_steps);
  std::vector<std::pair<double, long>> rem;  // (remainder, index)
  long given = 0;
  for (long i = 0; i < n; ++i) {
    const double exact = sum > 0 ? static_cast<double>(spare) * weights[static_cast<std::size_t>(i)] / sum
                                 : static_cast<double>(spare) / static_cast<double>(n);
    const auto whole = static_cast<long>(std::floor(exact));
    out[static_cast<std::size_t>(i)] += whole;
    given += whole;
    rem.emplace_back(exact - static_cast<double>(whole), i);
  }
  std::stable_sort(rem.begin(), rem.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  for (long k = 0; k < spare - given; ++k) ++out[static_cast<std::size_t>(rem[static_cast<std::size_t>(k)].second)];
  return out;
}

// The share of `seconds_left` that the next visit may take under a seconds budget: its weight over the
// weights of the visits still to come in its phase (`phase_weights`, its own first) plus one for each
// of the `later` visits of the phases after it (whose difficulty is not measured yet).
inline double visit_time_share(const std::vector<double>& phase_weights, long later) {
  check(!phase_weights.empty(), "visit_time_share: no visit to share the time with");
  double sum = static_cast<double>(later);
  for (const double w : phase_weights) sum += w;
  return sum > 0 ? phase_weights.front() / sum : 1.0;
}

// The steps a visit plans under a seconds budget before it has taken any: as many as `seconds` holds at
// `seconds_per_step` (the pace measured so far; 0 when nothing is measured yet, and then `cap`), between
// `min_steps` and `cap`.
inline long steps_for_seconds(double seconds, double seconds_per_step, long min_steps, long cap) {
  if (!(seconds_per_step > 0)) return std::max(min_steps, cap);
  const double n = std::floor(std::max(0.0, seconds) / seconds_per_step);
  return std::clamp(n >= static_cast<double>(cap) ? cap : static_cast<long>(n), std::min(min_steps, cap), cap);
}

}  // namespace lwcl::distill

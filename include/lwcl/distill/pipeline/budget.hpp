#pragma once
// What a recovery may spend: optimiser steps, training tokens or wall-clock seconds, parsed from
// "steps:400", "tokens:2e6", "seconds:90" (or a bare number of steps).

#include <algorithm>
#include <cmath>
#include <exception>
#include <sstream>
#include <string>
#include <string_view>
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
// remainder; fewer steps than visits is an error. Under seconds, every visit may take max_visit_steps
// (its deadline stops it) and the KD stage runs on its share of the time.
inline budget_plan plan_budget(const budget& total, index_t visits, bool final_kd, double kd_share, index_t batch_tokens,
                               long max_visit_steps) {
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
  check(layerwise >= visits, "pipeline: a budget of ", total.str(), " gives ", layerwise, " segment steps for ", visits,
        " segment visits; give at least one step per visit");
  for (index_t g = 0; g < visits; ++g)
    plan.visit_steps[static_cast<std::size_t>(g)] = layerwise / visits + (g < layerwise % visits ? 1 : 0);
  return plan;
}

}  // namespace lwcl::distill

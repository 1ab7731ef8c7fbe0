#pragma once
// What a recovery may spend: optimiser steps, training tokens or wall-clock seconds, parsed from
// "steps:400", "tokens:2e6", "seconds:90" (or a bare number of steps).

#include <algorithm>
#include <cmath>
#include <exception>
#include <sstream>
#include <string>
#include <string_view>

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

  std::string str() const {
    std::ostringstream os;
    os << amount << ' ' << budget_unit_name(unit);
    return os.str();
  }
};

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

}  // namespace lwcl::distill

#pragma once
// named_policy: what every policy has, a printable name. Reports, tables and config.json print it.

#include <concepts>
#include <string_view>
#include <type_traits>

namespace lwcl::policies {

// Requires: P::name, a static constexpr std::string_view that reports, tables and config.json print.
template <class P>
concept named_policy = requires {
  requires std::same_as<std::remove_cv_t<decltype(P::name)>, std::string_view>;
};

}  // namespace lwcl::policies

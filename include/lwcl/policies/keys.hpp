#pragma once
// The slots of a policy bundle. A bundle maps each key type to the policy chosen for it; the key types
// carry no data, only identity and a printable name for reports and tables.

#include <string_view>

namespace lwcl::key {

struct segmentation {
  static constexpr std::string_view name = "segmentation";
};
struct curriculum {
  static constexpr std::string_view name = "curriculum";
};
struct pruning {
  static constexpr std::string_view name = "pruning";
};
struct cache {
  static constexpr std::string_view name = "cache";
};
struct loss {
  static constexpr std::string_view name = "loss";
};
struct backend {
  static constexpr std::string_view name = "backend";
};

}  // namespace lwcl::key

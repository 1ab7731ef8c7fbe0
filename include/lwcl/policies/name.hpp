#pragma once
// Policy names built at compile time: a policy whose name depends on its template arguments
// (uniform<4>, curriculum<easy_to_hard,ramp,doubling>) needs its characters in an array with static
// lifetime behind its static constexpr std::string_view name.

#include <array>
#include <cstddef>
#include <string_view>

namespace lwcl::policies::detail {

// The decimal digits of N as `name`, a string_view with static storage.
template <long long N>
struct decimal_name {
  static_assert(N >= 0, "decimal_name: only non-negative numbers appear in policy names");
  static constexpr std::size_t size = [] {
    std::size_t n = 1;
    for (long long v = N; v >= 10; v /= 10) ++n;
    return n;
  }();
  static constexpr std::array<char, size + 1> chars = [] {
    std::array<char, size + 1> out{};
    long long v = N;
    for (std::size_t i = size; i-- > 0; v /= 10) out[i] = static_cast<char>('0' + v % 10);
    return out;
  }();
  static constexpr std::string_view name{chars.data(), size};
};

// Head::name<Args::name,...> as `value`: the name of a policy template spelled like the C++ type it names.
// The parts are types with a `name` member rather than string_view references, which nvcc's host pass
// turns into pointers and rejects.
template <class Head, class... Args>
struct template_name {
  static_assert(sizeof...(Args) > 0, "template_name: a template name needs at least one argument");
  static constexpr std::size_t size = Head::name.size() + (Args::name.size() + ... + 0) + sizeof...(Args) + 1;
  static constexpr std::array<char, size + 1> chars = [] {
    std::array<char, size + 1> out{};
    std::size_t i = 0;
    for (char c : Head::name) out[i++] = c;
    char sep = '<';
    for (std::string_view arg : {Args::name...}) {
      out[i++] = sep;
      sep = ',';
      for (char c : arg) out[i++] = c;
    }
    out[i] = '>';
    return out;
  }();
  static constexpr std::string_view value{chars.data(), size};
};

}  // namespace lwcl::policies::detail

#pragma once
// Tensor shapes: up to six extents, row-major (the last extent is contiguous).

#include <array>
#include <initializer_list>
#include <ostream>
#include <string>

#include "lwcl/core/config.hpp"
#include "lwcl/core/error.hpp"

namespace lwcl {

class shape {
 public:
  static constexpr int max_rank = 6;

  shape() = default;
  shape(std::initializer_list<index_t> dims) {
    check(dims.size() <= max_rank, "shape: rank ", dims.size(), " exceeds the maximum of ", max_rank);
    for (index_t d : dims) push(d);
  }
  template <class It>
  static shape from_range(It first, It last) {
    shape s;
    for (; first != last; ++first) s.push(static_cast<index_t>(*first));
    return s;
  }

  void push(index_t d) {
    check(rank_ < max_rank, "shape: rank exceeds the maximum of ", max_rank);
    check(d >= 0, "shape: negative extent ", d);
    dims_[static_cast<std::size_t>(rank_++)] = d;
  }
  int rank() const { return rank_; }
  index_t operator[](int i) const {
    check(i >= 0 && i < rank_, "shape: axis ", i, " out of range for rank ", rank_);
    return dims_[static_cast<std::size_t>(i)];
  }
  index_t numel() const {
    index_t n = 1;
    for (int i = 0; i < rank_; ++i) n *= dims_[static_cast<std::size_t>(i)];
    return n;
  }
  // Product of the extents after the first: the size of one row along axis 0.
  index_t inner() const {
    index_t n = 1;
    for (int i = 1; i < rank_; ++i) n *= dims_[static_cast<std::size_t>(i)];
    return n;
  }
  index_t last() const { return rank_ ? dims_[static_cast<std::size_t>(rank_ - 1)] : 1; }

  bool operator==(const shape& o) const {
    if (rank_ != o.rank_) return false;
    for (int i = 0; i < rank_; ++i)
      if (dims_[static_cast<std::size_t>(i)] != o.dims_[static_cast<std::size_t>(i)]) return false;
    return true;
  }
  bool operator!=(const shape& o) const { return !(*this == o); }

  std::string str() const {
    std::string s = "[";
    for (int i = 0; i < rank_; ++i) {
      if (i) s += ", ";
      s += std::to_string(dims_[static_cast<std::size_t>(i)]);
    }
    return s + "]";
  }

 private:
  std::array<index_t, max_rank> dims_{};
  int rank_ = 0;
};

inline std::ostream& operator<<(std::ostream& os, const shape& s) { return os << s.str(); }

}  // namespace lwcl

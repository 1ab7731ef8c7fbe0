#pragma once
// Carves many tensors out of one allocation, llm.c-style: declare each tensor with its shape, then
// allocate once. Parameters, gradients and activations each live in one buffer, so optimiser steps,
// zeroing and norms run over a single flat range. Offsets are 64-byte aligned.

#include <string>
#include <vector>

#include "lwcl/tensor/tensor.hpp"

namespace lwcl {

// Named tensors at fixed element offsets inside one flat buffer.
class tensor_layout {
 public:
  struct entry {
    std::string name;
    lwcl::shape shape;
    index_t offset;  // in elements
  };

  // Appends a tensor; returns its index.
  std::size_t add(std::string name, lwcl::shape s) {
    for (const auto& e : entries_) check(e.name != name, "tensor_layout: duplicate tensor name '", name, "'");
    entries_.push_back({std::move(name), s, total_});
    total_ += (s.numel() + 15) / 16 * 16;  // 64-byte alignment for 4-byte elements
    return entries_.size() - 1;
  }
  index_t numel() const { return total_; }
  const std::vector<entry>& entries() const { return entries_; }
  const entry& find(const std::string& name) const {
    for (const auto& e : entries_)
      if (e.name == name) return e;
    fail("tensor_layout: no tensor named '", name, "'");
  }
  bool contains(const std::string& name) const {
    for (const auto& e : entries_)
      if (e.name == name) return true;
    return false;
  }
  // The view of entry i inside a buffer starting at base with element type t.
  tensor view(void* base, dtype t, std::size_t i) const {
    const auto& e = entries_.at(i);
    return tensor(static_cast<char*>(base) + static_cast<std::size_t>(e.offset) * dtype_size(t), t, e.shape);
  }
  tensor view(void* base, dtype t, const std::string& name) const {
    const auto& e = find(name);
    return tensor(static_cast<char*>(base) + static_cast<std::size_t>(e.offset) * dtype_size(t), t, e.shape);
  }

 private:
  std::vector<entry> entries_;
  index_t total_ = 0;
};

// Binds declared tensor slots to one zeroed allocation. The slots must outlive the arena's use and stay
// where they are (hold the owning struct by pointer, not by value).
template <class Backend>
class arena {
 public:
  void declare(tensor& slot, lwcl::shape s) {
    slots_.push_back({&slot, s, total_});
    total_ += (s.numel() + 15) / 16 * 16;  // 64-byte alignment for 4-byte elements
  }
  void allocate(Backend& be, dtype t) {
    storage_ = buffer<Backend>(be, static_cast<std::size_t>(total_) * dtype_size(t));
    be.fill_zero(storage_.data(), storage_.bytes());
    for (const auto& e : slots_)
      *e.slot = tensor(static_cast<char*>(storage_.data()) + static_cast<std::size_t>(e.offset) * dtype_size(t), t, e.shape);
  }
  std::size_t bytes() const { return storage_.bytes(); }
  void* data() const { return storage_.data(); }

 private:
  struct entry {
    tensor* slot;
    lwcl::shape shape;
    index_t offset;
  };
  std::vector<entry> slots_;
  index_t total_ = 0;
  buffer<Backend> storage_;
};

}  // namespace lwcl

#pragma once
// A static, canonical Huffman code over byte symbols, for exponent_codec's exponent plane: code lengths
// from the symbol counts (at most 12 bits, so decoding is one lookup in a 4096-entry table), codes
// written least-significant bit first, and a decoder that checks every table entry and stream bound.

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <queue>
#include <utility>
#include <vector>

#include "lwcl/core/error.hpp"

namespace lwcl::codec::huffman {

inline constexpr int symbols = 256;
inline constexpr int max_length = 12;
using counts = std::array<std::uint64_t, symbols>;
using lengths = std::array<std::uint8_t, symbols>;

// Huffman code lengths for `freq`, none longer than max_length (0: symbol unused). When the optimal
// code is deeper, the counts are halved (every used symbol keeping at least 1) and the code rebuilt:
// slightly short of optimal, but only data where one exponent is thousands of times rarer than
// another's neighbours needs it, and it always ends (equal counts give a depth of at most 8).
inline lengths code_lengths(const counts& freq) {
  counts f = freq;
  for (;;) {
    lengths len{};
    std::vector<int> leaf_symbol;
    for (int s = 0; s < symbols; ++s)
      if (f[static_cast<std::size_t>(s)]) leaf_symbol.push_back(s);
    const int n = static_cast<int>(leaf_symbol.size());
    if (n == 0) return len;
    if (n == 1) {
      len[static_cast<std::size_t>(leaf_symbol[0])] = 1;  // a lone symbol still needs one bit per use
      return len;
    }
    const auto nodes = static_cast<std::size_t>(2 * n - 1);
    std::vector<std::uint64_t> weight(nodes, 0);
    std::vector<int> parent(nodes, -1);
    using item = std::pair<std::uint64_t, int>;  // ties broken by node index, so codes are reproducible
    std::priority_queue<item, std::vector<item>, std::greater<item>> heap;
    for (int i = 0; i < n; ++i) {
      weight[static_cast<std::size_t>(i)] = f[static_cast<std::size_t>(leaf_symbol[static_cast<std::size_t>(i)])];
      heap.emplace(weight[static_cast<std::size_t>(i)], i);
    }
    int next = n;
    while (heap.size() > 1) {
      const item a = heap.top();
      heap.pop();
      const item b = heap.top();
      heap.pop();
      weight[static_cast<std::size_t>(next)] = a.first + b.first;
      parent[static_cast<std::size_t>(a.second)] = parent[static_cast<std::size_t>(b.second)] = next;
      heap.emplace(a.first + b.first, next);
      ++next;
    }
    // A parent is created after its children, so walking down from the root fills every depth.
    std::vector<int> depth(nodes, 0);
    int deepest = 0;
    for (int i = static_cast<int>(nodes) - 2; i >= 0; --i) {
      depth[static_cast<std::size_t>(i)] = depth[static_cast<std::size_t>(parent[static_cast<std::size_t>(i)])] + 1;
      if (i < n) deepest = std::max(deepest, depth[static_cast<std::size_t>(i)]);
    }
    if (deepest <= max_length) {
      for (int i = 0; i < n; ++i)
        len[static_cast<std::size_t>(leaf_symbol[static_cast<std::size_t>(i)])] =
            static_cast<std::uint8_t>(depth[static_cast<std::size_t>(i)]);
      return len;
    }
    for (auto& c : f)
      if (c) c = (c + 1) / 2;
  }
}

// True when `len` describes a prefix code: every length at most max_length and the Kraft sum at most 1.
inline bool is_prefix_code(const lengths& len) {
  std::uint64_t kraft = 0;
  for (std::uint8_t l : len) {
    if (l > max_length) return false;
    if (l) kraft += std::uint64_t{1} << (max_length - l);
  }
  return kraft <= (std::uint64_t{1} << max_length);
}

inline std::uint32_t reverse_bits(std::uint32_t v, int n) {
  std::uint32_t r = 0;
  for (int i = 0; i < n; ++i, v >>= 1) r = (r << 1) | (v & 1u);
  return r;
}

// Canonical codes (shorter codes first, ties by symbol), bit-reversed for an LSB-first stream so the
// decoder can index its table with the next bits as they arrive.
struct code_table {
  std::array<std::uint32_t, symbols> code{};
  lengths len{};
};

inline code_table canonical_codes(const lengths& len) {
  check(is_prefix_code(len), "huffman: code lengths do not form a prefix code");
  std::array<std::uint32_t, max_length + 1> count{}, next{};
  for (std::uint8_t l : len) ++count[l];
  count[0] = 0;
  std::uint32_t code = 0;
  for (int b = 1; b <= max_length; ++b) {
    code = (code + count[static_cast<std::size_t>(b - 1)]) << 1;
    next[static_cast<std::size_t>(b)] = code;
  }
  code_table t;
  t.len = len;
  for (int s = 0; s < symbols; ++s) {
    const int l = len[static_cast<std::size_t>(s)];
    if (l) t.code[static_cast<std::size_t>(s)] = reverse_bits(next[static_cast<std::size_t>(l)]++, l);
  }
  return t;
}

// Bits needed to code `freq` with `len`.
inline std::uint64_t coded_bits(const counts& freq, const lengths& len) {
  std::uint64_t bits = 0;
  for (int s = 0; s < symbols; ++s) bits += freq[static_cast<std::size_t>(s)] * len[static_cast<std::size_t>(s)];
  return bits;
}

// Writes the codes of symbol_at(0 .. n-1) into out[0, out_bytes), which must be exactly the coded size.
template <class SymbolAt>
void encode(const code_table& t, std::size_t n, SymbolAt symbol_at, std::byte* out, std::size_t out_bytes) {
  std::uint64_t acc = 0;
  int bits = 0;
  std::size_t pos = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const auto s = static_cast<std::size_t>(symbol_at(i));
    acc |= static_cast<std::uint64_t>(t.code[s]) << bits;
    bits += t.len[s];
    if (bits >= 32) {
      check(pos + 4 <= out_bytes, "huffman: coded stream overruns its ", out_bytes, "-byte buffer");
      for (int b = 0; b < 4; ++b) out[pos++] = static_cast<std::byte>((acc >> (8 * b)) & 0xffu);
      acc >>= 32;
      bits -= 32;
    }
  }
  while (bits > 0) {
    check(pos < out_bytes, "huffman: coded stream overruns its ", out_bytes, "-byte buffer");
    out[pos++] = static_cast<std::byte>(acc & 0xffu);
    acc >>= 8;
    bits -= 8;
  }
  check(pos == out_bytes, "huffman: coded stream is ", pos, " bytes, expected ", out_bytes);
}

class decoder {
 public:
  // `len` comes from an untrusted payload: it is checked here.
  explicit decoder(const lengths& len) {
    check(is_prefix_code(len), "huffman: the code lengths in the payload do not form a prefix code");
    const code_table t = canonical_codes(len);
    for (std::uint8_t l : len) table_bits_ = std::max(table_bits_, static_cast<int>(l));
    table_.assign(std::size_t{1} << table_bits_, 0);
    for (int s = 0; s < symbols; ++s) {
      const int l = len[static_cast<std::size_t>(s)];
      if (!l) continue;
      const auto entry = static_cast<std::uint16_t>((s << 4) | l);
      for (std::size_t j = t.code[static_cast<std::size_t>(s)]; j < table_.size(); j += std::size_t{1} << l)
        table_[j] = entry;
    }
  }

  // Decodes n symbols from in[0, in_bytes) and hands each to emit(i, symbol). The stream must hold
  // exactly those codes plus fewer than 8 padding bits.
  template <class Emit>
  void decode(const std::byte* in, std::size_t in_bytes, std::size_t n, Emit emit) const {
    const std::byte* p = in;
    const std::byte* const end = in + in_bytes;
    const std::uint64_t mask = (std::uint64_t{1} << table_bits_) - 1;
    std::uint64_t acc = 0;
    int bits = 0;
    for (std::size_t i = 0; i < n; ++i) {
      if (bits < table_bits_)
        while (bits <= 56 && p < end) {
          acc |= static_cast<std::uint64_t>(*p++) << bits;
          bits += 8;
        }
      const std::uint16_t e = table_[acc & mask];
      const int l = e & 15;
      if (l == 0 || l > bits) [[unlikely]]
        fail("huffman: corrupt stream at symbol ", i, " of ", n,
             l == 0 ? " (no code matches)" : " (the stream ends inside a code)");
      emit(i, static_cast<std::uint8_t>(e >> 4));
      acc >>= l;
      bits -= l;
    }
    const std::uint64_t unused = static_cast<std::uint64_t>(end - p) * 8 + static_cast<std::uint64_t>(bits);
    check(unused < 8, "huffman: ", unused, " bits left after the last of ", n, " symbols, expected fewer than 8");
  }

 private:
  std::vector<std::uint16_t> table_;
  int table_bits_ = 0;
};

}  // namespace lwcl::codec::huffman

#pragma once
// How a transfer goes on the wire: as its raw bytes or coded by gauss_codec. A wire policy decides per
// message; the message carries its encoding, so the receiver needs no agreement with the sender.
// raw_wire and coded_wire always choose the same; adaptive_wire chooses from measurements: sending n
// bytes raw takes n / B on a link of bandwidth B, coded n / E + r n / B + n / D with the codec's
// encode and decode rates E and D and ratio r, and it takes the smaller, with B, E, D and r measured
// as the run goes (the communicator feeds it every coded transfer and re-measures the link). B is
// measured twice: one way (a send while the peer only receives: point to point, broadcast) and in a
// ring (every rank sending and receiving at once: allgather, reduce-scatter), since a link whose two
// directions share one limit gives a ring half of what it gives one way.

#include <algorithm>
#include <array>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <string_view>
#include <type_traits>

#include "lwcl/codec/encoding.hpp"
#include "lwcl/tensor/dtype.hpp"

namespace lwcl::dist {

// How a transfer uses the link: alone (one_way) or with every rank sending at once (ring).
enum class traffic_pattern : std::uint8_t { one_way, ring };

// Requires: W::name, a static constexpr std::string_view; w.choose(type, bytes, pattern) ->
// codec::encoding (raw or gauss) for a message of `bytes` raw bytes of elements of `type`.
template <class W>
concept wire_policy = requires(W& w, dtype t, std::size_t n, traffic_pattern p) {
  requires std::same_as<std::remove_cv_t<decltype(W::name)>, std::string_view>;
  { w.choose(t, n, p) } -> std::same_as<codec::encoding>;
};

// Elements gauss_codec can code.
inline constexpr bool codable(dtype t) { return t == dtype::f32 || t == dtype::bf16 || t == dtype::f16; }

struct raw_wire {
  static constexpr std::string_view name = "raw";
  codec::encoding choose(dtype, std::size_t, traffic_pattern) const { return codec::encoding::raw; }
};
static_assert(wire_policy<raw_wire>);

struct coded_wire {
  static constexpr std::string_view name = "coded";
  codec::encoding choose(dtype t, std::size_t, traffic_pattern) const {
    return codable(t) ? codec::encoding::gauss : codec::encoding::raw;
  }
};
static_assert(wire_policy<coded_wire>);

// What adaptive_wire knows: the link's bandwidth and, per element type, the codec's rates and ratio,
// each a running estimate (the latest measurement weighted by `weight`).
struct link_model {
  double bandwidth = 0;  // bytes per second in a ring, 0 until measured
  double one_way = 0;    // bytes per second alone on the link, 0 until measured (then the ring's is used)
  struct codec_rates {
    double encode = 0, decode = 0, ratio = 1;  // raw bytes per second; raw / coded bytes
    bool measured = false;
  };
  std::array<codec_rates, 3> by_type{};  // f32, bf16, f16
  double weight = 0.25;

  static std::size_t slot(dtype t) { return t == dtype::f32 ? 0 : t == dtype::bf16 ? 1 : 2; }
  const codec_rates& rates(dtype t) const { return by_type[slot(t)]; }

  static double blend(double old, double now, double w, bool first) { return first ? now : (1 - w) * old + w * now; }
  void link(double bytes_per_second) { bandwidth = blend(bandwidth, bytes_per_second, weight, bandwidth == 0); }
  void link_one_way(double bytes_per_second) { one_way = blend(one_way, bytes_per_second, weight, one_way == 0); }
  double bandwidth_for(traffic_pattern p) const { return p == traffic_pattern::one_way && one_way > 0 ? one_way : bandwidth; }
  void encoded(dtype t, double raw_bytes, double coded_bytes, double seconds) {
    auto& r = by_type[slot(t)];
    if (seconds > 0) r.encode = blend(r.encode, raw_bytes / seconds, weight, r.encode == 0);
    if (coded_bytes > 0) r.ratio = blend(r.ratio, raw_bytes / coded_bytes, weight, !r.measured);
    r.measured = true;
  }
  void decoded(dtype t, double raw_bytes, double seconds) {
    auto& r = by_type[slot(t)];
    if (seconds > 0) r.decode = blend(r.decode, raw_bytes / seconds, weight, r.decode == 0);
  }

  // Predicted seconds for n raw bytes sent raw and coded (infinite where a rate is unknown).
  double raw_seconds(double n, traffic_pattern p = traffic_pattern::ring) const {
    const double b = bandwidth_for(p);
    return b > 0 ? n / b : 0;
  }
  double coded_seconds(dtype t, double n, traffic_pattern p = traffic_pattern::ring) const {
    const auto& r = rates(t);
    const double b = bandwidth_for(p);
    if (b <= 0 || r.encode <= 0 || r.decode <= 0 || r.ratio <= 0) return 1e300;
    return n / r.encode + n / r.ratio / b + n / r.decode;
  }
  bool prefer_coded(dtype t, double n, traffic_pattern p = traffic_pattern::ring) const {
    return coded_seconds(t, n, p) < raw_seconds(n, p);
  }
};

// Chooses per message from a link_model; codes every `explore`-th message of a type it would send raw
// (so the ratio and rates of data that has changed are re-measured). The communicator measures.
struct adaptive_wire {
  static constexpr std::string_view name = "adaptive";
  link_model model;
  int explore = 16;
  std::array<int, 3> raw_since_coded{};
  std::uint64_t chose_raw = 0, chose_coded = 0;

  codec::encoding choose(dtype t, std::size_t n, traffic_pattern p) {
    if (!codable(t) || n < 4096) {  // below a block the header costs more than coding saves
      ++chose_raw;
      return codec::encoding::raw;
    }
    int& since = raw_since_coded[link_model::slot(t)];
    const bool coded = !model.rates(t).measured || model.prefer_coded(t, static_cast<double>(n), p) || ++since >= explore;
    if (coded) {
      since = 0;
      ++chose_coded;
      return codec::encoding::gauss;
    }
    ++chose_raw;
    return codec::encoding::raw;
  }
};
static_assert(wire_policy<adaptive_wire>);

// A wire that learns from measurements: the communicator reports each coded transfer's encode and
// decode and re-measures the link for it.
template <class W>
concept measured_wire = wire_policy<W> && requires(W& w) {
  { w.model } -> std::same_as<link_model&>;
};
static_assert(measured_wire<adaptive_wire> && !measured_wire<raw_wire>);

}  // namespace lwcl::dist

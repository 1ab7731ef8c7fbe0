#pragma once
// dist::communicator: lwcl's collectives over MPI for processes and host buffers. Every transfer goes
// through a wire policy (wire.hpp), which sends it raw or coded by gauss_codec; a message carries a
// 16-byte header (encoding, dtype, raw bytes) so the receiver decodes whatever arrives. The ring
// algorithms code once per hop: reduce-scatter codes each partial sum it passes on (the sums are f32
// and the code is lossless, so the result is the raw ring's bit for bit); allgather and broadcast
// forward the coded message as it came. Traffic is counted raw and on the wire.

#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <limits>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "lwcl/codec/encoding.hpp"
#include "lwcl/codec/gauss_codec.hpp"
#include "lwcl/core/error.hpp"
#include "lwcl/dist/wire.hpp"
#include "lwcl/tensor/dtype.hpp"

namespace lwcl::dist {

// MPI for the life of the object (a program makes one, first thing in main). Errors come back to the
// communicator, which throws lwcl::error, rather than aborting every rank. A rank that fails must end
// the whole job: the others may be waiting inside a collective for it, and MPI_Finalize would wait for
// them in turn. So the session aborts the job (MPI_Abort, every rank killed, mpirun's exit code
// non-zero) when it is destroyed while an exception unwinds through it, and `abort` does the same for a
// program that catches the error itself: on a failing rank, print and abort, never return from main.
class mpi_session {
 public:
  mpi_session(int& argc, char**& argv) : unwinding_at_start_(std::uncaught_exceptions()) {
    int provided = 0;
    check(MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided) == MPI_SUCCESS, "dist: MPI_Init_thread failed");
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  }
  ~mpi_session() {
    if (std::uncaught_exceptions() > unwinding_at_start_) {
      std::fprintf(stderr, "dist: rank %d is unwinding an exception out of its MPI session: ending the job\n", rank());
      std::fflush(stderr);
      MPI_Abort(MPI_COMM_WORLD, 1);
    }
    MPI_Finalize();
  }
  mpi_session(const mpi_session&) = delete;
  mpi_session& operator=(const mpi_session&) = delete;

  // Ends the whole job from this rank: prints "<program>: rank r: <what>" to stderr, then MPI_Abort
  // with `code` (non-zero), which ends every rank; mpirun exits non-zero. Does not return.
  [[noreturn]] void abort(std::string_view program, std::string_view what, int code = 1) const {
    std::fprintf(stderr, "%.*s: rank %d: %.*s\n", static_cast<int>(program.size()), program.data(), rank(),
                 static_cast<int>(what.size()), what.data());
    std::fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, code == 0 ? 1 : code);
    std::_Exit(code == 0 ? 1 : code);  // MPI_Abort does not return; if it ever did, the rank still ends
  }

  static int rank() {
    int r = -1;
    MPI_Comm_rank(MPI_COMM_WORLD, &r);
    return r;
  }

 private:
  int unwinding_at_start_;
};

// Messages and bytes a rank has sent: raw (what the data holds) and on the wire (headers and codes).
struct traffic {
  std::uint64_t messages = 0, coded_messages = 0, raw_bytes = 0, wire_bytes = 0;
};

// The element range [first, first + count) of part c when n elements are cut into `parts` parts, the
// first n % parts one longer.
struct chunk {
  std::size_t first = 0, count = 0;
};
inline chunk chunk_of(std::size_t n, int parts, int c) {
  const auto p = static_cast<std::size_t>(parts), k = static_cast<std::size_t>(c);
  const std::size_t base = n / p, extra = n % p;
  return {k * base + std::min(k, extra), base + (k < extra ? 1 : 0)};
}

// The ring's schedule, shared by every ring in lwcl (host and NCCL) so that they sum in one order: at
// step s rank r passes on part ring_part(r, s) = r - 1 - s (mod size) and receives ring_part(r - 1, s)
// from r - 1. Reduce-scatter adds what it receives into its own copy, so after size - 1 steps rank r
// holds the whole sum of part r; allgather starts from part r in place and ends with every part.
inline int ring_part(int rank, int step, int size) { return ((rank - 1 - step) % size + size) % size; }

class communicator {
 public:
  static constexpr std::size_t header_bytes = 16;

  explicit communicator(MPI_Comm comm = MPI_COMM_WORLD, int codec_threads = 1) : comm_(comm), codec_(codec_threads) {
    call(MPI_Comm_rank(comm_, &rank_), "MPI_Comm_rank");
    call(MPI_Comm_size(comm_, &size_), "MPI_Comm_size");
  }

  int rank() const { return rank_; }
  int size() const { return size_; }
  const traffic& sent() const { return sent_; }
  void barrier() const { call(MPI_Barrier(comm_), "MPI_Barrier"); }

  // ---- point to point -------------------------------------------------------------------------------
  template <wire_policy W>
  void send(W& w, dtype t, std::span<const std::byte> raw, int dest, int tag = 0) {
    check_peer(dest, "send");
    std::vector<std::byte> msg;
    pack(w, t, raw, msg, traffic_pattern::one_way);
    post_send(msg, dest, tag);
  }

  // Receives exactly raw.size() bytes of elements of type t from src.
  template <wire_policy W>
  void recv(W& w, dtype t, std::span<std::byte> raw, int src, int tag = 0) {
    check_peer(src, "recv");
    std::vector<std::byte> msg;
    receive(msg, src, tag);
    unpack(w, t, msg, raw, src);
  }

  // ---- collectives (every rank calls them in the same order) -------------------------------------
  // data: the root's bytes in, everyone's out. A binomial tree; the root's message is forwarded as is.
  template <wire_policy W>
  void broadcast(W& w, dtype t, std::span<std::byte> data, int root) {
    check_peer(root, "broadcast: root");
    collective(w);
    const int rel = (rank_ - root + size_) % size_;
    std::vector<std::byte> msg;
    if (rel == 0) pack(w, t, data, msg, traffic_pattern::one_way);
    for (int mask = 1; mask < size_; mask <<= 1) {
      if (rel < mask) {
        if (rel + mask < size_) post_send(msg, (rel + mask + root) % size_, tag_broadcast);
      } else if (rel < 2 * mask) {
        receive(msg, (rel - mask + root) % size_, tag_broadcast);
      }
    }
    if (rel != 0) unpack(w, t, msg, data, root);
  }

  // all = every rank's `mine` in rank order (all.size() == size() * mine.size()). A ring: each block
  // travels size() - 1 hops, coded once by its owner.
  template <wire_policy W>
  void allgather(W& w, dtype t, std::span<const std::byte> mine, std::span<std::byte> all) {
    check(all.size() == mine.size() * static_cast<std::size_t>(size_), "dist: allgather of ", mine.size(),
          " bytes a rank over ", size_, " ranks needs ", mine.size() * static_cast<std::size_t>(size_),
          " output bytes, got ", all.size());
    collective(w);
    std::vector<chunk> parts(static_cast<std::size_t>(size_));
    for (int c = 0; c < size_; ++c) parts[static_cast<std::size_t>(c)] = {static_cast<std::size_t>(c) * mine.size(), mine.size()};
    std::copy(mine.begin(), mine.end(), all.begin() + static_cast<std::ptrdiff_t>(parts[static_cast<std::size_t>(rank_)].first));
    ring_allgather(w, t, all, parts);
  }

  // out = the sum over ranks of in's part rank() (chunk_of(in.size(), size(), rank())), in f32, in the
  // ring's order: part c is summed starting at rank c + 1.
  template <wire_policy W>
  void reduce_scatter_sum(W& w, std::span<const float> in, std::span<float> out) {
    const chunk mine = chunk_of(in.size(), size_, rank_);
    check(out.size() == mine.count, "dist: reduce_scatter_sum of ", in.size(), " values gives rank ", rank_, " ",
          mine.count, ", the output holds ", out.size());
    collective(w);
    std::vector<float> acc(in.begin(), in.end());
    ring_reduce_scatter(w, acc);
    std::copy_n(acc.begin() + static_cast<std::ptrdiff_t>(mine.first), mine.count, out.begin());
  }

  // data = the sum over ranks of data, in f32: reduce-scatter, then allgather of the summed parts.
  template <wire_policy W>
  void allreduce_sum(W& w, std::span<float> data) {
    collective(w);
    std::vector<float> acc(data.begin(), data.end());
    ring_reduce_scatter(w, acc);
    std::vector<chunk> parts(static_cast<std::size_t>(size_));
    for (int c = 0; c < size_; ++c) {
      const chunk ch = chunk_of(acc.size(), size_, c);
      parts[static_cast<std::size_t>(c)] = {ch.first * sizeof(float), ch.count * sizeof(float)};
    }
    ring_allgather(w, dtype::f32, std::as_writable_bytes(std::span<float>(acc)), parts);
    std::copy(acc.begin(), acc.end(), data.begin());
  }

  // The link to the ring's next rank: bytes per second of a `probe`-byte exchange, the best of `rounds`
  // after one to warm up. Collective. A measured wire keeps it.
  double measure_link(std::size_t probe = std::size_t{1} << 20, int rounds = 3) {
    if (size_ == 1) return 0;
    const int count = probe_count(probe);
    std::vector<std::byte> out(probe, std::byte{0x5a}), in(probe);
    double best = 0;
    for (int r = 0; r <= rounds; ++r) {
      barrier();
      const auto t0 = std::chrono::steady_clock::now();
      call(MPI_Sendrecv(out.data(), count, MPI_BYTE, next(), tag_probe, in.data(), count, MPI_BYTE, prev(), tag_probe,
                        comm_, MPI_STATUS_IGNORE),
           "MPI_Sendrecv");
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      if (r > 0 && s > 0) best = std::max(best, static_cast<double>(probe) / s);
    }
    return best;
  }

  // The link one way: bytes per second of a `probe`-byte send while the peer only receives, the
  // best of `rounds`, timed by the sender until the peer's one-byte reply that it has it all (a send
  // alone may return once the bytes are in a socket buffer). Ranks pair up (0-1, 2-3, ...) and each
  // side sends in turn; an odd last rank sits out and gets 0. Collective.
  double measure_one_way(std::size_t probe = std::size_t{1} << 20, int rounds = 3) {
    const int peer = rank_ % 2 == 0 ? rank_ + 1 : rank_ - 1, count = probe_count(probe);
    std::vector<std::byte> out(probe, std::byte{0x3c}), in(probe);
    double best = 0;
    for (int r = 0; r <= rounds; ++r)
      for (int sender = 0; sender < 2; ++sender) {
        barrier();
        if (peer >= size_) continue;
        if (rank_ % 2 == sender) {
          const auto t0 = std::chrono::steady_clock::now();
          call(MPI_Send(out.data(), count, MPI_BYTE, peer, tag_probe, comm_), "MPI_Send");
          std::byte ack{};
          call(MPI_Recv(&ack, 1, MPI_BYTE, peer, tag_probe, comm_, MPI_STATUS_IGNORE), "MPI_Recv");
          const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
          if (r > 0 && s > 0) best = std::max(best, static_cast<double>(probe) / s);
        } else {
          call(MPI_Recv(in.data(), count, MPI_BYTE, peer, tag_probe, comm_, MPI_STATUS_IGNORE), "MPI_Recv");
          const std::byte ack{1};
          call(MPI_Send(&ack, 1, MPI_BYTE, peer, tag_probe, comm_), "MPI_Send");
        }
      }
    return best;
  }

  // How many collectives pass between two link measurements of a measured wire (0: never again).
  int remeasure_every = 64;

 private:
  static constexpr int tag_broadcast = 30001, tag_ring = 30002, tag_probe = 30003;

  int next() const { return (rank_ + 1) % size_; }
  int prev() const { return (rank_ + size_ - 1) % size_; }

  void call(int rc, const char* what) const {
    if (rc == MPI_SUCCESS) return;
    char text[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(rc, text, &len);
    fail("dist: ", what, " failed on rank ", rank_, ": ", std::string(text, static_cast<std::size_t>(len)));
  }
  void check_peer(int peer, const char* what) const {
    check(peer >= 0 && peer < size_, "dist: ", what, " rank ", peer, " is outside the ", size_, " ranks");
  }

  template <wire_policy W>
  void collective(W& w) {
    ++collectives_;
    if constexpr (measured_wire<W>) {
      if (w.model.bandwidth == 0 || (remeasure_every > 0 && collectives_ % static_cast<std::uint64_t>(remeasure_every) == 0)) {
        const double b = measure_link();
        if (b > 0) w.model.link(b);
        const double one = measure_one_way();
        if (one > 0) w.model.link_one_way(one);
      }
    }
  }

  // msg = header + payload (raw bytes or gauss_codec's payload), as the wire chooses.
  template <wire_policy W>
  void pack(W& w, dtype t, std::span<const std::byte> raw, std::vector<std::byte>& msg, traffic_pattern p) {
    const codec::encoding enc = w.choose(t, raw.size(), p);
    std::vector<std::byte> coded;
    std::span<const std::byte> payload = raw;
    if (enc == codec::encoding::gauss) {
      check(codable(t), "dist: cannot code ", dtype_name(t), " elements, expected f32, bf16 or f16");
      const auto t0 = std::chrono::steady_clock::now();
      codec_.encode(t, raw, coded);
      if constexpr (measured_wire<W>) {
        w.model.encoded(t, static_cast<double>(raw.size()), static_cast<double>(coded.size()),
                        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
        if (w.model.rates(t).decode == 0) {  // a rank that only sends learns the decode rate once here
          std::vector<std::byte> back(raw.size());
          const auto t1 = std::chrono::steady_clock::now();
          codec_.decode(t, coded, back);
          w.model.decoded(t, static_cast<double>(raw.size()),
                          std::chrono::duration<double>(std::chrono::steady_clock::now() - t1).count());
        }
      }
      payload = coded;
    }
    msg.resize(header_bytes + payload.size());
    std::memset(msg.data(), 0, header_bytes);
    msg[0] = static_cast<std::byte>(enc);
    msg[1] = static_cast<std::byte>(t);
    const std::uint64_t n = raw.size();
    std::memcpy(msg.data() + 8, &n, 8);
    if (!payload.empty()) std::memcpy(msg.data() + header_bytes, payload.data(), payload.size());
  }

  template <wire_policy W>
  void unpack(W& w, dtype t, std::span<const std::byte> msg, std::span<std::byte> raw, int from) {
    check(msg.size() >= header_bytes, "dist: a ", msg.size(), "-byte message from rank ", from, " is shorter than its ",
          header_bytes, "-byte header");
    const auto enc = static_cast<codec::encoding>(msg[0]);
    const auto type = static_cast<dtype>(msg[1]);
    std::uint64_t n = 0;
    std::memcpy(&n, msg.data() + 8, 8);
    check(type == t, "dist: message from rank ", from, " holds ", dtype_name(type), " elements, expected ", dtype_name(t));
    check(n == raw.size(), "dist: message from rank ", from, " holds ", n, " bytes, expected ", raw.size());
    const auto payload = msg.subspan(header_bytes);
    if (enc == codec::encoding::raw) {
      check(payload.size() == n, "dist: raw message from rank ", from, " carries ", payload.size(), " bytes, declares ", n);
      if (n) std::memcpy(raw.data(), payload.data(), n);
      return;
    }
    check(enc == codec::encoding::gauss, "dist: message from rank ", from, " has encoding ", static_cast<int>(msg[0]),
          ", expected raw (0) or gauss (3)");
    const auto t0 = std::chrono::steady_clock::now();
    codec_.decode(t, payload, raw);
    if constexpr (measured_wire<W>)
      w.model.decoded(t, static_cast<double>(n), std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }

  void post_send(const std::vector<std::byte>& msg, int dest, int tag) {
    MPI_Request req;
    isend(msg, dest, tag, req);
    call(MPI_Wait(&req, MPI_STATUS_IGNORE), "MPI_Wait");
  }
  void isend(const std::vector<std::byte>& msg, int dest, int tag, MPI_Request& req) {
    check(msg.size() <= static_cast<std::size_t>(std::numeric_limits<int>::max()), "dist: a message of ", msg.size(),
          " bytes exceeds MPI's 2^31 - 1 byte count; send it in parts");
    ++sent_.messages;
    if (static_cast<codec::encoding>(msg[0]) == codec::encoding::gauss) ++sent_.coded_messages;
    std::uint64_t n = 0;
    std::memcpy(&n, msg.data() + 8, 8);
    sent_.raw_bytes += n;
    sent_.wire_bytes += msg.size();
    call(MPI_Isend(msg.data(), static_cast<int>(msg.size()), MPI_BYTE, dest, tag, comm_, &req), "MPI_Isend");
  }
  void receive(std::vector<std::byte>& msg, int src, int tag) {
    MPI_Status st;
    call(MPI_Probe(src, tag, comm_, &st), "MPI_Probe");
    int count = 0;
    call(MPI_Get_count(&st, MPI_BYTE, &count), "MPI_Get_count");
    msg.resize(static_cast<std::size_t>(count));
    call(MPI_Recv(msg.data(), count, MPI_BYTE, src, tag, comm_, MPI_STATUS_IGNORE), "MPI_Recv");
  }
  // Sends `out` to dest while receiving from src (the ring's step), unpacked by the caller.
  void exchange(const std::vector<std::byte>& out, int dest, std::vector<std::byte>& in, int src) {
    MPI_Request req;
    isend(out, dest, tag_ring, req);
    receive(in, src, tag_ring);
    call(MPI_Wait(&req, MPI_STATUS_IGNORE), "MPI_Wait");
  }
  // A link probe's byte count, checked against MPI's int counts. Probes carry no header and are not
  // counted as traffic.
  static int probe_count(std::size_t probe) {
    check(probe <= static_cast<std::size_t>(std::numeric_limits<int>::max()), "dist: a ", probe,
          "-byte link probe exceeds MPI's 2^31 - 1 byte count");
    return static_cast<int>(probe);
  }

  // The ring's schedule (ring_part): after size() - 1 steps this rank holds the whole sum of its part.
  template <wire_policy W>
  void ring_reduce_scatter(W& w, std::vector<float>& acc) {
    std::vector<std::byte> out, in;
    std::vector<float> got;
    for (int s = 0; s + 1 < size_; ++s) {
      const chunk give = chunk_of(acc.size(), size_, ring_part(rank_, s, size_));
      const chunk take = chunk_of(acc.size(), size_, ring_part(rank_ - 1, s, size_));
      pack(w, dtype::f32, std::as_bytes(std::span<const float>(acc.data() + give.first, give.count)), out,
           traffic_pattern::ring);
      exchange(out, next(), in, prev());
      got.resize(take.count);
      unpack(w, dtype::f32, in, std::as_writable_bytes(std::span<float>(got)), prev());
      for (std::size_t i = 0; i < take.count; ++i) acc[take.first + i] += got[i];
    }
  }

  // data holds this rank's part at parts[rank()]; after the ring every part is in place. Each rank codes
  // its own part once and forwards what it receives unchanged.
  template <wire_policy W>
  void ring_allgather(W& w, dtype t, std::span<std::byte> data, const std::vector<chunk>& parts) {
    auto part = [&](int c) {
      const chunk ch = parts[static_cast<std::size_t>(c)];
      return data.subspan(ch.first, ch.count);
    };
    std::vector<std::byte> out, in;
    pack(w, t, part(rank_), out, traffic_pattern::ring);
    for (int s = 0; s + 1 < size_; ++s) {
      exchange(out, next(), in, prev());
      unpack(w, t, in, part(ring_part(rank_, s, size_)), prev());
      std::swap(out, in);
    }
  }

  MPI_Comm comm_;
  int rank_ = 0, size_ = 1;
  codec::gauss_codec codec_;
  traffic sent_;
  std::uint64_t collectives_ = 0;
};

}  // namespace lwcl::dist

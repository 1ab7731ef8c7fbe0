#pragma once
// dist::nccl_communicator: collectives on device buffers over NCCL, one GPU per rank, bootstrapped
// through the MPI communicator (rank 0's ncclUniqueId broadcast to the others). NCCL's own collectives
// for raw transfers; coded variants of broadcast and allreduce that send cuda_gauss_codec payloads
// with ncclSend/ncclRecv: the root codes once and the tree forwards its message; the allreduce is a
// ring that codes each f32 partial sum once per hop and adds on the device, then forwards the summed
// parts' codes, so its result is the raw ring's bit for bit (not NCCL's allreduce, whose order differs).
// Compiled by nvcc; run where every rank has a GPU (mpirun -np N with N GPUs).

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <vector>

#include "lwcl/backend/cuda/cuda.cuh"
#include "lwcl/backend/cuda/error.cuh"
#include "lwcl/backend/cuda/codec/gauss_codec.cuh"
#include "lwcl/core/error.hpp"
#include "lwcl/dist/communicator.hpp"
#include "lwcl/dist/wire.hpp"
#include "lwcl/tensor/dtype.hpp"
#include "lwcl/tensor/tensor.hpp"

namespace lwcl::dist {

namespace nccl_detail {

inline void check_nccl(ncclResult_t r, const char* what, const char* file, int line) {
  if (r == ncclSuccess) return;
  fail("dist: ", what, " failed (", ncclGetErrorString(r), ") at ", file, ":", line);
}

__global__ void add_kernel(float* acc, const float* x, std::size_t n) {
  const std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) acc[i] = __fadd_rn(acc[i], x[i]);
}

}  // namespace nccl_detail

#define LWCL_NCCL_CHECK(call) ::lwcl::dist::nccl_detail::check_nccl((call), #call, __FILE__, __LINE__)

class nccl_communicator {
 public:
  // Collective over `host`'s ranks: each brings its own GPU.
  nccl_communicator(backend::cuda& gpu, communicator& host) : gpu_(&gpu), coder_(gpu), rank_(host.rank()), size_(host.size()) {
    ncclUniqueId id;
    std::memset(&id, 0, sizeof id);
    if (rank_ == 0) LWCL_NCCL_CHECK(ncclGetUniqueId(&id));
    static_assert(sizeof(ncclUniqueId) % 4 == 0, "the id travels as 32-bit words");
    raw_wire raw;
    host.broadcast(raw, dtype::i32, std::as_writable_bytes(std::span<ncclUniqueId>(&id, 1)), 0);
    LWCL_CUDA_CHECK(cudaSetDevice(gpu.device()));
    LWCL_NCCL_CHECK(ncclCommInitRank(&comm_, size_, id, rank_));
  }
  ~nccl_communicator() {
    if (comm_) ncclCommDestroy(comm_);
  }
  nccl_communicator(const nccl_communicator&) = delete;
  nccl_communicator& operator=(const nccl_communicator&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  const traffic& sent() const { return sent_; }

  // ---- NCCL's own (raw) -----------------------------------------------------------------------------
  void allreduce_sum(float* data, std::size_t n) {
    LWCL_NCCL_CHECK(ncclAllReduce(data, data, n, ncclFloat, ncclSum, comm_, gpu_->stream()));
    count(n * 4 * 2 * static_cast<std::size_t>(size_ - 1) / static_cast<std::size_t>(size_), false);
    gpu_->synchronize();
  }
  void broadcast(void* data, std::size_t bytes, int root) {
    check_root(root);
    LWCL_NCCL_CHECK(ncclBroadcast(data, data, bytes, ncclUint8, root, comm_, gpu_->stream()));
    gpu_->synchronize();
  }
  void allgather(const void* mine, void* all, std::size_t bytes) {
    LWCL_NCCL_CHECK(ncclAllGather(mine, all, bytes, ncclUint8, comm_, gpu_->stream()));
    gpu_->synchronize();
  }
  // out (count values) = the sum over ranks of in's part rank() (in holds size() * count values).
  void reduce_scatter_sum(const float* in, float* out, std::size_t count_each) {
    LWCL_NCCL_CHECK(ncclReduceScatter(in, out, count_each, ncclFloat, ncclSum, comm_, gpu_->stream()));
    gpu_->synchronize();
  }
  void send(const void* data, std::size_t bytes, int peer) {
    check_root(peer);
    LWCL_NCCL_CHECK(ncclSend(data, bytes, ncclUint8, peer, comm_, gpu_->stream()));
    count(bytes, false);
    gpu_->synchronize();
  }
  void recv(void* data, std::size_t bytes, int peer) {
    check_root(peer);
    LWCL_NCCL_CHECK(ncclRecv(data, bytes, ncclUint8, peer, comm_, gpu_->stream()));
    gpu_->synchronize();
  }

  // ---- coded ------------------------------------------------------------------------------------------
  // n elements of `type` at data: the root's in, everyone's out. The root codes once; a binomial tree
  // forwards the payload (its size first, 8 bytes).
  void coded_broadcast(dtype type, void* data, std::size_t n, int root) {
    check_root(root);
    check(codable(type), "dist: cannot code ", dtype_name(type), " elements, expected f32, bf16 or f16");
    const int rel = (rank_ - root + size_) % size_;
    buffer<backend::cuda> payload;
    std::uint64_t bytes = 0;
    if (rel == 0) bytes = coder_.encode(type, data, n, payload);
    for (int mask = 1; mask < size_; mask <<= 1) {
      if (rel < mask && rel + mask < size_) {
        send_sized(payload, bytes, (rel + mask + root) % size_, static_cast<std::size_t>(n) * dtype_size(type));
      } else if (rel >= mask && rel < 2 * mask) {
        bytes = recv_sized(payload, (rel - mask + root) % size_);
      }
    }
    if (rel != 0) coder_.decode(type, payload.data(), bytes, data, n);
  }

  // data (n f32 values, device) = the sum over ranks, in the ring's order (part c summed from rank
  // c + 1 on, as dist::communicator sums it): reduce-scatter coding each partial sum, then allgather
  // forwarding each summed part's code.
  void coded_allreduce_sum(float* data, std::size_t n) {
    buffer<backend::cuda> out, in, got(*gpu_, (n / static_cast<std::size_t>(size_) + 1) * sizeof(float));
    const int next = (rank_ + 1) % size_, prev = (rank_ + size_ - 1) % size_;
    for (int s = 0; s + 1 < size_; ++s) {
      const chunk give = chunk_of(n, size_, ring_part(rank_, s, size_));
      const chunk take = chunk_of(n, size_, ring_part(rank_ - 1, s, size_));
      const std::uint64_t bytes = coder_.encode(dtype::f32, data + give.first, give.count, out);
      const std::uint64_t in_bytes = exchange(out, bytes, next, in, prev, give.count * sizeof(float));
      coder_.decode(dtype::f32, in.data(), in_bytes, got.data(), take.count);
      if (take.count) {
        nccl_detail::add_kernel<<<static_cast<unsigned>((take.count + 255) / 256), 256, 0, gpu_->stream()>>>(
            data + take.first, static_cast<const float*>(got.data()), take.count);
        LWCL_CUDA_CHECK_LAUNCH("dist: add_kernel");
      }
    }
    const chunk mine = chunk_of(n, size_, rank_);
    std::uint64_t bytes = coder_.encode(dtype::f32, data + mine.first, mine.count, out);
    for (int s = 0; s + 1 < size_; ++s) {
      const chunk ch = chunk_of(n, size_, ring_part(rank_, s, size_));
      const chunk sent_part = chunk_of(n, size_, ring_part(rank_ + 1, s, size_));
      const std::uint64_t in_bytes = exchange(out, bytes, next, in, prev, sent_part.count * sizeof(float));
      coder_.decode(dtype::f32, in.data(), in_bytes, data + ch.first, ch.count);
      std::swap(out, in);
      bytes = in_bytes;
    }
    gpu_->synchronize();
  }

 private:
  void check_root(int r) const {
    check(r >= 0 && r < size_, "dist: rank ", r, " is outside the ", size_, " ranks");
  }
  void count(std::size_t raw, bool coded, std::size_t wire = 0) {
    ++sent_.messages;
    if (coded) ++sent_.coded_messages;
    sent_.raw_bytes += raw;
    sent_.wire_bytes += coded ? wire : raw;
  }

  // The payload's size (8 bytes) then the payload, to peer.
  void send_sized(const buffer<backend::cuda>& payload, std::uint64_t bytes, int peer, std::size_t raw) {
    buffer<backend::cuda> size(*gpu_, 8);
    gpu_->from_host(size.data(), &bytes, 8);
    LWCL_NCCL_CHECK(ncclSend(size.data(), 8, ncclUint8, peer, comm_, gpu_->stream()));
    LWCL_NCCL_CHECK(ncclSend(payload.data(), bytes, ncclUint8, peer, comm_, gpu_->stream()));
    count(raw, true, bytes + 8);
    gpu_->synchronize();
  }
  std::uint64_t recv_sized(buffer<backend::cuda>& payload, int peer) {
    buffer<backend::cuda> size(*gpu_, 8);
    LWCL_NCCL_CHECK(ncclRecv(size.data(), 8, ncclUint8, peer, comm_, gpu_->stream()));
    std::uint64_t bytes = 0;
    gpu_->to_host(&bytes, size.data(), 8);
    if (payload.bytes() < bytes) payload = buffer<backend::cuda>(*gpu_, bytes);
    LWCL_NCCL_CHECK(ncclRecv(payload.data(), bytes, ncclUint8, peer, comm_, gpu_->stream()));
    gpu_->synchronize();
    return bytes;
  }
  // The ring's step: sizes, then payloads, each a send and a receive grouped so neither waits.
  std::uint64_t exchange(const buffer<backend::cuda>& out, std::uint64_t bytes, int next, buffer<backend::cuda>& in, int prev,
                         std::size_t raw) {
    buffer<backend::cuda> sizes(*gpu_, 16);
    gpu_->from_host(sizes.data(), &bytes, 8);
    auto* s = static_cast<std::uint64_t*>(sizes.data());
    LWCL_NCCL_CHECK(ncclGroupStart());
    LWCL_NCCL_CHECK(ncclSend(s, 8, ncclUint8, next, comm_, gpu_->stream()));
    LWCL_NCCL_CHECK(ncclRecv(s + 1, 8, ncclUint8, prev, comm_, gpu_->stream()));
    LWCL_NCCL_CHECK(ncclGroupEnd());
    std::uint64_t in_bytes = 0;
    gpu_->to_host(&in_bytes, s + 1, 8);
    if (in.bytes() < in_bytes) in = buffer<backend::cuda>(*gpu_, in_bytes);
    LWCL_NCCL_CHECK(ncclGroupStart());
    LWCL_NCCL_CHECK(ncclSend(out.data(), bytes, ncclUint8, next, comm_, gpu_->stream()));
    LWCL_NCCL_CHECK(ncclRecv(in.data(), in_bytes, ncclUint8, prev, comm_, gpu_->stream()));
    LWCL_NCCL_CHECK(ncclGroupEnd());
    count(raw, true, bytes + 8);
    gpu_->synchronize();
    return in_bytes;
  }

  backend::cuda* gpu_;
  codec::cuda_gauss_codec coder_;
  int rank_ = 0, size_ = 1;
  ncclComm_t comm_ = nullptr;
  traffic sent_;
};

}  // namespace lwcl::dist

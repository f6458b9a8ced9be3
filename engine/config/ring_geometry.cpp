#include "ring_geometry.hpp"

#include <algorithm>
#include <string>

namespace ulysses {

std::vector<int64_t> RingLayout::chunks_of_rank(int64_t r) const {
  if (balanced()) return {r, 2 * ring - 1 - r};
  return {r};
}

int64_t RingLayout::unmasked_blocks(int64_t r) const {
  int64_t n = 0;
  for (int64_t a : chunks_of_rank(r)) {
    for (int64_t b = 0; b < chunks(); ++b) {
      if (b <= a) ++n;
    }
  }
  return n;
}

std::vector<TokenRange> seq_shard_ranges(int64_t seq_length, int64_t sp, const RingLayout& layout, int64_t ring_rank,
                                         int64_t sp_rank) {
  const int64_t c = seq_length / layout.chunks();       // tokens per chunk
  const int64_t piece = seq_length / layout.ring / sp;  // tokens per rank
  const int64_t lo = sp_rank * piece, hi = lo + piece;  // in the ring rank's local order
  std::vector<TokenRange> out;
  int64_t local = 0;
  for (int64_t ch : layout.chunks_of_rank(ring_rank)) {
    const int64_t a = std::max(lo, local), b = std::min(hi, local + c);
    if (b > a) {
      const TokenRange t{ch * c + (a - local), ch * c + (b - local)};
      if (!out.empty() && out.back().end == t.begin)
        out.back().end = t.end;
      else
        out.push_back(t);
    }
    local += c;
  }
  return out;
}

RingBytes ring_bytes_per_rank(int64_t ring, int64_t batch, int64_t tokens, int64_t kv_heads, int64_t head_dim,
                              int64_t elem_bytes) {
  const int64_t kv = 2 * batch * tokens * kv_heads * head_dim;  // K and V elements of one block
  RingBytes b;
  if (ring <= 1) return b;
  b.forward = elem_bytes * kv * (ring - 1);
  b.backward = elem_bytes * kv * (ring - 1) + 4 * kv * ring;
  return b;
}

std::string ring_transport_for(const std::string& setting, const std::string& backend) {
  if (setting != "auto" && setting != "p2p" && setting != "alltoall")
    throw ConfigError("parallel.ring_transport must be auto, p2p or alltoall, got '" + setting + "'");
  if (setting == "p2p" && backend == "nccl")
    throw ConfigError(
        "parallel.ring_transport p2p runs on Gloo only: separate send and recv calls can deadlock on NCCL; use "
        "auto or alltoall");
  if (setting == "auto") return backend == "nccl" ? "alltoall" : "p2p";
  return setting;
}

std::vector<ConfigIssue> ring_issues(int64_t seq_length, int64_t sp, int64_t ring, bool zigzag) {
  std::vector<ConfigIssue> out;
  if (ring < 1) {
    out.push_back({"parallel.ring_size", "parallel.ring_size is " + std::to_string(ring) + "; it must be at least 1"});
    return out;
  }
  if (sp < 1) return out;  // sp_size's own check reports it
  const int64_t unit = sp * ring * (zigzag && ring > 1 ? 2 : 1);
  if (seq_length % unit != 0) {
    std::string why = std::to_string(sp) + " x parallel.ring_size " + std::to_string(ring);
    if (zigzag && ring > 1)
      why = "2 x parallel.sp_size " + why + " (zigzag load balancing: 2 chunks per ring rank)";
    else
      why = "parallel.sp_size " + why;
    out.push_back({"train.seq_length", "train.seq_length " + std::to_string(seq_length) + " is not divisible by " +
                                           why + " = " + std::to_string(unit) + "; use a multiple of " +
                                           std::to_string(unit)});
  }
  return out;
}

}  // namespace ulysses

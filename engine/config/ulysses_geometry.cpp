// Ulysses head geometry and its refusals (rules in ulysses_geometry.hpp).
#include "ulysses_geometry.hpp"

namespace ulysses {

namespace {
std::string geom_num(int64_t v) { return std::to_string(v); }
}  // namespace

std::string UlyssesGeometry::refusal() const {
  std::string out;
  for (const auto& i : issues) out += (out.empty() ? "" : "\n") + i.message;
  return out;
}

HeadRange UlyssesGeometry::kv_heads_of_rank(int64_t r) const {
  if (kv_replicated()) {
    const int64_t k = kv_head_of_sent(r);  // rank r receives expanded head r
    return {k, k + 1};
  }
  return {r * local_kv_heads, (r + 1) * local_kv_heads};
}

UlyssesGeometry ulysses_geometry(int64_t H, int64_t Hkv, int64_t P, int64_t C) {
  UlyssesGeometry g;
  g.H = H;
  g.Hkv = Hkv;
  g.P = P;
  g.C = C;
  auto bad = [&](const char* field, const std::string& msg) { g.issues.push_back({field, msg}); };
  if (H < 1 || Hkv < 1 || P < 1 || C < 1) {
    bad("model.num_attention_heads", "num_attention_heads (" + geom_num(H) + "), num_key_value_heads (" +
                                         geom_num(Hkv) + "), sp_size (" + geom_num(P) + ") and head_chunks (" +
                                         geom_num(C) + ") must be positive");
    return g;
  }
  if (H % Hkv != 0)
    bad("model.num_key_value_heads", "model.num_attention_heads (" + geom_num(H) +
                                         ") must be divisible by model.num_key_value_heads (" + geom_num(Hkv) + ")");
  if (H % P != 0)
    bad("parallel.sp_size",
        "model.num_attention_heads (" + geom_num(H) + ") must be divisible by parallel.sp_size (" + geom_num(P) + ")");
  if (Hkv % P == 0) {
    g.replication = 1;
  } else if (P % Hkv == 0) {
    g.replication = P / Hkv;
  } else {
    bad("model.num_key_value_heads", "model.num_key_value_heads (" + geom_num(Hkv) +
                                         ") must be divisible by parallel.sp_size (" + geom_num(P) +
                                         "), or divide it so that kv heads can be replicated");
  }
  if (H % P == 0) {
    // Any divisor of the local q heads: with GQA a kv head travels with the first chunk
    // that needs it, so the local kv head count puts no constraint on head_chunks.
    const int64_t h = H / P;
    if (h % C != 0)
      bad("parallel.head_chunks",
          "parallel.head_chunks (" + geom_num(C) +
              ") must divide the local heads per rank, num_attention_heads/sp_size = " + geom_num(h));
  }
  if (!g.ok()) return g;
  g.local_q_heads = H / P;
  g.kv_heads_sent = Hkv * g.replication;
  g.local_kv_heads = g.kv_heads_sent / P;
  g.q_per_kv = g.local_q_heads / g.local_kv_heads;
  g.chunk_q_heads = g.local_q_heads / C;
  return g;
}

UlyssesGeometry ulysses_geometry(const RunConfig& cfg) {
  return ulysses_geometry(cfg.model.num_attention_heads, cfg.model.num_key_value_heads, cfg.parallel.sp_size,
                          cfg.parallel.head_chunks);
}

std::vector<int64_t> UlyssesGeometry::chunk_kv_index(int64_t c) const {
  const int64_t lo = need_lo(c), nneed = need_hi(c) - lo, hc = chunk_q_heads;
  std::vector<int64_t> idx(static_cast<size_t>(hc));
  bool kernel_pairs_right = hc % nneed == 0;
  for (int64_t i = 0; i < hc; ++i) {
    idx[static_cast<size_t>(i)] = (c * hc + i) / q_per_kv - lo;
    kernel_pairs_right = kernel_pairs_right && idx[static_cast<size_t>(i)] == i / (hc / nneed);
  }
  return kernel_pairs_right ? std::vector<int64_t>{} : idx;
}

}  // namespace ulysses

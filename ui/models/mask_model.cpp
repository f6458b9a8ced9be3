// The explainer's document-mask stage (mask_model.hpp).
#include "mask_model.hpp"

#include <algorithm>
#include <exception>
#include <fstream>

#include "documents_manifest.hpp"
#include "explain_model.hpp"

namespace ulysses::ui {

namespace {
// The documents of the first packed sequence of a prepared folder (the packing rule of
// pack_documents), or none when it cannot be read.
std::vector<int64_t> first_sequence_documents(const std::string& dir, int64_t N) {
  try {
    const auto m = read_documents_manifest(dir);
    // Only the offsets up to the first one past N: the first sequence is packed from them (the
    // launcher redraws on every edit; a big folder's index is not read whole for it).
    std::vector<int64_t> off;
    std::ifstream f(m.offsets_path, std::ios::binary);
    unsigned char b[8];
    while (f.read(reinterpret_cast<char*>(b), 8)) {
      uint64_t v = 0;
      for (int i = 7; i >= 0; --i) v = (v << 8) | b[i];
      if (!off.empty() && int64_t(v) < off.back()) return {};  // not an index: no picture from it
      off.push_back(int64_t(v));
      if (int64_t(v) > N) break;
    }
    if (off.size() < 2 || off.front() != 0) return {};
    std::vector<int64_t> seqs, borders;
    pack_documents(off, N, &seqs, &borders);
    if (seqs.size() < 2) return {};
    std::vector<int64_t> docs;
    for (size_t i = 0; i + 1 < borders.size() && borders[i] < seqs[1]; ++i)
      docs.push_back(std::min(borders[i + 1], seqs[1]) - borders[i]);
    return docs;
  } catch (const std::exception&) {
    return {};
  }
}
}  // namespace

int64_t live_pairs(const std::vector<int64_t>& start, int64_t q0, int64_t q1, int64_t k0, int64_t k1) {
  int64_t n = 0;
  for (int64_t q = q0; q < q1; ++q) {
    const int64_t lo = std::max(k0, start[size_t(q)]), hi = std::min(k1 - 1, q);
    if (hi >= lo) n += hi - lo + 1;
  }
  return n;
}

DocumentMaskPicture document_mask_picture(const RunConfig& cfg, int64_t grid) {
  DocumentMaskPicture pic;
  const int64_t N = cfg.train.seq_length;
  if (N < 2 || N > (int64_t{1} << 24) || grid < 1) return pic;
  pic.N = N;
  if (cfg.data.kind == "documents") pic.docs = first_sequence_documents(cfg.data.path, N);
  if (!pic.docs.empty()) {
    pic.source = QStringLiteral("the first packed sequence of %1").arg(QString::fromStdString(cfg.data.path));
  } else {  // an example: five documents of 3, 5, 2, 4 and 2 sixteenths of the sequence
    pic.source = QStringLiteral("an example (data.kind = documents shows the first sequence of data.path)");
    int64_t used = 0;
    for (const int64_t sixteenths : {3, 5, 2, 4}) {
      const int64_t len = std::max<int64_t>(1, N * sixteenths / 16);
      if (used + len >= N) break;
      pic.docs.push_back(len);
      used += len;
    }
    pic.docs.push_back(N - used);
  }
  int64_t used = 0;
  for (const int64_t len : pic.docs) used += len;
  pic.padding = N - used;  // padding: a document of its own, as the kernels see it
  if (pic.padding > 0) pic.docs.push_back(pic.padding);
  std::vector<int64_t> start(static_cast<size_t>(N));
  int64_t t = 0;
  for (const int64_t len : pic.docs)
    for (int64_t i = 0; i < len && t < N; ++i, ++t) start[size_t(t)] = t - i;
  pic.G = std::min<int64_t>(grid, N);
  for (int64_t qb = 0; qb < pic.G; ++qb)
    for (int64_t kb = 0; kb < pic.G; ++kb) {
      MaskCell c{qb * N / pic.G, (qb + 1) * N / pic.G, kb * N / pic.G, (kb + 1) * N / pic.G, 0, 0};
      c.live = live_pairs(start, c.q0, c.q1, c.k0, c.k1);
      for (int64_t q = c.q0; q < c.q1; ++q) c.causal += std::max<int64_t>(0, std::min(c.k1 - 1, q) - c.k0 + 1);
      pic.causal_pairs += c.causal;
      pic.live_pairs += c.live;
      pic.cells.push_back(c);
    }
  pic.R = std::max<int64_t>(1, cfg.parallel.ring_size);
  pic.zigzag = cfg.parallel.ring_zigzag;
  if (pic.R > 1) {
    const RingHops rh = ring_hops(pic.R, pic.zigzag);
    pic.chunks = rh.chunks;
    const int64_t C = N / rh.chunks;
    for (size_t h = 0; h < rh.hops.size(); ++h)
      for (size_t r = 0; r < rh.hops[h].computed.size(); ++r)
        for (const auto& b : rh.hops[h].computed[r]) {
          MaskRingCell c{int64_t(r), int64_t(h), b.q_chunk, b.kv_chunk, 0, 0};
          const int64_t q0 = b.q_chunk * C, k0 = b.kv_chunk * C;
          c.live = live_pairs(start, q0, q0 + C, k0, k0 + C);
          for (int64_t q = q0; q < q0 + C; ++q) c.causal += std::max<int64_t>(0, std::min(k0 + C - 1, q) - k0 + 1);
          ++pic.ring_blocks;
          if (c.live == 0) ++pic.ring_skipped;
          pic.ring.push_back(c);
        }
  }
  pic.ok = true;
  return pic;
}

}  // namespace ulysses::ui

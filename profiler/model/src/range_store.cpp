// RangeStore: rows to columns and back. See range_store.hpp.
#include "ulysses/profiler/range_store.hpp"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <thread>

#include "ulysses/profiler/parallel.hpp"

namespace ulysses::prof {

namespace {

std::atomic<uint64_t> g_unseals{0};

static_assert(sizeof(RangeStore::Attr) == 24, "RangeStore::Attr is hashed and compared as its 24 bytes");

// Distinct keys of three words (attribute combinations; byte pairs), ids in the order first
// met: open addressing with the key in the slot, so a lookup touches one slot and its
// neighbours.
class KeyTable {
 public:
  struct Key {
    uint64_t w[3];
    bool operator==(const Key& o) const { return w[0] == o.w[0] && w[1] == o.w[1] && w[2] == o.w[2]; }
  };
  std::vector<Key> keys;
  uint32_t id(const Key& k) {
    if ((keys.size() + 1) * 2 > slots_.size()) grow();
    const size_t mask = slots_.size() - 1;
    for (size_t s = hash(k) & mask;; s = (s + 1) & mask) {
      Slot& sl = slots_[s];
      if (sl.id == 0) {
        keys.push_back(k);
        sl.key = k;
        sl.id = static_cast<uint32_t>(keys.size());
        return sl.id - 1;
      }
      if (sl.key == k) return sl.id - 1;
    }
  }

 private:
  struct Slot {
    Key key;
    uint32_t id = 0;  // id + 1; 0: empty
  };
  static size_t hash(const Key& k) {
    uint64_t h = (k.w[0] ^ (k.w[1] * 0x9E3779B97F4A7C15ULL)) * 0xC2B2AE3D27D4EB4FULL;
    h ^= k.w[2] * 0x165667B19E3779F9ULL;
    return static_cast<size_t>(h ^ (h >> 31));
  }
  void grow() {
    std::vector<Slot> slots(std::max<size_t>(1024, slots_.size() * 2));
    slots_.swap(slots);
    const size_t mask = slots_.size() - 1;
    for (size_t k = 0; k < keys.size(); ++k) {
      size_t s = hash(keys[k]) & mask;
      while (slots_[s].id != 0) s = (s + 1) & mask;
      slots_[s].key = keys[k];
      slots_[s].id = static_cast<uint32_t>(k + 1);
    }
  }
  std::vector<Slot> slots_;
};

KeyTable::Key key_of(const RangeStore::Attr& a) {
  KeyTable::Key k;
  std::memcpy(k.w, &a, sizeof a);
  return k;
}

RangeStore::Attr attr_of(const KeyTable::Key& k) {
  RangeStore::Attr a;
  std::memcpy(&a, k.w, sizeof a);
  return a;
}

RangeStore::Attr attr_of(const TraceRange& r) {
  RangeStore::Attr a;
  a.rank = r.rank;
  a.lane = r.lane;
  a.name_id = r.name_id;
  a.layer = r.layer;
  a.head_begin = r.head_begin;
  a.head_end = r.head_end;
  a.chunk = r.chunk;
  a.phase = r.phase;
  a.dir = r.dir;
  a.depth = r.depth;
  a.is_kernel = r.is_kernel ? 1 : 0;
  return a;
}

template <class T>
size_t cap_bytes(const std::vector<T>& v) {
  return v.capacity() * sizeof(T);
}

template <class T>
void free_vector(std::vector<T>& v) {
  std::vector<T>().swap(v);
}

// A SparseColumn whose bits are set: its counts before each word and its values, given per part
// (part p owns words part_words[p] and its values are part_values[p], in index order).
template <class T>
void finish_sparse(SparseColumn<T>& c, std::vector<std::vector<T>>& part_values,
                   const std::vector<std::pair<size_t, size_t>>& part_words) {
  c.before.assign(c.bits.size(), 0);
  size_t total = 0;
  for (size_t p = 0; p < part_values.size(); ++p) {
    uint32_t run = static_cast<uint32_t>(total);
    for (size_t w = part_words[p].first; w < part_words[p].second; ++w) {
      c.before[w] = run;
      run += static_cast<uint32_t>(__builtin_popcountll(c.bits[w]));
    }
    total += part_values[p].size();
  }
  c.values.clear();
  c.values.reserve(total);
  for (auto& v : part_values) {
    c.values.insert(c.values.end(), v.begin(), v.end());
    free_vector(v);
  }
}

}  // namespace

uint64_t RangeStore::unseal_count() { return g_unseals.load(); }

std::vector<TraceRange>& RangeStore::rows() {
  if (sealed_) unseal();
  return rows_;
}

std::vector<RangeExtra>& RangeStore::extras() {
  if (sealed_) unseal();
  return extras_;
}

RangeExtra RangeStore::extra(int32_t e) const {
  const size_t i = static_cast<size_t>(e);
  if (!sealed_) return extras_[i];
  const CompactExtra& c = cx_[i];
  RangeExtra x;
  x.bytes_sent = byte_pairs_[c.bytes].first;
  x.bytes_recv = byte_pairs_[c.bytes].second;
  x.pg = c.pg;
  x.seq = c.seq;
  if (const GpuIds* g = cx_gpu_.find(i)) {
    x.external_id = g->external_id;
    x.correlation = g->correlation;
  }
  return x;
}

size_t RangeStore::heap_bytes() const {
  return cap_bytes(rows_) + cap_bytes(extras_) + cap_bytes(blocks_) + cap_bytes(wide_starts_) + cap_bytes(start_off_) +
         cap_bytes(dur_) + cap_bytes(long_dur_) + cap_bytes(attr_) + cap_bytes(attrs_) + cap_bytes(parent_up_) +
         cap_bytes(far_parent_) + cap_bytes(step1_) + cap_bytes(big_step_) + origin_.heap_bytes() +
         extra_.heap_bytes() + cap_bytes(cx_) + cap_bytes(byte_pairs_) + cx_gpu_.heap_bytes();
}

void RangeStore::seal(int threads) {
  if (sealed_) return;
  if (rows_.size() >= size_t{0xFFFFFFFFu} || extras_.size() >= size_t{0x7FFFFFFF}) return;  // indices are 32-bit
  try {
    build_columns(threads);
  } catch (...) {  // out of memory while sealing: the rows as they were, no half-built columns
    RangeStore keep;
    keep.rows_ = std::move(rows_);
    keep.extras_ = std::move(extras_);
    *this = std::move(keep);
    throw;
  }
  // Only now that every column is built: the rows go.
  free_vector(rows_);
  free_vector(extras_);
  sealed_ = true;
}

// Each block's starts in [lo, hi) (whole blocks): as 32-bit offsets from the block's smallest,
// or, where they span more, in full into `wide` (the part's; made global by build_columns).
void RangeStore::encode_block_starts(size_t lo, size_t hi, std::vector<int64_t>& wide) {
  for (size_t b0 = lo; b0 < hi; b0 += kBlock) {
    const size_t b1 = std::min(hi, b0 + kBlock);
    int64_t mn = rows_[b0].start_ns, mx = mn;
    for (size_t i = b0 + 1; i < b1; ++i) {
      mn = std::min(mn, rows_[i].start_ns);
      mx = std::max(mx, rows_[i].start_ns);
    }
    Block& blk = blocks_[b0 / kBlock];
    blk.base = mn;
    if (static_cast<uint64_t>(mx) - static_cast<uint64_t>(mn) > uint64_t{0xFFFFFFFFu}) {
      blk.wide = static_cast<int64_t>(wide.size());  // made global by build_columns
      for (size_t i = b0; i < b1; ++i) wide.push_back(rows_[i].start_ns);
    } else {
      for (size_t i = b0; i < b1; ++i)
        start_off_[i] = static_cast<uint32_t>(static_cast<uint64_t>(rows_[i].start_ns) - static_cast<uint64_t>(mn));
    }
  }
}

// Extra records: their bytes as an index into the distinct (sent, received) pairs, GPU ids
// only where set.
void RangeStore::build_extra_columns() {
  KeyTable pairs;
  cx_.assign(extras_.size(), CompactExtra{});
  const size_t gpu_words = (extras_.size() + 63) / 64;
  cx_gpu_.bits.assign(gpu_words, 0);
  std::vector<std::vector<GpuIds>> gpu(1);
  for (size_t e = 0; e < extras_.size(); ++e) {
    const RangeExtra& x = extras_[e];
    const uint32_t bytes =
        pairs.id(KeyTable::Key{{static_cast<uint64_t>(x.bytes_sent), static_cast<uint64_t>(x.bytes_recv), 0}});
    cx_[e] = CompactExtra{bytes, x.pg, x.seq};
    if (x.external_id != 0 || x.correlation != 0) {
      cx_gpu_.bits[e >> 6] |= uint64_t{1} << (e & 63);
      gpu[0].push_back(GpuIds{x.external_id, x.correlation});
    }
  }
  finish_sparse(cx_gpu_, gpu, {{0, gpu_words}});
  byte_pairs_.resize(pairs.keys.size());
  for (size_t k = 0; k < byte_pairs_.size(); ++k)
    byte_pairs_[k] = {static_cast<int64_t>(pairs.keys[k].w[0]), static_cast<int64_t>(pairs.keys[k].w[1])};
}

void RangeStore::build_columns(int threads) {
  const size_t n = rows_.size();
  if (threads <= 0) threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  // Parts of whole blocks (and so whole bit words), one per thread.
  static_assert(kBlock % 64 == 0, "a block holds whole bit words");
  const size_t n_blocks = (n + kBlock - 1) / kBlock, n_words = (n + 63) / 64;
  const size_t parts = std::max<size_t>(1, std::min<size_t>(static_cast<size_t>(threads), n / (kBlock * 64)));
  const size_t blocks_per = (n_blocks + parts - 1) / std::max<size_t>(1, parts);
  std::vector<std::pair<size_t, size_t>> part_range(parts), part_words(parts);
  for (size_t p = 0; p < parts; ++p) {
    const size_t lo = std::min(n, p * blocks_per * kBlock), hi = std::min(n, (p + 1) * blocks_per * kBlock);
    part_range[p] = {lo, hi};
    part_words[p] = {lo / 64, (hi + 63) / 64};
  }

  blocks_.assign(n_blocks, Block{});
  start_off_.assign(n, 0);
  dur_.assign(n, 0);
  attr_.assign(n, 0);
  parent_up_.assign(n, 0);
  step1_.assign(n, 0);
  origin_.bits.assign(n_words, 0);
  extra_.bits.assign(n_words, 0);
  struct Part {
    KeyTable table;
    std::vector<int64_t> wide;
    std::vector<std::pair<uint32_t, int64_t>> long_dur;
    std::vector<std::pair<uint32_t, int32_t>> far_parent, big_step;
  };
  std::vector<Part> part(parts);
  std::vector<std::vector<int32_t>> origins(parts), extras(parts);
  parallel_for(parts, threads, [&](size_t p) {
    Part& q = part[p];
    const auto [lo, hi] = part_range[p];
    encode_block_starts(lo, hi, q.wide);
    for (size_t i = lo; i < hi; ++i) {
      const TraceRange& r = rows_[i];
      const uint32_t idx = static_cast<uint32_t>(i);
      const uint64_t d = static_cast<uint64_t>(r.end_ns) - static_cast<uint64_t>(r.start_ns);
      if (r.end_ns >= r.start_ns && d < kLongDur) {
        dur_[i] = static_cast<uint32_t>(d);
      } else {
        dur_[i] = kLongDur;
        q.long_dur.emplace_back(idx, static_cast<int64_t>(d));
      }
      attr_[i] = q.table.id(key_of(attr_of(r)));
      if (r.parent == -1) {
        parent_up_[i] = 0;
      } else if (r.parent >= 0 && static_cast<size_t>(r.parent) < i && i - static_cast<size_t>(r.parent) < kFarParent) {
        parent_up_[i] = static_cast<uint16_t>(i - static_cast<size_t>(r.parent));
      } else {
        parent_up_[i] = kFarParent;
        q.far_parent.emplace_back(idx, r.parent);
      }
      if (r.step >= -1 && r.step < int32_t{kBigStep} - 1) {
        step1_[i] = static_cast<uint16_t>(r.step + 1);
      } else {
        step1_[i] = kBigStep;
        q.big_step.emplace_back(idx, r.step);
      }
      if (r.origin != -1) {
        origin_.bits[i >> 6] |= uint64_t{1} << (i & 63);
        origins[p].push_back(r.origin);
      }
      if (r.extra != -1) {
        extra_.bits[i >> 6] |= uint64_t{1} << (i & 63);
        extras[p].push_back(r.extra);
      }
    }
  });

  // One attribute table: part 0's ids stand; the other parts' are mapped onto it.
  KeyTable global;
  std::vector<std::vector<uint32_t>> remap(parts);
  for (size_t p = 0; p < parts; ++p) {
    remap[p].resize(part[p].table.keys.size());
    for (size_t k = 0; k < part[p].table.keys.size(); ++k) remap[p][k] = global.id(part[p].table.keys[k]);
  }
  parallel_for(parts, threads, [&](size_t p) {
    bool identity = true;
    for (size_t k = 0; k < remap[p].size() && identity; ++k) identity = remap[p][k] == k;
    if (!identity)
      for (size_t i = part_range[p].first; i < part_range[p].second; ++i) attr_[i] = remap[p][attr_[i]];
  });
  attrs_.resize(global.keys.size());
  for (size_t k = 0; k < attrs_.size(); ++k) attrs_[k] = attr_of(global.keys[k]);

  wide_starts_.clear();
  long_dur_.clear(), far_parent_.clear(), big_step_.clear();
  for (size_t p = 0; p < parts; ++p) {
    const int64_t base = static_cast<int64_t>(wide_starts_.size());
    const size_t b_lo = part_range[p].first / kBlock, b_hi = (part_range[p].second + kBlock - 1) / kBlock;
    for (size_t b = b_lo; b < b_hi; ++b)
      if (blocks_[b].wide >= 0) blocks_[b].wide += base;
    wide_starts_.insert(wide_starts_.end(), part[p].wide.begin(), part[p].wide.end());
    long_dur_.insert(long_dur_.end(), part[p].long_dur.begin(), part[p].long_dur.end());
    far_parent_.insert(far_parent_.end(), part[p].far_parent.begin(), part[p].far_parent.end());
    big_step_.insert(big_step_.end(), part[p].big_step.begin(), part[p].big_step.end());
  }
  finish_sparse(origin_, origins, part_words);
  finish_sparse(extra_, extras, part_words);

  build_extra_columns();
  long_dur_.shrink_to_fit(), far_parent_.shrink_to_fit(), big_step_.shrink_to_fit(), wide_starts_.shrink_to_fit();
  n_ = n;
}

void RangeStore::unseal() {
  if (!sealed_) return;
  std::vector<TraceRange> rows(n_);
  for (size_t i = 0; i < n_; ++i) rows[i] = decode(i);
  std::vector<RangeExtra> extras(cx_.size());
  for (size_t e = 0; e < cx_.size(); ++e) extras[e] = extra(static_cast<int32_t>(e));
  *this = RangeStore();
  rows_ = std::move(rows);
  extras_ = std::move(extras);
  g_unseals.fetch_add(1);
}

}  // namespace ulysses::prof

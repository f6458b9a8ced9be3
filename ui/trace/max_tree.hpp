// Implicit max tree for "first position >= j whose key >= x" in O(F * levels) without
// scanning: level 1 holds the max key of each block of F positions, level 2 of each block of
// F level-1 blocks, and so on. The per-position keys are not stored; a callable key(i)
// computes them (the timeline's key = max(gap to the previous range, duration), so a fold of
// tiny ranges ends at the first key >= fold threshold: one query per drawn item).
#pragma once

#include <algorithm>
#include <cstdint>
#include <limits>
#include <vector>

namespace ulysses::ui {

class MaxTree {
 public:
  static constexpr int64_t F = 16;

  template <class Key>
  void build(int64_t n, const Key& key) {
    n_ = n;
    levels_.clear();
    if (n <= 0) return;
    std::vector<int64_t> cur(size_t((n + F - 1) / F), std::numeric_limits<int64_t>::min());
    for (int64_t i = 0; i < n; ++i) cur[size_t(i / F)] = std::max(cur[size_t(i / F)], key(i));
    levels_.push_back(std::move(cur));
    while (levels_.back().size() > 1) {
      const auto& prev = levels_.back();
      std::vector<int64_t> up((prev.size() + F - 1) / F, std::numeric_limits<int64_t>::min());
      for (size_t i = 0; i < prev.size(); ++i) up[i / F] = std::max(up[i / F], prev[i]);
      levels_.push_back(std::move(up));
    }
  }

  // First i in [j, n) with key(i) >= x, or n.
  template <class Key>
  int64_t find_first(int64_t j, int64_t x, const Key& key) const {
    if (j >= n_) return n_;
    // Positions up to the end of j's block.
    const int64_t block_end = std::min(n_, (j / F + 1) * F);
    for (int64_t i = j; i < block_end; ++i)
      if (key(i) >= x) return i;
    // Climb: at level L (0-based in levels_), entries cover F^(L+1) positions.
    int64_t pos = j / F + 1;  // next level-0 block
    size_t L = 0;
    for (;;) {
      const auto& lv = levels_[L];
      const int64_t end = std::min<int64_t>(int64_t(lv.size()), (pos / F + 1) * F);
      for (; pos < end; ++pos)
        if (lv[size_t(pos)] >= x) return descend(L, pos, x, key);
      if (pos >= int64_t(lv.size()) || L + 1 >= levels_.size()) return n_;
      pos = pos / F;  // aligned: continue one level up from the next block there
      ++L;
    }
  }

  size_t bytes() const {
    size_t b = 0;
    for (const auto& l : levels_) b += l.size() * sizeof(int64_t);
    return b;
  }

 private:
  template <class Key>
  int64_t descend(size_t L, int64_t pos, int64_t x, const Key& key) const {
    // levels_[L][pos] >= x: find the first child that holds it.
    while (L > 0) {
      const auto& child = levels_[L - 1];
      const int64_t b = pos * F, e = std::min<int64_t>(int64_t(child.size()), b + F);
      int64_t c = b;
      while (c < e && child[size_t(c)] < x) ++c;
      pos = c;
      --L;
    }
    const int64_t b = pos * F, e = std::min(n_, b + F);
    for (int64_t i = b; i < e; ++i)
      if (key(i) >= x) return i;
    return n_;  // not reached when the tree matches the keys
  }

  int64_t n_ = 0;
  std::vector<std::vector<int64_t>> levels_;
};

}  // namespace ulysses::ui

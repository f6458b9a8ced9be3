// The BPE model of a tokenizer.json ("model": {"type": "BPE", ...}): vocabulary, ranked merges,
// byte fallback, ignore_merges, unknown token. A pre-token (a piece of text the pre-tokenizers
// cut) becomes token ids by merging its symbols, lowest merge rank first and leftmost first
// among equal ranks (as Hugging Face tokenizers and transformers.js do), in O(n log n) with a
// priority queue, so a 100 KB piece (a SentencePiece-style tokenizer has no pre-tokenizer: a
// whole document is one piece) costs what its length says.
//
// Byte-level models (GPT-2 style: Llama 3, Qwen) are run on the bytes themselves: the
// vocabulary's characters are turned back into bytes once, at load, so encoding never builds
// the byte-to-character strings.
#pragma once

#include <nlohmann/json.hpp>

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace ulysses::data {

inline constexpr uint32_t kNoToken = 0xFFFFFFFFu;

// Merge table: (left id, right id) -> (rank, merged id), open addressing.
class MergeTable {
 public:
  void reserve(size_t n);
  void insert(uint32_t a, uint32_t b, uint32_t rank, uint32_t merged);
  // Rank and merged id of the pair, or false.
  bool find(uint32_t a, uint32_t b, uint32_t& rank, uint32_t& merged) const {
    if (slots_.empty()) return false;
    const uint64_t key = (uint64_t(a) << 32) | b;
    for (size_t i = slot_of(key);; i = (i + 1) & mask_) {
      const Slot& s = slots_[i];
      if (s.key == key) {
        rank = s.rank;
        merged = s.merged;
        return true;
      }
      if (s.key == kEmpty) return false;
    }
  }

 private:
  static constexpr uint64_t kEmpty = ~uint64_t(0);
  struct Slot {
    uint64_t key = kEmpty;
    uint32_t rank = 0, merged = 0;
  };
  size_t slot_of(uint64_t key) const { return static_cast<size_t>((key * 0x9E3779B97F4A7C15ull) >> 20) & mask_; }
  std::vector<Slot> slots_;
  size_t mask_ = 0;
  size_t size_ = 0;
};

// Per-thread working memory of BpeModel::encode_piece.
struct BpeScratch {
  struct Symbol {
    uint32_t id;
    uint32_t start, len;  // bytes of the piece it covers
    int32_t prev, next;
  };
  struct Candidate {
    uint32_t rank, start;
    int32_t left, right;
    uint32_t left_id, right_id;
    bool operator>(const Candidate& o) const { return rank != o.rank ? rank > o.rank : start > o.start; }
  };
  std::vector<Symbol> symbols;
  std::vector<Candidate> heap;
  // Pieces shorter than kCacheMaxBytes and their ids; cleared when it holds kCacheMaxEntries.
  std::unordered_map<std::string, std::vector<uint32_t>> cache;
  std::string key;  // the piece being looked up (reused: no allocation per lookup)
  static constexpr size_t kCacheMaxBytes = 256;
  static constexpr size_t kCacheMaxEntries = 1 << 17;  // tens of MB per thread at most
};

class BpeModel {
 public:
  // `model` is tokenizer.json's "model" object; `byte_level` says whether a ByteLevel
  // pre-tokenizer stands before it. Throws std::invalid_argument naming what is not supported
  // or inconsistent (a merge of tokens missing from the vocabulary).
  BpeModel(const nlohmann::json& model, bool byte_level);

  // Appends the ids of `piece` (bytes after the pre-tokenizers) to `out`.
  void encode_piece(std::string_view piece, std::vector<uint32_t>& out, BpeScratch& s) const;

  // Id of a token as the vocabulary spells it (byte-level characters for byte-level models).
  std::optional<uint32_t> id_of(const std::string& token) const;
  // id -> token as the vocabulary spells it ("" for an id it does not have).
  const std::vector<std::string>& tokens() const { return id_to_token_; }
  bool byte_level() const { return byte_level_; }

 private:
  void merge_symbols(std::string_view piece, BpeScratch& s) const;
  void emit_symbols(std::string_view piece, std::vector<uint32_t>& out, BpeScratch& s) const;

  bool byte_level_ = false;
  bool ignore_merges_ = false;
  bool byte_fallback_ = false;
  bool fuse_unk_ = false;
  uint32_t unk_id_ = kNoToken;
  std::unordered_map<std::string, uint32_t> vocab_;  // keys in bytes for byte-level models
  std::vector<std::string> id_to_token_;             // as spelt in the file
  std::array<uint32_t, 256> byte_ids_{};             // byte-level: the token of each single byte
  std::array<uint32_t, 256> fallback_ids_{};         // byte fallback: the token <0xXX>
  std::unordered_map<uint32_t, uint32_t> char_ids_;  // not byte-level: the token of each one-character entry
  MergeTable merges_;
};

}  // namespace ulysses::data

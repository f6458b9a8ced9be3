// The BPE model of a tokenizer.json (see bpe_model.hpp).
#include "bpe_model.hpp"

#include <algorithm>
#include <functional>
#include <stdexcept>

#include "text_utf8.hpp"

namespace ulysses::data {

void MergeTable::reserve(size_t n) {
  size_t cap = 16;
  while (cap < 2 * n) cap <<= 1;
  slots_.assign(cap, Slot{});
  mask_ = cap - 1;
  size_ = 0;
}

void MergeTable::insert(uint32_t a, uint32_t b, uint32_t rank, uint32_t merged) {
  if (2 * (size_ + 1) > slots_.size()) {
    std::vector<Slot> old;
    old.swap(slots_);
    reserve(std::max<size_t>(size_ + 1, old.size()));
    for (const Slot& s : old)
      if (s.key != kEmpty) insert(static_cast<uint32_t>(s.key >> 32), static_cast<uint32_t>(s.key), s.rank, s.merged);
  }
  const uint64_t key = (uint64_t(a) << 32) | b;
  for (size_t i = slot_of(key);; i = (i + 1) & mask_) {
    Slot& s = slots_[i];
    if (s.key == key) return;  // a repeated merge keeps its first (lowest) rank
    if (s.key == kEmpty) {
      s = Slot{key, rank, merged};
      ++size_;
      return;
    }
  }
}

namespace {

// A byte-level vocabulary entry as the bytes it stands for, or nullopt when one of its
// characters stands for no byte (such an entry can never be produced from text).
std::optional<std::string> bpe_bytes_of(const std::string& token) {
  std::string out;
  size_t i = 0;
  while (i < token.size()) {
    const int b = char_byte(next_code_point(token, i));
    if (b < 0) return std::nullopt;
    out += static_cast<char>(b);
  }
  return out;
}

// The two halves of a merges entry: "a b" (older files) or ["a", "b"] (tokenizers >= 0.20).
std::pair<std::string, std::string> bpe_merge_halves(const nlohmann::json& m, size_t rank) {
  if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string())
    return {m[0].get<std::string>(), m[1].get<std::string>()};
  if (m.is_string()) {
    const std::string s = m.get<std::string>();
    const size_t sp = s.find(' ');
    if (sp != std::string::npos && sp > 0 && sp + 1 < s.size()) return {s.substr(0, sp), s.substr(sp + 1)};
  }
  throw std::invalid_argument("model.merges[" + std::to_string(rank) + "] is neither \"a b\" nor [\"a\", \"b\"]");
}

}  // namespace

BpeModel::BpeModel(const nlohmann::json& model, bool byte_level) : byte_level_(byte_level) {
  auto flag = [&](const char* key) { return model.contains(key) && model[key].is_boolean() && model[key].get<bool>(); };
  ignore_merges_ = flag("ignore_merges");
  byte_fallback_ = flag("byte_fallback");
  fuse_unk_ = flag("fuse_unk");
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    if (model.contains(key) && model[key].is_string() && !model[key].get<std::string>().empty())
      throw std::invalid_argument(std::string("model.") + key + " \"" + model[key].get<std::string>() +
                                  "\" is not supported (only BPE models without word prefixes/suffixes are)");
  }
  if (model.contains("dropout") && model["dropout"].is_number() && model["dropout"].get<double>() > 0)
    throw std::invalid_argument("model.dropout is set: BPE dropout is for training a tokenizer, not supported here");
  if (!model.contains("vocab") || !model["vocab"].is_object())
    throw std::invalid_argument("model.vocab is missing or not an object");
  // Vocabulary: id -> spelling, spelling (bytes for byte-level models) -> id.
  vocab_.reserve(model["vocab"].size() * 2);
  std::unordered_map<std::string, uint32_t> spelled;  // as in the file, for the merges below
  spelled.reserve(model["vocab"].size() * 2);
  for (const auto& [tok, idv] : model["vocab"].items()) {
    if (!idv.is_number_unsigned()) throw std::invalid_argument("model.vocab[\"" + tok + "\"] is not a token id");
    const auto id = idv.get<uint32_t>();
    if (id >= id_to_token_.size()) id_to_token_.resize(id + 1);
    id_to_token_[id] = tok;
    spelled.emplace(tok, id);
    if (byte_level_) {
      if (auto bytes = bpe_bytes_of(tok)) vocab_.emplace(std::move(*bytes), id);
    } else {
      vocab_.emplace(tok, id);
    }
  }
  if (!byte_level_) {
    for (const auto& [tok, id] : vocab_) {
      size_t i = 0;
      const uint32_t cp = tok.empty() ? 0 : next_code_point(tok, i);
      if (!tok.empty() && i == tok.size()) char_ids_.emplace(cp, id);
    }
  }
  byte_ids_.fill(kNoToken);
  fallback_ids_.fill(kNoToken);
  for (int b = 0; b < 256; ++b) {
    if (byte_level_) {
      if (auto it = vocab_.find(std::string(1, static_cast<char>(b))); it != vocab_.end()) byte_ids_[b] = it->second;
    }
    char name[8];
    std::snprintf(name, sizeof name, "<0x%02X>", b);
    if (auto it = vocab_.find(name); it != vocab_.end()) fallback_ids_[b] = it->second;
  }
  if (model.contains("unk_token") && model["unk_token"].is_string()) {
    if (auto id = id_of(model["unk_token"].get<std::string>())) unk_id_ = *id;
  }
  // Merges, ranked by their position in the file.
  const nlohmann::json empty = nlohmann::json::array();
  const nlohmann::json& merges = model.contains("merges") ? model["merges"] : empty;
  merges_.reserve(merges.size());
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    auto [a, b] = bpe_merge_halves(merges[rank], rank);
    const auto ia = spelled.find(a), ib = spelled.find(b), im = spelled.find(a + b);
    if (ia == spelled.end() || ib == spelled.end() || im == spelled.end())
      throw std::invalid_argument("model.merges[" + std::to_string(rank) + "] (\"" + a + " " + b +
                                  "\") names a token missing from model.vocab");
    merges_.insert(ia->second, ib->second, static_cast<uint32_t>(rank), im->second);
  }
}

std::optional<uint32_t> BpeModel::id_of(const std::string& token) const {
  if (byte_level_) {
    auto bytes = bpe_bytes_of(token);
    if (!bytes) return std::nullopt;
    auto it = vocab_.find(*bytes);
    if (it == vocab_.end()) return std::nullopt;
    return it->second;
  }
  auto it = vocab_.find(token);
  if (it == vocab_.end()) return std::nullopt;
  return it->second;
}

void BpeModel::merge_symbols(std::string_view piece, BpeScratch& s) const {
  // Initial symbols: one per byte (byte-level) or per character; kNoToken for one the
  // vocabulary lacks (it takes part in no merge).
  auto& sym = s.symbols;
  sym.clear();
  for (size_t i = 0; i < piece.size();) {
    const size_t n = byte_level_ ? 1 : std::min(utf8_length(static_cast<unsigned char>(piece[i])), piece.size() - i);
    uint32_t id = kNoToken;
    if (byte_level_) {
      id = byte_ids_[static_cast<unsigned char>(piece[i])];
    } else {
      size_t at = i;
      if (auto it = char_ids_.find(next_code_point(piece, at)); it != char_ids_.end() && at == i + n) id = it->second;
    }
    const auto k = static_cast<int32_t>(sym.size());
    sym.push_back({id, static_cast<uint32_t>(i), static_cast<uint32_t>(n), k - 1, k + 1});
    i += n;
  }
  if (sym.empty()) return;
  sym.back().next = -1;
  // Candidate merges of neighbours, lowest rank first, then leftmost.
  auto& heap = s.heap;
  heap.clear();
  auto push = [&](int32_t left) {
    const int32_t right = sym[left].next;
    if (right < 0 || sym[left].id == kNoToken || sym[right].id == kNoToken) return;
    uint32_t rank = 0, merged = 0;
    if (!merges_.find(sym[left].id, sym[right].id, rank, merged)) return;
    heap.push_back({rank, sym[left].start, left, right, sym[left].id, sym[right].id});
    std::push_heap(heap.begin(), heap.end(), std::greater<>());
  };
  for (int32_t k = 0; k + 1 < static_cast<int32_t>(sym.size()); ++k) push(k);
  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), std::greater<>());
    const BpeScratch::Candidate c = heap.back();
    heap.pop_back();
    // Stale when either side has been merged since (the left one then has another id or
    // another right neighbour; the right one another id).
    auto& l = sym[c.left];
    if (l.len == 0 || l.id != c.left_id || l.next != c.right || sym[c.right].id != c.right_id) continue;
    uint32_t rank = 0, merged = 0;
    merges_.find(c.left_id, c.right_id, rank, merged);
    auto& r = sym[c.right];
    l.id = merged;
    l.len += r.len;
    l.next = r.next;
    if (r.next >= 0) sym[r.next].prev = c.left;
    r.len = 0;
    r.id = kNoToken;
    if (l.prev >= 0) push(l.prev);
    push(c.left);
  }
}

void BpeModel::emit_symbols(std::string_view piece, std::vector<uint32_t>& out, BpeScratch& s) const {
  bool last_unk = false;
  for (int32_t k = s.symbols.empty() ? -1 : 0; k >= 0; k = s.symbols[k].next) {
    const auto& sy = s.symbols[k];
    if (sy.id != kNoToken) {
      out.push_back(sy.id);
      last_unk = false;
      continue;
    }
    // A character the vocabulary lacks: its UTF-8 bytes as <0xXX> tokens when every one is
    // there (byte fallback), else the unknown token (several in a row fused into one when
    // fuse_unk), else nothing (a model with neither cannot spell it).
    bool all = byte_fallback_;
    for (uint32_t i = 0; all && i < sy.len; ++i)
      all = fallback_ids_[static_cast<unsigned char>(piece[sy.start + i])] != kNoToken;
    if (all) {
      for (uint32_t i = 0; i < sy.len; ++i)
        out.push_back(fallback_ids_[static_cast<unsigned char>(piece[sy.start + i])]);
      last_unk = false;
    } else if (unk_id_ != kNoToken) {
      if (!(fuse_unk_ && last_unk)) out.push_back(unk_id_);
      last_unk = true;
    }
  }
}

void BpeModel::encode_piece(std::string_view piece, std::vector<uint32_t>& out, BpeScratch& s) const {
  if (piece.empty()) return;
  // The cache first: it also holds the pieces ignore_merges finds whole in the vocabulary.
  const bool cacheable = piece.size() < BpeScratch::kCacheMaxBytes;
  if (cacheable) {
    s.key.assign(piece);
    if (auto it = s.cache.find(s.key); it != s.cache.end()) {
      out.insert(out.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  const size_t first = out.size();
  if (ignore_merges_) {
    s.key.assign(piece);
    if (auto it = vocab_.find(s.key); it != vocab_.end()) {
      out.push_back(it->second);
      if (cacheable) s.cache.emplace(s.key, std::vector<uint32_t>{it->second});
      return;
    }
  }
  merge_symbols(piece, s);
  emit_symbols(piece, out, s);
  if (cacheable) {
    if (s.cache.size() >= BpeScratch::kCacheMaxEntries) s.cache.clear();
    s.cache.emplace(std::string(piece),
                    std::vector<uint32_t>(out.begin() + static_cast<std::ptrdiff_t>(first), out.end()));
  }
}

}  // namespace ulysses::data

// Normalizers, pre-tokenizers and decoders of tokenizer.json (see text_steps.hpp), following
// Hugging Face tokenizers' semantics (transformers.js agrees on every step used here).
#include "text_steps.hpp"

#include <utf8proc.h>

#include <cstdlib>
#include <stdexcept>

#include "text_utf8.hpp"

namespace ulysses::data {

std::string step_type(const nlohmann::json& j) {
  return j.is_object() && j.contains("type") && j["type"].is_string() ? j["type"].get<std::string>() : "(no type)";
}

namespace {

std::string steps_string(const nlohmann::json& j, const char* key, const std::string& fallback = "") {
  return j.contains(key) && j[key].is_string() ? j[key].get<std::string>() : fallback;
}
bool steps_bool(const nlohmann::json& j, const char* key, bool fallback) {
  return j.contains(key) && j[key].is_boolean() ? j[key].get<bool>() : fallback;
}

// A pattern object {"String": s} or {"Regex": r}: its matches in a text.
class StepPattern {
 public:
  explicit StepPattern(const nlohmann::json& p) {
    if (p.contains("Regex") && p["Regex"].is_string()) {
      regex_ = std::make_unique<Regex>(p["Regex"].get<std::string>());
    } else if (p.contains("String") && p["String"].is_string()) {
      literal_ = p["String"].get<std::string>();
      if (literal_.empty()) throw std::invalid_argument("an empty String pattern");
    } else {
      throw std::invalid_argument("a pattern that is neither {\"String\": ...} nor {\"Regex\": ...}");
    }
  }
  void find_all(std::string_view text, TextScratch& s) const {
    if (regex_) return regex_->find_all(text, s.regex, s.matches);
    s.matches.clear();
    for (size_t at = text.find(literal_); at != std::string_view::npos; at = text.find(literal_, at + literal_.size()))
      s.matches.emplace_back(at, at + literal_.size());
  }
  // text with every match replaced by `content`.
  std::string replace(std::string_view text, const std::string& content, TextScratch& s) const {
    find_all(text, s);
    if (s.matches.empty()) return std::string(text);
    std::string out;
    size_t prev = 0;
    for (auto [b, e] : s.matches) {
      out.append(text.substr(prev, b - prev));
      out += content;
      prev = e;
    }
    out.append(text.substr(prev));
    return out;
  }

 private:
  std::unique_ptr<Regex> regex_;
  std::string literal_;
};

// ---- normalizers

class UnicodeForm : public Normalizer {
 public:
  explicit UnicodeForm(const std::string& form) {
    options_ = UTF8PROC_STABLE;
    if (form == "NFC") options_ |= UTF8PROC_COMPOSE;
    if (form == "NFD") options_ |= UTF8PROC_DECOMPOSE;
    if (form == "NFKC") options_ |= UTF8PROC_COMPOSE | UTF8PROC_COMPAT;
    if (form == "NFKD") options_ |= UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT;
  }
  void apply(std::string& text, TextScratch&) const override {
    bool ascii = true;
    for (char c : text) ascii = ascii && static_cast<unsigned char>(c) < 0x80;
    if (ascii) return;  // every form leaves ASCII as it is
    utf8proc_uint8_t* out = nullptr;
    const utf8proc_ssize_t n =
        utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(text.data()), static_cast<utf8proc_ssize_t>(text.size()),
                     &out, static_cast<utf8proc_option_t>(options_));
    if (n < 0) throw std::runtime_error(std::string("Unicode normalization failed: ") + utf8proc_errmsg(n));
    text.assign(reinterpret_cast<const char*>(out), static_cast<size_t>(n));
    std::free(out);
  }

 private:
  int options_ = 0;
};

class Prepend : public Normalizer {
 public:
  explicit Prepend(const nlohmann::json& j) : prepend_(steps_string(j, "prepend")) {}
  void apply(std::string& text, TextScratch&) const override {
    if (!text.empty()) text.insert(0, prepend_);
  }

 private:
  std::string prepend_;
};

class ReplaceNormalizer : public Normalizer {
 public:
  explicit ReplaceNormalizer(const nlohmann::json& j)
      : pattern_(j.contains("pattern") ? j["pattern"] : nlohmann::json()), content_(steps_string(j, "content")) {}
  void apply(std::string& text, TextScratch& s) const override { text = pattern_.replace(text, content_, s); }

 private:
  StepPattern pattern_;
  std::string content_;
};

class Lowercase : public Normalizer {
 public:
  void apply(std::string& text, TextScratch&) const override {
    std::string out;
    out.reserve(text.size());
    for (size_t i = 0; i < text.size();)
      append_utf8(out,
                  static_cast<uint32_t>(utf8proc_tolower(static_cast<utf8proc_int32_t>(next_code_point(text, i)))));
    text.swap(out);
  }
};

class Strip : public Normalizer {
 public:
  explicit Strip(const nlohmann::json& j)
      : left_(steps_bool(j, "strip_left", true)), right_(steps_bool(j, "strip_right", true)) {}
  void apply(std::string& text, TextScratch&) const override {
    std::string_view v = text;
    if (left_) v = trim_left(v);
    if (right_) v = trim_right(v);
    text = std::string(v);
  }

 private:
  bool left_, right_;
};

class NormalizerSequence : public Normalizer {
 public:
  explicit NormalizerSequence(const nlohmann::json& j) {
    if (!j.contains("normalizers") || !j["normalizers"].is_array())
      throw std::invalid_argument("normalizer Sequence without a \"normalizers\" list");
    for (const auto& n : j["normalizers"])
      if (auto p = make_normalizer(n)) steps_.push_back(std::move(p));
  }
  void apply(std::string& text, TextScratch& s) const override {
    for (const auto& n : steps_) n->apply(text, s);
  }

 private:
  std::vector<std::unique_ptr<Normalizer>> steps_;
};

// ---- pre-tokenizers

enum class SplitBehavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };

SplitBehavior split_behavior(const std::string& b) {
  if (b == "Removed") return SplitBehavior::kRemoved;
  if (b == "Isolated") return SplitBehavior::kIsolated;
  if (b == "MergedWithPrevious") return SplitBehavior::kMergedWithPrevious;
  if (b == "MergedWithNext") return SplitBehavior::kMergedWithNext;
  if (b == "Contiguous") return SplitBehavior::kContiguous;
  throw std::invalid_argument("Split behavior \"" + b +
                              "\" is not one of Removed, Isolated, MergedWithPrevious, "
                              "MergedWithNext, Contiguous");
}

// Splits `piece` at the matches in s.matches (delimiters; the gaps when `invert`) the way
// Hugging Face's NormalizedString::split does, appending the parts to `out`.
void split_piece(std::string_view piece, SplitBehavior behavior, bool invert, TextScratch& s,
                 std::vector<std::string>& out) {
  struct Part {
    size_t b, e;
    bool delim;
  };
  std::vector<Part> parts;
  size_t prev = 0;
  for (auto [b, e] : s.matches) {
    if (b > prev) parts.push_back({prev, b, invert});
    if (e > b) parts.push_back({b, e, !invert});
    prev = e;
  }
  if (prev < piece.size()) parts.push_back({prev, piece.size(), invert});
  std::string pending;  // MergedWithNext: delimiters waiting for the next part
  bool last_delim = false;
  for (const Part& p : parts) {
    const std::string_view t = piece.substr(p.b, p.e - p.b);
    switch (behavior) {
      case SplitBehavior::kIsolated:
        out.emplace_back(t);
        break;
      case SplitBehavior::kRemoved:
        if (!p.delim) out.emplace_back(t);
        break;
      case SplitBehavior::kMergedWithPrevious:
        if (p.delim && !out.empty() && !parts.empty() && &p != &parts.front())
          out.back() += t;
        else
          out.emplace_back(t);
        break;
      case SplitBehavior::kMergedWithNext:
        if (p.delim) {
          pending += t;
        } else {
          out.push_back(pending + std::string(t));
          pending.clear();
        }
        break;
      case SplitBehavior::kContiguous:
        if (p.delim && last_delim && !out.empty())
          out.back() += t;
        else
          out.emplace_back(t);
        break;
    }
    last_delim = p.delim;
  }
  if (!pending.empty()) out.push_back(pending);
}

class SplitPre : public PreTokenizer {
 public:
  explicit SplitPre(const nlohmann::json& j)
      : pattern_(j.contains("pattern") ? j["pattern"] : nlohmann::json()),
        behavior_(split_behavior(steps_string(j, "behavior", "Isolated"))),
        invert_(steps_bool(j, "invert", false)) {}
  void apply(std::vector<std::string>& pieces, bool, TextScratch& s) const override {
    s.next_pieces.clear();
    for (const std::string& p : pieces) {
      pattern_.find_all(p, s);
      split_piece(p, behavior_, invert_, s, s.next_pieces);
    }
    pieces.swap(s.next_pieces);
  }

 private:
  StepPattern pattern_;
  SplitBehavior behavior_;
  bool invert_;
};

// GPT-2's own split, used when a ByteLevel pre-tokenizer has use_regex (the default).
const char* const kGpt2Split = "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

class ByteLevelPre : public PreTokenizer {
 public:
  explicit ByteLevelPre(const nlohmann::json& j) : prefix_space_(steps_bool(j, "add_prefix_space", false)) {
    if (steps_bool(j, "use_regex", true)) split_ = std::make_unique<Regex>(kGpt2Split);
  }
  bool byte_level() const override { return true; }
  // The byte-to-character mapping itself is left to the model, which works on bytes.
  void apply(std::vector<std::string>& pieces, bool, TextScratch& s) const override {
    if (prefix_space_)
      for (auto& p : pieces)
        if (p.empty() || p[0] != ' ') p.insert(0, " ");
    if (!split_) return;
    s.next_pieces.clear();
    for (const std::string& p : pieces) {
      split_->find_all(p, s.regex, s.matches);
      split_piece(p, SplitBehavior::kIsolated, false, s, s.next_pieces);
    }
    pieces.swap(s.next_pieces);
  }

 private:
  bool prefix_space_;
  std::unique_ptr<Regex> split_;
};

class MetaspacePre : public PreTokenizer {
 public:
  explicit MetaspacePre(const nlohmann::json& j) : replacement_(steps_string(j, "replacement", "\xE2\x96\x81")) {
    scheme_ = steps_string(j, "prepend_scheme", steps_bool(j, "add_prefix_space", true) ? "always" : "never");
    split_ = steps_bool(j, "split", true);
    if (scheme_ != "always" && scheme_ != "first" && scheme_ != "never")
      throw std::invalid_argument("Metaspace prepend_scheme \"" + scheme_ + "\" is not always, first or never");
  }
  void apply(std::vector<std::string>& pieces, bool first_section, TextScratch& s) const override {
    s.next_pieces.clear();
    for (size_t i = 0; i < pieces.size(); ++i) {
      std::string p;
      for (char c : pieces[i]) {
        if (c == ' ')
          p += replacement_;
        else
          p += c;
      }
      const bool prepend = scheme_ == "always" || (scheme_ == "first" && first_section && i == 0);
      if (prepend && p.compare(0, replacement_.size(), replacement_) != 0) p.insert(0, replacement_);
      if (!split_) {
        s.next_pieces.push_back(std::move(p));
        continue;
      }
      s.matches.clear();
      for (size_t at = p.find(replacement_); at != std::string::npos;
           at = p.find(replacement_, at + replacement_.size()))
        s.matches.emplace_back(at, at + replacement_.size());
      split_piece(p, SplitBehavior::kMergedWithNext, false, s, s.next_pieces);
    }
    pieces.swap(s.next_pieces);
  }

 private:
  std::string replacement_;
  std::string scheme_;
  bool split_ = true;
};

class PreTokenizerSequence : public PreTokenizer {
 public:
  explicit PreTokenizerSequence(const nlohmann::json& j) {
    if (!j.contains("pretokenizers") || !j["pretokenizers"].is_array())
      throw std::invalid_argument("pre_tokenizer Sequence without a \"pretokenizers\" list");
    for (const auto& p : j["pretokenizers"])
      if (auto step = make_pre_tokenizer(p)) steps_.push_back(std::move(step));
  }
  bool byte_level() const override {
    for (const auto& p : steps_)
      if (p->byte_level()) return true;
    return false;
  }
  void apply(std::vector<std::string>& pieces, bool first_section, TextScratch& s) const override {
    for (const auto& p : steps_) p->apply(pieces, first_section, s);
  }

 private:
  std::vector<std::unique_ptr<PreTokenizer>> steps_;
};

// ---- decoders

class ByteLevelDecoder : public Decoder {
 public:
  void apply(std::vector<std::string>& tokens) const override {
    std::string bytes;
    for (const std::string& t : tokens) {
      std::string mine;
      bool all = true;
      for (size_t i = 0; i < t.size() && all;) {
        const int b = char_byte(next_code_point(t, i));
        if (b < 0)
          all = false;
        else
          mine += static_cast<char>(b);
      }
      bytes += all ? mine : t;  // a token with a character that is no byte (an added token) as it is
    }
    tokens.assign(1, std::move(bytes));
  }
};

class ReplaceDecoder : public Decoder {
 public:
  explicit ReplaceDecoder(const nlohmann::json& j)
      : pattern_(j.contains("pattern") ? j["pattern"] : nlohmann::json()), content_(steps_string(j, "content")) {}
  void apply(std::vector<std::string>& tokens) const override {
    TextScratch s;
    for (auto& t : tokens) t = pattern_.replace(t, content_, s);
  }

 private:
  StepPattern pattern_;
  std::string content_;
};

class ByteFallbackDecoder : public Decoder {
 public:
  void apply(std::vector<std::string>& tokens) const override {
    std::vector<std::string> out;
    std::string bytes;
    size_t count = 0;
    auto flush = [&] {
      if (count == 0) return;
      if (is_valid_utf8(bytes)) {
        out.push_back(bytes);
      } else {
        for (size_t i = 0; i < count; ++i) out.emplace_back("\xEF\xBF\xBD");
      }
      bytes.clear();
      count = 0;
    };
    for (auto& t : tokens) {
      unsigned value = 0;
      if (t.size() == 6 && t.compare(0, 3, "<0x") == 0 && t[5] == '>' &&
          std::sscanf(t.c_str() + 3, "%2x", &value) == 1) {
        bytes += static_cast<char>(value);
        ++count;
        continue;
      }
      flush();
      out.push_back(std::move(t));
    }
    flush();
    tokens.swap(out);
  }
};

class FuseDecoder : public Decoder {
 public:
  void apply(std::vector<std::string>& tokens) const override {
    std::string all;
    for (const auto& t : tokens) all += t;
    tokens.assign(1, std::move(all));
  }
};

class StripDecoder : public Decoder {
 public:
  explicit StripDecoder(const nlohmann::json& j)
      : content_(steps_string(j, "content", " ")), start_(j.value("start", 0)), stop_(j.value("stop", 0)) {}
  void apply(std::vector<std::string>& tokens) const override {
    for (auto& t : tokens) {
      size_t b = 0, e = t.size();
      for (int k = 0; k < start_ && t.compare(b, content_.size(), content_) == 0 && b < e; ++k) b += content_.size();
      for (int k = 0;
           k < stop_ && e >= b + content_.size() && t.compare(e - content_.size(), content_.size(), content_) == 0; ++k)
        e -= content_.size();
      t = t.substr(b, e - b);
    }
  }

 private:
  std::string content_;
  int start_, stop_;
};

class MetaspaceDecoder : public Decoder {
 public:
  explicit MetaspaceDecoder(const nlohmann::json& j) : replacement_(steps_string(j, "replacement", "\xE2\x96\x81")) {
    strip_first_ =
        steps_string(j, "prepend_scheme", steps_bool(j, "add_prefix_space", true) ? "always" : "never") != "never";
  }
  void apply(std::vector<std::string>& tokens) const override {
    for (size_t i = 0; i < tokens.size(); ++i) {
      std::string out;
      const std::string& t = tokens[i];
      for (size_t k = 0; k < t.size();) {
        if (t.compare(k, replacement_.size(), replacement_) == 0) {
          out += ' ';
          k += replacement_.size();
        } else {
          out += t[k++];
        }
      }
      if (i == 0 && strip_first_ && !out.empty() && out[0] == ' ') out.erase(0, 1);
      tokens[i] = std::move(out);
    }
  }

 private:
  std::string replacement_;
  bool strip_first_ = true;
};

class DecoderSequence : public Decoder {
 public:
  explicit DecoderSequence(const nlohmann::json& j) {
    if (!j.contains("decoders") || !j["decoders"].is_array())
      throw std::invalid_argument("decoder Sequence without a \"decoders\" list");
    for (const auto& d : j["decoders"])
      if (auto step = make_decoder(d)) steps_.push_back(std::move(step));
  }
  void apply(std::vector<std::string>& tokens) const override {
    for (const auto& d : steps_) d->apply(tokens);
  }

 private:
  std::vector<std::unique_ptr<Decoder>> steps_;
};

}  // namespace

std::unique_ptr<Normalizer> make_normalizer(const nlohmann::json& j) {
  if (j.is_null()) return nullptr;
  const std::string t = step_type(j);
  if (t == "NFC" || t == "NFD" || t == "NFKC" || t == "NFKD") return std::make_unique<UnicodeForm>(t);
  if (t == "Prepend") return std::make_unique<Prepend>(j);
  if (t == "Replace") return std::make_unique<ReplaceNormalizer>(j);
  if (t == "Lowercase") return std::make_unique<Lowercase>();
  if (t == "Strip") return std::make_unique<Strip>(j);
  if (t == "Sequence") return std::make_unique<NormalizerSequence>(j);
  throw std::invalid_argument("normalizer type \"" + t +
                              "\" is not supported (supported: NFC, NFD, NFKC, NFKD, Prepend, Replace, Lowercase, "
                              "Strip, Sequence)");
}

std::unique_ptr<PreTokenizer> make_pre_tokenizer(const nlohmann::json& j) {
  if (j.is_null()) return nullptr;
  const std::string t = step_type(j);
  if (t == "Split") return std::make_unique<SplitPre>(j);
  if (t == "ByteLevel") return std::make_unique<ByteLevelPre>(j);
  if (t == "Metaspace") return std::make_unique<MetaspacePre>(j);
  if (t == "Sequence") return std::make_unique<PreTokenizerSequence>(j);
  throw std::invalid_argument("pre_tokenizer type \"" + t +
                              "\" is not supported (supported: Split, ByteLevel, Metaspace, Sequence)");
}

std::unique_ptr<Decoder> make_decoder(const nlohmann::json& j) {
  if (j.is_null()) return nullptr;
  const std::string t = step_type(j);
  if (t == "ByteLevel") return std::make_unique<ByteLevelDecoder>();
  if (t == "Replace") return std::make_unique<ReplaceDecoder>(j);
  if (t == "ByteFallback") return std::make_unique<ByteFallbackDecoder>();
  if (t == "Fuse") return std::make_unique<FuseDecoder>();
  if (t == "Strip") return std::make_unique<StripDecoder>(j);
  if (t == "Metaspace") return std::make_unique<MetaspaceDecoder>(j);
  if (t == "Sequence") return std::make_unique<DecoderSequence>(j);
  throw std::invalid_argument("decoder type \"" + t +
                              "\" is not supported (supported: ByteLevel, Replace, ByteFallback, Fuse, Strip, "
                              "Metaspace, Sequence)");
}

}  // namespace ulysses::data

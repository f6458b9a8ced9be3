// The text steps of a tokenizer.json around its model: normalizers (NFC and the other Unicode
// forms, Prepend, Replace, Lowercase, Strip, Sequence), pre-tokenizers (Split with a regex or a
// string, ByteLevel, Metaspace, Sequence) and decoders (ByteLevel, Replace, ByteFallback, Fuse,
// Strip, Metaspace, Sequence). Each is parsed once from its JSON object; a type not listed is
// refused by name (std::invalid_argument).
#pragma once

#include <nlohmann/json.hpp>

#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "unicode_regex.hpp"

namespace ulysses::data {

// Per-thread working memory of the text steps.
struct TextScratch {
  RegexScratch regex;
  std::vector<std::pair<size_t, size_t>> matches;
  std::vector<std::string> pieces, next_pieces;
};

class Normalizer {
 public:
  virtual ~Normalizer() = default;
  virtual void apply(std::string& text, TextScratch& s) const = 0;
};
// nullptr for a null normalizer.
std::unique_ptr<Normalizer> make_normalizer(const nlohmann::json& j);

class PreTokenizer {
 public:
  virtual ~PreTokenizer() = default;
  // Replaces `pieces` by their split; `first_section` is whether they come from the text's
  // first section (before any added token), which Metaspace's prepend_scheme "first" reads.
  virtual void apply(std::vector<std::string>& pieces, bool first_section, TextScratch& s) const = 0;
  // Whether a ByteLevel step is part of it (the model then works on bytes).
  virtual bool byte_level() const { return false; }
};
std::unique_ptr<PreTokenizer> make_pre_tokenizer(const nlohmann::json& j);

class Decoder {
 public:
  virtual ~Decoder() = default;
  // Hugging Face's decode_chain: token strings in, token strings out.
  virtual void apply(std::vector<std::string>& tokens) const = 0;
};
std::unique_ptr<Decoder> make_decoder(const nlohmann::json& j);

// The JSON "type" of a step, for messages.
std::string step_type(const nlohmann::json& j);

}  // namespace ulysses::data

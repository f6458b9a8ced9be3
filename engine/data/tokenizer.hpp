// A Hugging Face fast tokenizer (a model folder's tokenizer.json, with tokenizer_config.json
// beside it) in C++: encode and decode for BPE models, byte-level (Llama 3, Qwen2/3) and
// SentencePiece-style with byte fallback (Llama 2, Mistral); added and special tokens are
// matched in the text first (longest match, leftmost), then each stretch between them is
// normalized, pre-tokenized and run through the model. Other model types (WordPiece, Unigram,
// WordLevel) and steps not listed in text_steps.hpp are refused by name. Torch- and Qt-free.
//
// Text is UTF-8; an ill-formed sequence is replaced by U+FFFD before anything else (as a
// browser, node and Python's errors="replace" read such bytes), so the ids are those of the
// text such a reader would see.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace ulysses::data {

// A tokenizer file that cannot be used (missing, not JSON, an unsupported type): bad input.
struct TokenizerError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// What tokenizer_config.json (and the post-processor) say about the special tokens.
struct SpecialTokens {
  std::string bos_token, eos_token;  // "" when the configuration names none
  std::optional<uint32_t> bos_id, eos_id;
  // Whether a sequence starts with BOS: tokenizer_config.json's add_bos_token when it has one,
  // else whether tokenizer.json's TemplateProcessing post-processor starts with a special token.
  bool add_bos = false;
};

class Tokenizer {
 public:
  // `path` is a model folder (holding tokenizer.json) or a tokenizer.json; tokenizer_config.json
  // is read from the same folder when it is there. Throws TokenizerError naming the file.
  static std::shared_ptr<const Tokenizer> load(const std::string& path);
  // From the two files' text (config_json may be empty); `name` is used in messages.
  static std::shared_ptr<const Tokenizer> from_json(const std::string& tokenizer_json, const std::string& config_json,
                                                    const std::string& name);
  ~Tokenizer();

  // Per-thread working memory (regex match state, the BPE cache of pre-tokens).
  class Scratch;
  struct ScratchDeleter {
    void operator()(Scratch* s) const;
  };
  using ScratchPtr = std::unique_ptr<Scratch, ScratchDeleter>;
  ScratchPtr make_scratch() const;

  // Appends the ids of `text` to `out`, without BOS/EOS (add_special_tokens=False).
  void encode(std::string_view text, std::vector<uint32_t>& out, Scratch& scratch) const;
  std::vector<uint32_t> encode(std::string_view text) const;
  // The text of `ids` (special tokens written as their text; no clean-up of spaces): for a
  // byte-level tokenizer decode(encode(x)) == x for any valid UTF-8 x; Throws TokenizerError
  // for an id past the vocabulary.
  std::string decode(const std::vector<uint32_t>& ids) const;

  // One past the largest id (model vocabulary and added tokens).
  uint32_t vocab_size() const;
  const std::string& model_type() const;
  const SpecialTokens& special() const;
  std::optional<uint32_t> token_id(const std::string& token) const;
  // The tokenizer.json read and its SHA-256 (from_json: "" and the digest of the text).
  const std::string& json_path() const;
  const std::string& sha256() const;

  struct Impl;

 private:
  explicit Tokenizer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace ulysses::data

// Deterministic mixed text for the tokenizer tests and benchmarks: English prose, source code,
// CJK, emoji (with ZWJ sequences, skin tones, flags), other scripts with combining marks
// (composed and decomposed, for NFC), long runs of white space, control characters, digits of
// several scripts, added-token spellings inside the text, and (when asked) ill-formed UTF-8.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace ulysses::data {

struct SampleTextOptions {
  uint64_t seed = 1;
  size_t total_bytes = 1 << 20;  // at least this many bytes over all documents
  bool invalid_utf8 = true;      // mix in ill-formed sequences
  bool added_tokens = true;      // spell special tokens (<|endoftext|>, </s>, ...) inside the text
};

// Documents of 100 B to ~20 KB each, the same for the same options on every machine. Leaves
// out the few characters on which the reference (transformers.js, JavaScript's regular
// expressions) and Hugging Face tokenizers disagree (docs/DATA.md, "Tokenizers").
std::vector<std::string> sample_documents(const SampleTextOptions& options);

}  // namespace ulysses::data

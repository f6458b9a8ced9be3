// The regular expressions of tokenizer.json (a Split pre-tokenizer's pattern, a Replace
// normalizer's), matched by PCRE2 with UTF and UCP on, so \p{L}, \p{N} and \s mean what the
// Hugging Face tokenizers mean by them, JIT-compiled when the platform has a JIT.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace ulysses::data {

// Match state of one thread (PCRE2's match data and JIT stack); a Regex is shared by threads,
// a RegexScratch is not.
class RegexScratch {
 public:
  RegexScratch();
  ~RegexScratch();
  RegexScratch(const RegexScratch&) = delete;
  RegexScratch& operator=(const RegexScratch&) = delete;
  struct Impl;
  Impl& impl() { return *impl_; }

 private:
  std::unique_ptr<Impl> impl_;
};

class Regex {
 public:
  // Throws std::invalid_argument with PCRE2's message and the offset when `pattern` does not
  // compile.
  explicit Regex(const std::string& pattern);
  ~Regex();
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;

  // Every non-overlapping match of the pattern in `text` (valid UTF-8), left to right, as
  // [begin, end) byte offsets; an empty match advances by one character, as JavaScript's
  // matchAll and Rust's find_iter do.
  void find_all(std::string_view text, RegexScratch& scratch, std::vector<std::pair<size_t, size_t>>& out) const;

  const std::string& pattern() const { return pattern_; }

 private:
  std::string pattern_;
  void* code_ = nullptr;  // pcre2_code_8
  bool jit_ = false;
};

}  // namespace ulysses::data

// PCRE2 behind the tokenizers' regular expressions (see unicode_regex.hpp).
#include "unicode_regex.hpp"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <stdexcept>

#include "text_utf8.hpp"

namespace ulysses::data {

struct RegexScratch::Impl {
  pcre2_match_data* data = nullptr;
  pcre2_jit_stack* stack = nullptr;
  pcre2_match_context* context = nullptr;
};

RegexScratch::RegexScratch() : impl_(std::make_unique<Impl>()) {
  // A long run of white space matched by \s+(?!\S) needs more than the default 32 KiB.
  impl_->stack = pcre2_jit_stack_create(64 * 1024, 8 * 1024 * 1024, nullptr);
  impl_->context = pcre2_match_context_create(nullptr);
  if (impl_->stack && impl_->context) pcre2_jit_stack_assign(impl_->context, nullptr, impl_->stack);
  impl_->data = pcre2_match_data_create(16, nullptr);
}

RegexScratch::~RegexScratch() {
  pcre2_match_data_free(impl_->data);
  pcre2_match_context_free(impl_->context);
  pcre2_jit_stack_free(impl_->stack);
}

Regex::Regex(const std::string& pattern) : pattern_(pattern) {
  int err = 0;
  PCRE2_SIZE offset = 0;
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                                   PCRE2_UTF | PCRE2_UCP | PCRE2_NO_UTF_CHECK, &err, &offset, nullptr);
  if (!code) {
    PCRE2_UCHAR msg[256];
    pcre2_get_error_message(err, msg, sizeof msg);
    throw std::invalid_argument("regular expression '" + pattern + "' does not compile at offset " +
                                std::to_string(offset) + ": " + reinterpret_cast<const char*>(msg));
  }
  jit_ = pcre2_jit_compile(code, PCRE2_JIT_COMPLETE) == 0;
  code_ = code;
}

Regex::~Regex() { pcre2_code_free(static_cast<pcre2_code*>(code_)); }

void Regex::find_all(std::string_view text, RegexScratch& scratch, std::vector<std::pair<size_t, size_t>>& out) const {
  out.clear();
  auto* code = static_cast<pcre2_code*>(code_);
  auto& s = scratch.impl();
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t at = 0;
  while (at <= text.size()) {
    const int rc = jit_ ? pcre2_jit_match(code, subject, text.size(), at, 0, s.data, s.context)
                        : pcre2_match(code, subject, text.size(), at, PCRE2_NO_UTF_CHECK, s.data, s.context);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) {
      PCRE2_UCHAR msg[256];
      pcre2_get_error_message(rc, msg, sizeof msg);
      throw std::runtime_error("matching '" + pattern_ + "' failed: " + reinterpret_cast<const char*>(msg));
    }
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(s.data);
    const size_t b = ov[0], e = ov[1];
    out.emplace_back(b, e);
    if (e > b) {
      at = e;
    } else {
      if (e >= text.size()) break;
      at = e + utf8_length(static_cast<unsigned char>(text[e]));
    }
  }
}

}  // namespace ulysses::data

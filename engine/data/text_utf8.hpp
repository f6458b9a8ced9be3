// UTF-8 helpers of the tokenizers: invalid input made valid the way a browser decodes it, the
// GPT-2 byte-to-character table of byte-level BPE, and whitespace as the tokenizers trim it.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace ulysses::data {

// `text` with every ill-formed UTF-8 sequence replaced by U+FFFD, one per maximal subpart
// (WHATWG's decoder, which node's TextDecoder and Python's errors="replace" follow): a stray
// continuation byte, a truncated sequence, an overlong form, a surrogate or a code point past
// U+10FFFF. `replaced` (when given) is the number of replacements made. Valid text is returned
// as is.
std::string valid_utf8(std::string_view text, size_t* replaced = nullptr);

// Whether `text` is well-formed UTF-8.
bool is_valid_utf8(std::string_view text);

// Bytes of the code point starting with `lead` (1 for a byte that starts none).
inline size_t utf8_length(unsigned char lead) {
  return lead < 0x80 ? 1 : lead >= 0xF0 ? 4 : lead >= 0xE0 ? 3 : lead >= 0xC0 ? 2 : 1;
}

// Appends code point `cp` encoded in UTF-8.
void append_utf8(std::string& out, uint32_t cp);

// GPT-2's bytes_to_unicode(): byte b is written in a byte-level vocabulary as the character
// byte_char(b) (printable Latin-1 bytes as themselves, the others from U+0100 on).
uint32_t byte_char(uint8_t b);
// The byte a character of a byte-level vocabulary stands for, or -1 for a character that is none.
int char_byte(uint32_t cp);

// Decodes the code point at text[i] (valid UTF-8 assumed) and advances i.
uint32_t next_code_point(std::string_view text, size_t& i);

// White space as String.prototype.trim and Python's str.strip see it (ASCII and Unicode spaces).
bool is_unicode_space(uint32_t cp);
std::string_view trim_left(std::string_view s);
std::string_view trim_right(std::string_view s);

}  // namespace ulysses::data

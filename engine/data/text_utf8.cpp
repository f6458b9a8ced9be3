// UTF-8 helpers of the tokenizers (see text_utf8.hpp).
#include "text_utf8.hpp"

namespace ulysses::data {

namespace {

// Length of the well-formed sequence at s[i], or 0 when it is ill-formed; `bad_end` is then
// where the maximal subpart ends (the next byte to look at).
size_t utf8_sequence(std::string_view s, size_t i, size_t& bad_end) {
  const auto b = static_cast<unsigned char>(s[i]);
  if (b < 0x80) return 1;
  size_t need = 0;
  unsigned char lo = 0x80, hi = 0xBF;
  if (b >= 0xC2 && b <= 0xDF) {
    need = 1;
  } else if (b >= 0xE0 && b <= 0xEF) {
    need = 2;
    if (b == 0xE0) lo = 0xA0;
    if (b == 0xED) hi = 0x9F;
  } else if (b >= 0xF0 && b <= 0xF4) {
    need = 3;
    if (b == 0xF0) lo = 0x90;
    if (b == 0xF4) hi = 0x8F;
  } else {
    bad_end = i + 1;
    return 0;
  }
  size_t j = i + 1;
  for (size_t k = 0; k < need; ++k, ++j) {
    if (j >= s.size()) {
      bad_end = j;
      return 0;
    }
    const auto c = static_cast<unsigned char>(s[j]);
    if (c < lo || c > hi) {
      bad_end = j;
      return 0;
    }
    lo = 0x80;
    hi = 0xBF;
  }
  return need + 1;
}

}  // namespace

bool is_valid_utf8(std::string_view text) {
  size_t i = 0, bad = 0;
  while (i < text.size()) {
    if (static_cast<unsigned char>(text[i]) < 0x80) {
      ++i;
      continue;
    }
    const size_t n = utf8_sequence(text, i, bad);
    if (n == 0) return false;
    i += n;
  }
  return true;
}

std::string valid_utf8(std::string_view text, size_t* replaced) {
  if (replaced) *replaced = 0;
  if (is_valid_utf8(text)) return std::string(text);
  std::string out;
  out.reserve(text.size() + 16);
  size_t i = 0, bad = 0;
  while (i < text.size()) {
    const size_t n = utf8_sequence(text, i, bad);
    if (n > 0) {
      out.append(text.data() + i, n);
      i += n;
    } else {
      out += "\xEF\xBF\xBD";
      if (replaced) ++*replaced;
      i = bad;
    }
  }
  return out;
}

void append_utf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

uint32_t next_code_point(std::string_view text, size_t& i) {
  const auto b = static_cast<unsigned char>(text[i]);
  const size_t n = utf8_length(b);
  if (n == 1 || i + n > text.size()) {
    ++i;
    return b;
  }
  uint32_t cp = n == 2 ? (b & 0x1F) : n == 3 ? (b & 0x0F) : (b & 0x07);
  for (size_t k = 1; k < n; ++k) cp = (cp << 6) | (static_cast<unsigned char>(text[i + k]) & 0x3F);
  i += n;
  return cp;
}

namespace {

struct ByteTables {
  std::array<uint32_t, 256> to_char{};
  std::array<int16_t, 512> to_byte{};  // code point < 512 -> byte, or -1
  ByteTables() {
    to_byte.fill(-1);
    // bytes_to_unicode(): '!'..'~', '¡'..'¬', '®'..'ÿ' stand for themselves; the other 68
    // bytes, in order, for U+0100, U+0101, ...
    uint32_t next = 256;
    for (uint32_t b = 0; b < 256; ++b) {
      const bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      to_char[b] = printable ? b : next++;
      to_byte[to_char[b]] = static_cast<int16_t>(b);
    }
  }
};

const ByteTables& byte_tables() {
  static const ByteTables t;
  return t;
}

}  // namespace

uint32_t byte_char(uint8_t b) { return byte_tables().to_char[b]; }

int char_byte(uint32_t cp) { return cp < 512 ? byte_tables().to_byte[cp] : -1; }

bool is_unicode_space(uint32_t cp) {
  return (cp >= 0x09 && cp <= 0x0D) || cp == 0x20 || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
         (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F ||
         cp == 0x3000 || cp == 0xFEFF;
}

std::string_view trim_left(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    size_t j = i;
    if (!is_unicode_space(next_code_point(s, j))) break;
    i = j;
  }
  return s.substr(i);
}

std::string_view trim_right(std::string_view s) {
  size_t end = s.size();
  while (end > 0) {
    size_t start = end - 1;
    while (start > 0 && (static_cast<unsigned char>(s[start]) & 0xC0) == 0x80) --start;
    size_t j = start;
    if (!is_unicode_space(next_code_point(s, j))) break;
    end = start;
  }
  return s.substr(0, end);
}

}  // namespace ulysses::data

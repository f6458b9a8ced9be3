// Deterministic mixed text (see sample_text.hpp).
#include "sample_text.hpp"

#include <array>

#include "text_utf8.hpp"

namespace ulysses::data {

namespace {

struct SampleRng {
  uint64_t s;
  uint64_t next() {  // splitmix64
    uint64_t z = (s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  size_t below(size_t n) { return static_cast<size_t>(next() % n); }
  uint32_t in(uint32_t lo, uint32_t hi) { return lo + static_cast<uint32_t>(next() % (hi - lo + 1)); }
};

const std::array<const char*, 40> kSampleWords = {
    "the",       "of",       "and",       "to",        "in",      "is",       "that",   "it",     "was",    "for",
    "tokenizer", "sequence", "parallel",  "attention", "Ulysses", "training", "GPU",    "memory", "long",   "context",
    "don't",     "it's",     "WE'RE",     "they've",   "I'm",     "you'll",   "she'd",  "John's", "O'Neil", "naïve",
    "café",      "résumé",   "coöperate", "Zürich",    "façade",  "œuvre",    "straße", "HTTP",   "JSON",   "v2.0"};

const std::array<const char*, 14> kSampleCode = {
    "int main(int argc, char** argv) {\n    return 0;\n}\n",
    "def f(x):\n    if x > 0:\n        return x ** 2\n    return -x  # negative\n",
    "for (size_t i = 0; i < n; ++i) { sum += a[i] * b[i]; }\n",
    "\tconst auto& [key, value] = *it;\r\n\tstd::cout << key << \": \" << value << '\\n';\r\n",
    "SELECT id, name FROM users WHERE age >= 21 ORDER BY name;\n",
    "<div class=\"x\">&lt;tag&gt; &amp; <br/></div>\n",
    "x = {'a': [1, 2, 3], \"b\": None}\nprint(f\"{x!r:>10}\")\n",
    "fn main() -> Result<(), Box<dyn Error>> { Ok(()) }\n",
    "    #include <vector>\n#define MAX(a,b) ((a)>(b)?(a):(b))\n",
    "if [ -z \"$1\" ]; then echo 'usage: $0 FILE' >&2; exit 2; fi\n",
    "{\"text\": \"hello\\nworld\", \"n\": 1e-9, \"ok\": true}\n",
    "a+=b;c-=d;e*=f;g/=h;i%=j;k<<=2;l>>=3;m&&n||!o;p->q;r::s\n",
    "// TODO(me): fix this!!!   ...   ???   ~~~   ===   ---\n",
    "/* comment */ x = y != z ? 0x1F : 0b1010; /* 'quoted' */\n"};

// Blocks of code points that have been in Unicode for a long time (no category changes
// between the Unicode versions of PCRE2, utf8proc and node's ICU).
struct SampleBlock {
  uint32_t lo, hi;
};
const std::array<SampleBlock, 16> kSampleScripts = {{
    {0x4E00, 0x9FA5},  // CJK unified ideographs
    {0x3041, 0x3096},  // Hiragana
    {0x30A1, 0x30FA},  // Katakana
    {0xAC00, 0xD7A3},  // Hangul syllables
    {0x0410, 0x044F},  // Cyrillic
    {0x0391, 0x03C9},  // Greek
    {0x0621, 0x064A},  // Arabic letters
    {0x0905, 0x0939},  // Devanagari letters
    {0x0E01, 0x0E2E},  // Thai
    {0x05D0, 0x05EA},  // Hebrew
    {0x3001, 0x3011},  // CJK punctuation (、。〈〉《》「」...)
    {0xFF01, 0xFF5E},  // full-width forms
    {0x2010, 0x2027},  // general punctuation (dashes, quotes, bullet, ellipsis)
    {0x2190, 0x21FF},  // arrows
    {0x2200, 0x22FF},  // mathematical operators
    {0x00C0, 0x00FF},  // Latin-1 letters
}};

void sample_words(std::string& out, SampleRng& r, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    std::string w = kSampleWords[r.below(kSampleWords.size())];
    if (r.below(8) == 0) w[0] = static_cast<char>(w[0] >= 'a' && w[0] <= 'z' ? w[0] - 32 : w[0]);
    out += w;
    const size_t p = r.below(20);
    if (p == 0) out += ".";
    if (p == 1) out += ",";
    if (p == 2) out += "!?";
    if (p == 3) out += std::to_string(r.next() % 100000000);
    if (p == 4) out += "\xE2\x80\x99s";  // ’s
    out += r.below(30) == 0 ? "\n" : " ";
  }
}

void sample_script(std::string& out, SampleRng& r, size_t n) {
  const SampleBlock b = kSampleScripts[r.below(kSampleScripts.size())];
  for (size_t i = 0; i < n; ++i) {
    append_utf8(out, r.in(b.lo, b.hi));
    if (r.below(12) == 0) out += ' ';
  }
}

void sample_emoji(std::string& out, SampleRng& r, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    switch (r.below(6)) {
      case 0:
        append_utf8(out, r.in(0x1F600, 0x1F64F));
        break;
      case 1:
        append_utf8(out, r.in(0x1F300, 0x1F5FF));
        break;
      case 2:  // skin tone
        append_utf8(out, r.in(0x1F466, 0x1F469));
        append_utf8(out, r.in(0x1F3FB, 0x1F3FF));
        break;
      case 3:  // ZWJ family
        out += "\xF0\x9F\x91\xA8\xE2\x80\x8D\xF0\x9F\x91\xA9\xE2\x80\x8D\xF0\x9F\x91\xA7";
        break;
      case 4:  // flag
        append_utf8(out, r.in(0x1F1E6, 0x1F1FF));
        append_utf8(out, r.in(0x1F1E6, 0x1F1FF));
        break;
      default:
        out += "\xE2\x9D\xA4\xEF\xB8\x8F";  // ❤️ (variation selector)
    }
    if (r.below(4) == 0) out += ' ';
  }
}

void sample_space(std::string& out, SampleRng& r) {
  const size_t n = r.below(4) == 0 ? r.in(100, 3000) : r.in(1, 40);
  const std::array<const char*, 7> kinds = {" ", "\t", "\n", "\r\n", "\xC2\xA0", "\xE3\x80\x80", "\xE2\x80\x83"};
  const size_t mode = r.below(3);  // one kind, two kinds, or a mix
  const char* a = kinds[r.below(kinds.size())];
  const char* b = kinds[r.below(kinds.size())];
  for (size_t i = 0; i < n; ++i) out += mode == 0 ? a : mode == 1 ? (i % 7 == 6 ? b : a) : kinds[r.below(kinds.size())];
}

void sample_controls(std::string& out, SampleRng& r, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    const uint32_t c = r.below(3) == 0 ? r.in(0x80, 0x9F) : r.in(0x00, 0x1F);
    if (c == 0x85) continue;  // NEL: white space for PCRE2 and Hugging Face, not for JavaScript
    if (r.below(5) == 0) append_utf8(out, 0x7F);
    append_utf8(out, c);
  }
}

void sample_marks(std::string& out, SampleRng& r, size_t n) {
  // Latin letters with combining accents (decomposed; NFC composes most), Devanagari with signs.
  for (size_t i = 0; i < n; ++i) {
    if (r.below(2) == 0) {
      out += static_cast<char>('a' + r.below(26));
      append_utf8(out, r.in(0x0300, 0x0308));
      if (r.below(4) == 0) append_utf8(out, 0x0323);
    } else {
      append_utf8(out, r.in(0x0915, 0x0939));
      append_utf8(out, r.in(0x093E, 0x094D));
    }
    if (r.below(6) == 0) out += ' ';
  }
}

void sample_digits(std::string& out, SampleRng& r) {
  const size_t n = r.in(1, 25);
  const uint32_t zero = std::array<uint32_t, 4>{'0', 0x0660, 0xFF10, 0x0966}[r.below(4)];
  for (size_t i = 0; i < n; ++i) append_utf8(out, zero + r.in(0, 9));
  out += r.below(2) ? " " : ".";
}

void sample_invalid(std::string& out, SampleRng& r) {
  const std::array<const char*, 9> bad = {"\x80",         "\xBF\xBF",     "\xC0\x80",
                                          "\xE0\x80\x80", "\xED\xA0\x80", "\xF5\x80\x80\x80",
                                          "\xFF",         "\xE6\x97",     "\xF0\x9F\x98"};
  out += bad[r.below(bad.size())];
}

void sample_added(std::string& out, SampleRng& r) {
  const std::array<const char*, 9> spelled = {
      "<|endoftext|>", "<|begin_of_text|>", "</s>",  "<s>",       "<|im_start|>",
      "<|end",         "<|eot_id|>",        "<unk>", "<|im_end|>"};
  out += spelled[r.below(spelled.size())];
}

}  // namespace

std::vector<std::string> sample_documents(const SampleTextOptions& options) {
  SampleRng r{options.seed};
  std::vector<std::string> docs;
  size_t total = 0;
  while (total < options.total_bytes) {
    std::string d;
    const size_t target = r.below(5) == 0 ? r.in(5000, 20000) : r.in(100, 3000);
    while (d.size() < target) {
      switch (r.below(10)) {
        case 0:
        case 1:
        case 2:
          sample_words(d, r, r.in(5, 60));
          break;
        case 3:
          d += kSampleCode[r.below(kSampleCode.size())];
          break;
        case 4:
          sample_script(d, r, r.in(3, 80));
          break;
        case 5:
          sample_emoji(d, r, r.in(1, 12));
          break;
        case 6:
          sample_space(d, r);
          break;
        case 7:
          if (r.below(2))
            sample_controls(d, r, r.in(1, 6));
          else
            sample_marks(d, r, r.in(1, 20));
          break;
        case 8:
          sample_digits(d, r);
          break;
        default:
          if (options.invalid_utf8 && r.below(2))
            sample_invalid(d, r);
          else if (options.added_tokens)
            sample_added(d, r);
          else
            sample_words(d, r, 3);
      }
    }
    total += d.size();
    docs.push_back(std::move(d));
  }
  return docs;
}

}  // namespace ulysses::data

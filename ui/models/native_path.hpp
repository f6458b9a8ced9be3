// File names as the studio carries them: a QString that holds any Linux file name byte for byte.
// Qt 6 decodes a name that is not UTF-8 with U+FFFD (QFile::decodeName, QDir listings skip such
// entries altogether) and encodes it back as other bytes, so "run-\xff" would read "does not exist",
// vanish from the runs list, and a screenshot asked for as "shot-\xfe.png" would be written as
// "shot-\xef\xbf\xbd.png". Here a byte that is not part of valid UTF-8 becomes the lone low
// surrogate U+DC00 + byte (Python's "surrogateescape", PEP 383) and comes back as that byte.
//
// Rule: a path QString reaches the file system only through native_path() (std::filesystem,
// the profiler and launch readers, POSIX calls), never through QFile / QFileInfo::exists /
// QDir listings; string-only QFileInfo / QDir calls (fileName, absoluteFilePath, filePath) keep
// the escapes and are fine. display_path() is for messages (U+FFFD for each escaped byte).
#pragma once

#include <QString>
#include <filesystem>
#include <string>
#include <string_view>
#include <system_error>

namespace ulysses::ui {

inline QString qs_from_native(std::string_view b) {
  QString out;
  out.reserve(int(b.size()));
  const auto* s = reinterpret_cast<const unsigned char*>(b.data());
  const size_t n = b.size();
  size_t i = 0;
  while (i < n) {
    const unsigned c = s[i];
    if (c < 0x80) {
      out += QChar(char16_t(c));
      ++i;
      continue;
    }
    // A well-formed UTF-8 sequence (no overlong forms, no surrogates, at most U+10FFFF).
    size_t len = 0;
    char32_t cp = 0, min = 0;
    if (c >= 0xC2 && c <= 0xDF) {
      len = 2, cp = c & 0x1F, min = 0x80;
    } else if (c >= 0xE0 && c <= 0xEF) {
      len = 3, cp = c & 0x0F, min = 0x800;
    } else if (c >= 0xF0 && c <= 0xF4) {
      len = 4, cp = c & 0x07, min = 0x10000;
    }
    bool ok = len > 0 && i + len <= n;
    for (size_t k = 1; ok && k < len; ++k) {
      ok = (s[i + k] & 0xC0) == 0x80;
      cp = (cp << 6) | (s[i + k] & 0x3F);
    }
    ok = ok && cp >= min && cp <= 0x10FFFF && !(cp >= 0xD800 && cp <= 0xDFFF);
    if (!ok) {
      out += QChar(char16_t(0xDC00 + c));  // one escaped byte; decoding resumes at the next
      ++i;
      continue;
    }
    if (cp >= 0x10000) {
      out += QChar(char16_t(0xD800 + ((cp - 0x10000) >> 10)));
      out += QChar(char16_t(0xDC00 + ((cp - 0x10000) & 0x3FF)));
    } else {
      out += QChar(char16_t(cp));
    }
    i += len;
  }
  return out;
}

inline std::string native_path(const QString& q) {
  std::string out;
  out.reserve(size_t(q.size()) * 2);
  auto put = [&](char32_t cp) {
    if (cp < 0x80) {
      out += char(cp);
    } else if (cp < 0x800) {
      out += char(0xC0 | (cp >> 6));
      out += char(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
      out += char(0xE0 | (cp >> 12));
      out += char(0x80 | ((cp >> 6) & 0x3F));
      out += char(0x80 | (cp & 0x3F));
    } else {
      out += char(0xF0 | (cp >> 18));
      out += char(0x80 | ((cp >> 12) & 0x3F));
      out += char(0x80 | ((cp >> 6) & 0x3F));
      out += char(0x80 | (cp & 0x3F));
    }
  };
  const qsizetype n = q.size();
  for (qsizetype i = 0; i < n; ++i) {
    const char16_t u = q[i].unicode();
    if (u >= 0xD800 && u <= 0xDBFF && i + 1 < n && q[i + 1].unicode() >= 0xDC00 && q[i + 1].unicode() <= 0xDFFF) {
      put(0x10000 + ((char32_t(u) - 0xD800) << 10) + (char32_t(q[i + 1].unicode()) - 0xDC00));
      ++i;
    } else if (u >= 0xDC80 && u <= 0xDCFF) {
      out += char(u - 0xDC00);  // an escaped byte
    } else if (u >= 0xD800 && u <= 0xDFFF) {
      put(0xFFFD);  // any other lone surrogate names no file
    } else {
      put(u);
    }
  }
  return out;
}

// For messages: each escaped byte shown as U+FFFD.
inline QString display_path(const QString& q) {
  QString out = q;
  for (qsizetype i = 0; i < out.size(); ++i) {
    const char16_t u = out[i].unicode();
    const bool pair = u >= 0xD800 && u <= 0xDBFF && i + 1 < out.size() && out[i + 1].unicode() >= 0xDC00 &&
                      out[i + 1].unicode() <= 0xDFFF;
    if (pair)
      ++i;
    else if (u >= 0xDC00 && u <= 0xDFFF)
      out[i] = QChar(char16_t(0xFFFD));
  }
  return out;
}

inline bool path_exists(const QString& p) {
  std::error_code ec;
  return std::filesystem::exists(native_path(p), ec);
}
inline bool path_is_dir(const QString& p) {
  std::error_code ec;
  return std::filesystem::is_directory(native_path(p), ec);
}
inline bool path_is_file(const QString& p) {
  std::error_code ec;
  return std::filesystem::is_regular_file(native_path(p), ec);
}

}  // namespace ulysses::ui

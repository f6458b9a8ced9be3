// The documents `ulysses data prepare` reads, in order, from one of three inputs:
//   - JSON lines (.jsonl, .ndjson, .json): one document per line, its text in a string field
//     ("text" unless named otherwise);
//   - a folder of text files: one document per file (all regular files below it, hidden ones
//     left out, in byte order of their paths);
//   - one text file: documents separated by a line holding only the separator
//     (`<|endoftext|>` unless named otherwise; a document's last line break belongs to the
//     separator line).
// Any of these files may be gzip- or zstd-compressed (recognised by their first bytes, so a .gz
// or .zst name is not required). Torch- and Qt-free.
#pragma once

#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace ulysses::data {

// Input a user must fix: the message names the file and the line. Exit 2.
struct DataInputError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

enum class InputFormat { kAuto, kJsonl, kText, kFolder };
InputFormat parse_input_format(const std::string& name);  // "auto", "jsonl", "text", "folder"
const char* input_format_name(InputFormat f);
// kAuto resolved: a folder, a .jsonl/.ndjson/.json name (before any .gz/.zst), else text.
InputFormat resolve_input_format(const std::string& path, InputFormat f);

// One document, or (JSON lines) the raw line that holds it.
struct RawDocument {
  std::string payload;
  uint64_t line = 0;  // first line of the document in its file (0 for a whole file)
  uint32_t file = 0;  // index into DocumentSource::files()
};

class DocumentSource {
 public:
  virtual ~DocumentSource() = default;
  // Appends up to about `max_bytes` of documents to `out`; false when the input is exhausted.
  virtual bool next_batch(std::vector<RawDocument>& out, size_t max_bytes) = 0;
  // Input bytes consumed so far (compressed bytes for a compressed file) and in all.
  virtual uint64_t bytes_read() const = 0;
  virtual uint64_t bytes_total() const = 0;
  const std::vector<std::string>& files() const { return files_; }

 protected:
  std::vector<std::string> files_;
};

// Throws DataInputError for an input that does not exist or cannot be read.
std::unique_ptr<DocumentSource> open_documents(const std::string& path, InputFormat format,
                                               const std::string& separator);

}  // namespace ulysses::data

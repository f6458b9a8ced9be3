// `ulysses data prepare`: documents in (document_source.hpp), a tokenized dataset folder out
// (dataset_format.hpp). Several threads tokenize batches of documents while the calling thread
// reads the input and writes the results in input order. Every document is written as
// [BOS when the tokenizer adds one] + ids of its text + [EOS]: EOS ends every document (the
// tokenizer_config.json's eos_token, or `eos_token` given here), so a packed sequence sees where
// one document stops. The folder is written as OUT.partial-XXXXXX beside OUT and renamed to OUT
// when complete: an interrupted prepare (a signal, SIGKILL, a full disk) leaves nothing under
// OUT.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>

#include "document_source.hpp"

namespace ulysses::data {

struct PrepareOptions {
  std::string tokenizer;  // a model folder or its tokenizer.json
  std::string input;
  std::string out;
  std::string text_field = "text";          // JSON lines
  std::string separator = "<|endoftext|>";  // one text file
  InputFormat format = InputFormat::kAuto;
  std::string eos_token;                      // "" = tokenizer_config.json's eos_token
  unsigned threads = 0;                       // 0 = every core
  bool force = false;                         // replace an existing dataset at `out`
  const std::atomic<bool>* cancel = nullptr;  // set (by a signal handler) to stop; OUT is left as it was
};

struct PrepareProgress {
  uint64_t bytes_read = 0, bytes_total = 0;
  uint64_t documents = 0, tokens = 0;
  double seconds = 0;
  bool done = false;
};

struct PrepareResult {
  uint64_t documents = 0, tokens = 0;
  uint64_t invalid_utf8_documents = 0;  // documents where ill-formed UTF-8 was replaced by U+FFFD
  double seconds = 0;
};

// Throws DataInputError (bad input: the message names the file and the line), TokenizerError
// (the tokenizer file) or std::runtime_error (a failure: a full disk, a signal). `progress` is
// called from the calling thread after each batch written.
PrepareResult prepare_dataset(const PrepareOptions& options,
                              const std::function<void(const PrepareProgress&)>& progress = {});

}  // namespace ulysses::data

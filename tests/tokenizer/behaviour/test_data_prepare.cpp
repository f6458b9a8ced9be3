// `ulysses-data prepare` and `tokenize` end to end, with a tiny hand-made tokenizer (so these run
// without the npm reference files): the dataset folder's three files against the library's own
// encode + BOS + EOS, every input kind (JSON lines plain/gzip/zstd, a folder, a text file with
// separator lines), bad input (exit 2 naming the file and the line), --force, and a prepare
// killed with SIGKILL leaving nothing under the final name.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zlib.h>
#include <zstd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "common/e2e_util.hpp"
#include "dataset_format.hpp"
#include "tokenizer.hpp"
#include "tokenizer/tiny_tokenizer.hpp"

namespace fs = std::filesystem;
using ulysses::test::sh;
using ulysses::test::slurp;

namespace {

std::string scratch(const std::string& name) {
  const std::string p = ulysses::test::scratch_path("data_prepare", name);
  fs::remove_all(p);
  return p;
}

std::string scratch_keep(const std::string& name) { return ulysses::test::scratch_path("data_prepare", name); }

std::string tiny_dir() {
  static const std::string dir = ulysses::test::write_tiny_tokenizer(scratch("tiny_tokenizer"));
  return dir;
}

std::string data_cmd(const std::string& args) { return std::string("'") + ULYSSES_DATA_EXE + "' " + args; }

struct Dataset {
  nlohmann::json manifest;
  std::vector<uint16_t> tokens;
  std::vector<uint64_t> offsets;
};

Dataset read_dataset(const std::string& dir) {
  Dataset d;
  d.manifest = nlohmann::json::parse(slurp(dir + "/manifest.json"));
  const std::string t = slurp(dir + "/tokens.bin"), o = slurp(dir + "/documents.bin");
  d.tokens.resize(t.size() / 2);
  std::memcpy(d.tokens.data(), t.data(), d.tokens.size() * 2);
  d.offsets.resize(o.size() / 8);
  std::memcpy(d.offsets.data(), o.data(), d.offsets.size() * 8);
  return d;
}

// What the dataset must hold: BOS + ids + EOS per document, from the library directly.
std::vector<uint16_t> expected_tokens(const std::vector<std::string>& docs) {
  const auto tok = ulysses::data::Tokenizer::load(tiny_dir());
  std::vector<uint16_t> out;
  for (const auto& d : docs) {
    out.push_back(261);
    for (uint32_t id : tok->encode(d)) out.push_back(static_cast<uint16_t>(id));
    out.push_back(260);
  }
  return out;
}

std::string jsonl(const std::vector<std::string>& docs) {
  std::string s;
  for (const auto& d : docs) s += nlohmann::json{{"id", 1}, {"text", d}}.dump() + "\n";
  return s;
}

const std::vector<std::string> kDocs = {"the theory in the thin", "first\nsecond line\n\n  indented",
                                        "<|endoftext|> inside", "日本語 and emoji 😀"};

void expect_dataset(const std::string& out, const std::vector<std::string>& docs) {
  ASSERT_TRUE(fs::exists(out + "/manifest.json")) << out;
  const Dataset d = read_dataset(out);
  const auto want = expected_tokens(docs);
  EXPECT_EQ(d.manifest["format"], "ulysses-documents");
  EXPECT_EQ(d.manifest["version"], 1);
  EXPECT_EQ(d.manifest["dtype"], "uint16");
  EXPECT_EQ(d.manifest["vocab_size"], 262);
  EXPECT_EQ(d.manifest["num_documents"], docs.size());
  EXPECT_EQ(d.manifest["num_tokens"], want.size());
  EXPECT_EQ(d.manifest["tokenizer"]["model_type"], "BPE");
  EXPECT_EQ(d.manifest["tokenizer"]["sha256"].get<std::string>().size(), 64u);
  EXPECT_EQ(d.tokens, want);
  ASSERT_EQ(d.offsets.size(), docs.size() + 1);
  EXPECT_EQ(d.offsets.front(), 0u);
  EXPECT_EQ(d.offsets.back(), want.size());
  for (size_t i = 0; i + 1 < d.offsets.size(); ++i) {
    EXPECT_EQ(d.tokens[d.offsets[i]], 261) << "document " << i << " starts with BOS";
    EXPECT_EQ(d.tokens[d.offsets[i + 1] - 1], 260) << "document " << i << " ends with EOS";
  }
  uint64_t in_histogram = 0;
  for (const auto& b : d.manifest["document_length_histogram"]) in_histogram += b["documents"].get<uint64_t>();
  EXPECT_EQ(in_histogram, docs.size());
  EXPECT_NO_THROW(ulysses::data::read_dataset_info(out));
}

}  // namespace

TEST(DataPrepare, JsonLinesPlainGzipAndZstd) {
  const std::string text = jsonl(kDocs);
  const std::string plain = scratch("docs.jsonl");
  std::ofstream(plain, std::ios::binary) << text;
  const std::string gz = scratch("docs.jsonl.gz");
  gzFile g = gzopen(gz.c_str(), "wb");
  gzwrite(g, text.data(), static_cast<unsigned>(text.size()));
  gzclose(g);
  const std::string zst = scratch("docs.jsonl.zst");
  std::string z(ZSTD_compressBound(text.size()), '\0');
  z.resize(ZSTD_compress(z.data(), z.size(), text.data(), text.size(), 3));
  std::ofstream(zst, std::ios::binary) << z;
  for (const auto& in : {plain, gz, zst}) {
    const std::string out = scratch("ds_" + fs::path(in).filename().string());
    const auto p =
        sh(data_cmd("prepare --tokenizer '" + tiny_dir() + "' --input '" + in + "' --out '" + out + "' --threads 2"),
           "", true);
    ASSERT_EQ(p.code, 0) << p.out;
    expect_dataset(out, kDocs);
    EXPECT_EQ(read_dataset(out).manifest["source"]["format"], "jsonl");
  }
}

TEST(DataPrepare, FolderOfTextFilesAndSeparatedTextFile) {
  const std::string folder = scratch("folder");
  fs::create_directories(folder + "/sub");
  fs::create_directories(folder + "/.git");
  std::ofstream(folder + "/a.txt") << kDocs[0];
  std::ofstream(folder + "/sub/b.txt") << kDocs[1];
  std::ofstream(folder + "/.git/HEAD") << "ignored";
  std::ofstream(folder + "/.hidden") << "ignored";
  const std::string out1 = scratch("ds_folder");
  auto p =
      sh(data_cmd("prepare --tokenizer '" + tiny_dir() + "' --input '" + folder + "' --out '" + out1 + "'"), "", true);
  ASSERT_EQ(p.code, 0) << p.out;
  expect_dataset(out1, {kDocs[0], kDocs[1]});
  // One text file: a line holding only the separator ends a document (its line break with it);
  // a separator at the very end is fine.
  const std::string txt = scratch("docs.txt");
  std::ofstream(txt) << kDocs[0] << "\n<|endoftext|>\n"
                     << kDocs[1] << "\n<|endoftext|>\r\n"
                     << kDocs[2] << "\n<|endoftext|>\n";
  const std::string out2 = scratch("ds_text");
  p = sh(data_cmd("prepare --tokenizer '" + tiny_dir() + "' --input '" + txt + "' --out '" + out2 + "'"), "", true);
  ASSERT_EQ(p.code, 0) << p.out;
  expect_dataset(out2, {kDocs[0], kDocs[1], kDocs[2]});
  const std::string txt2 = scratch("docs2.txt");
  std::ofstream(txt2) << "one\n===\ntwo";
  const std::string out3 = scratch("ds_text2");
  p = sh(
      data_cmd("prepare --tokenizer '" + tiny_dir() + "' --input '" + txt2 + "' --out '" + out3 + "' --separator ==="),
      "", true);
  ASSERT_EQ(p.code, 0) << p.out;
  expect_dataset(out3, {"one", "two"});
}

TEST(DataPrepare, BadInputExitsTwoNamingTheFileAndLine) {
  struct Case {
    std::string name, content, message;
  };
  const std::vector<Case> cases = {
      {"notjson.jsonl", "{\"text\": \"a\"}\n{\"text\": oops}\n", "notjson.jsonl:2: not a JSON line"},
      {"nofield.jsonl", "{\"text\": \"a\"}\n{\"text\": \"b\"}\n{\"body\": \"c\"}\n",
       "nofield.jsonl:3: no field \"text\" (the object has: body)"},
      {"empty.jsonl", "{\"text\": \"a\"}\n{\"text\": \"\"}\n", "empty.jsonl:2: empty document"},
      {"number.jsonl", "{\"text\": 5}\n", "number.jsonl:1: field \"text\" is a number, not a string"},
      {"blank.jsonl", "{\"text\": \"a\"}\n\n{\"text\": \"b\"}\n", "blank.jsonl:2: not a JSON line (an empty line)"},
      {"empty.txt", "a\n<|endoftext|>\n<|endoftext|>\nb\n", "empty.txt:3: empty document"},
  };
  for (const auto& c : cases) {
    const std::string in = scratch(c.name);
    std::ofstream(in, std::ios::binary) << c.content;
    const std::string out = scratch("ds_bad");
    const auto p =
        sh(data_cmd("prepare --tokenizer '" + tiny_dir() + "' --input '" + in + "' --out '" + out + "'"), "", true);
    EXPECT_EQ(p.code, 2) << c.name << ": " << p.out;
    EXPECT_NE(p.out.find(c.message), std::string::npos) << c.name << ": " << p.out;
    EXPECT_FALSE(fs::exists(out)) << c.name;
    for (const auto& e : fs::directory_iterator(fs::path(out).parent_path()))
      EXPECT_EQ(e.path().filename().string().find("ds_bad.partial-"), std::string::npos) << "left behind: " << e.path();
  }
  // A tokenizer.json of a type that is not supported: exit 2 naming the file and the type.
  nlohmann::json unigram = {{"model", {{"type", "Unigram"}, {"vocab", nlohmann::json::array()}}}};
  const std::string tdir = scratch("unigram");
  fs::create_directories(tdir);
  std::ofstream(tdir + "/tokenizer.json") << unigram.dump();
  const std::string in = scratch("ok.jsonl");
  std::ofstream(in) << jsonl(kDocs);
  auto p =
      sh(data_cmd("prepare --tokenizer '" + tdir + "' --input '" + in + "' --out '" + scratch("ds_u") + "'"), "", true);
  EXPECT_EQ(p.code, 2) << p.out;
  EXPECT_NE(p.out.find(tdir + "/tokenizer.json: model type \"Unigram\" is not supported"), std::string::npos) << p.out;
  p = sh(data_cmd("tokenize --tokenizer '" + tdir + "' /dev/null"), "", true);
  EXPECT_EQ(p.code, 2) << p.out;
  // --out must name a folder to create; a trailing slash is fine.
  p = sh(data_cmd("prepare --tokenizer '" + tiny_dir() + "' --input '" + in + "' --out ."), "", true);
  EXPECT_EQ(p.code, 2) << p.out;
  EXPECT_NE(p.out.find("must name the dataset folder"), std::string::npos) << p.out;
  p = sh(data_cmd("prepare --tokenizer '" + tiny_dir() + "' --input '" + in + "' --out '" + scratch("ds_slash") + "/'"),
         "", true);
  EXPECT_EQ(p.code, 0) << p.out;
  EXPECT_TRUE(fs::exists(scratch_keep("ds_slash") + "/manifest.json"));
  // A custom field name.
  std::ofstream(in) << "{\"body\": \"the\"}\n";
  p = sh(data_cmd("prepare --tokenizer '" + tiny_dir() + "' --input '" + in + "' --out '" + scratch("ds_f") +
                  "' --text-field body"),
         "", true);
  EXPECT_EQ(p.code, 0) << p.out;
}

TEST(DataPrepare, ExistingOutputNeedsForceAndForceReplacesOnlyDatasets) {
  const std::string in = scratch("force.jsonl");
  std::ofstream(in) << jsonl(kDocs);
  const std::string out = scratch("ds_force");
  const std::string cmd = data_cmd("prepare --tokenizer '" + tiny_dir() + "' --input '" + in + "' --out '" + out + "'");
  ASSERT_EQ(sh(cmd, "", true).code, 0);
  auto p = sh(cmd, "", true);
  EXPECT_EQ(p.code, 2) << p.out;
  EXPECT_NE(p.out.find("--force"), std::string::npos) << p.out;
  std::ofstream(in) << jsonl({"the"});
  p = sh(cmd + " --force", "", true);
  ASSERT_EQ(p.code, 0) << p.out;
  expect_dataset(out, {"the"});
  const std::string other = scratch("not_a_dataset");
  fs::create_directories(other);
  std::ofstream(other + "/precious.txt") << "keep me";
  p = sh(data_cmd("prepare --tokenizer '" + tiny_dir() + "' --input '" + in + "' --out '" + other + "' --force"), "",
         true);
  EXPECT_EQ(p.code, 2) << p.out;
  EXPECT_EQ(slurp(other + "/precious.txt"), "keep me");
}

TEST(DataPrepare, KilledPrepareLeavesNothingUnderTheFinalName) {
  // Enough text that the prepare is still writing when it is killed (about 24 MB).
  const std::string in = scratch("big.jsonl");
  {
    std::ofstream f(in);
    std::string line = nlohmann::json{{"text", std::string(2000, 'x') + " the thin theory in the thing"}}.dump() + "\n";
    for (int i = 0; i < 12000; ++i) f << line;
  }
  const std::string out = scratch("ds_killed");
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    execl(ULYSSES_DATA_EXE, ULYSSES_DATA_EXE, "prepare", "--tokenizer", tiny_dir().c_str(), "--input", in.c_str(),
          "--out", out.c_str(), "--threads", "1", "--quiet", static_cast<char*>(nullptr));
    _exit(127);
  }
  // Kill it once tokens.bin in its partial folder has grown.
  bool writing = false;
  for (int i = 0; i < 3000 && !writing; ++i) {
    for (const auto& e : fs::directory_iterator(fs::path(out).parent_path())) {
      if (e.path().filename().string().rfind("ds_killed.partial-", 0) != 0) continue;
      std::error_code ec;
      writing = fs::file_size(e.path() / "tokens.bin", ec) > 0 && !ec;
    }
    if (!writing) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  ::kill(pid, SIGKILL);
  int st = 0;
  ::waitpid(pid, &st, 0);
  ASSERT_TRUE(writing) << "the prepare never started writing";
  ASSERT_TRUE(WIFSIGNALED(st))
      << "the prepare finished before it was killed: the test proves nothing; make the input larger";
  EXPECT_FALSE(fs::exists(out)) << "a killed prepare left " << out;
}

TEST(DataTokenize, PrintsIdsPerLineAsJsonArrays) {
  const std::string in = scratch("lines.txt");
  std::ofstream(in) << "the thin\nin<|endoftext|>\n";
  auto p = sh(data_cmd("tokenize --tokenizer '" + tiny_dir() + "/tokenizer.json' --lines '" + in + "'"));
  ASSERT_EQ(p.code, 0);
  // "the thin": GPT-2's split gives "the" (257) and " thin" -> " " + "th" + "in" (32 256 259).
  EXPECT_EQ(p.out, "[257,32,256,259]\n[259,260]\n");
  p = sh("printf 'the' | " + data_cmd("tokenize --framed --tokenizer '" + tiny_dir() + "'"));
  ASSERT_EQ(p.code, 0);
  EXPECT_EQ(p.out, "[261,257,260]\n");
  p = sh("printf '[257,32,256,259]\\n' | " + data_cmd("decode --tokenizer '" + tiny_dir() + "'"));
  EXPECT_EQ(p.out, "the thin\n");
  // The front door: `./ulysses data ...` runs this program.
  p = sh("printf 'the' | ULYSSES_BUILD_DIR='" ULYSSES_BINARY_DIR "' '" ULYSSES_SOURCE_DIR
         "/ulysses' data tokenize --tokenizer '" +
         tiny_dir() + "'");
  EXPECT_EQ(p.code, 0);
  EXPECT_EQ(p.out, "[257]\n");
}

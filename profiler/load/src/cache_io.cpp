// The trace caches' codec and file framing (cache_io.hpp): the key of a cache's inputs, reading
// and writing a cache file, and the switch that turns every trace cache off. The load room
// (profiler/README.md): the loader's rank-file caches use it, and so do the summary and
// overview caches above it.
#include "ulysses/profiler/cache_io.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>

#include "ulysses/common/atomic_file.hpp"
#include "ulysses/profiler/trace_cache_key.hpp"

namespace ulysses::prof {

namespace fs = std::filesystem;

bool summary_cache_disabled_by_env() {
  const char* v = std::getenv("ULYSSES_TRACE_NO_CACHE");
  return v && *v && std::strcmp(v, "0") != 0;
}

namespace cache_io {

int64_t now_realtime_ns() {
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1'000'000'000LL + ts.tv_nsec;
}

namespace {
// One file's identity in the key; *mtime_ns gets its mtime (-1 when absent). A -wal file
// without frames (empty) holds nothing and counts as absent: SQLite's read-only connections
// create one beside a file that has none, and that must not change the key.
std::string file_identity(const std::string& path, int64_t* mtime_ns, bool empty_is_absent = false) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0 || (empty_is_absent && st.st_size == 0)) {
    *mtime_ns = -1;
    return "absent";
  }
  *mtime_ns = static_cast<int64_t>(st.st_mtim.tv_sec) * 1'000'000'000LL + st.st_mtim.tv_nsec;
  return "size=" + std::to_string(st.st_size) + " mtime_ns=" + std::to_string(*mtime_ns) +
         " ino=" + std::to_string(st.st_ino);
}
}  // namespace

std::string make_key(const std::vector<std::string>& files, const LoadOptions& lo, uint32_t format,
                     const std::string& options, bool lanes_matter, int64_t* newest_ns) {
  std::string k = "format=" + std::to_string(format) + "\nbuild=" + profiler_build_id() +
                  "\nhead_lanes=" + (lanes_matter ? std::to_string(lo.head_lanes) : "any") +
                  " gpu_activity=" + std::to_string(lo.gpu_activity) +
                  " align_clocks=" + std::to_string(lo.align_clocks) + "\n" + options;
  *newest_ns = -1;
  for (const auto& f : files) {
    int64_t t1 = -1, t2 = -1;
    k += "file=" + fs::path(f).filename().string() + " " + file_identity(f, &t1) + " wal " +
         file_identity(f + "-wal", &t2, true) + "\n";
    *newest_ns = std::max(*newest_ns, std::max(t1, t2));
  }
  return k;
}

bool read_file(const std::string& path, const char (&magic)[8], uint32_t format, const std::string& key,
               std::string* payload) {
  try {
    // O_NONBLOCK: a FIFO in the cache's place opens at once (and is no cache) instead of
    // blocking until a writer comes; regular files ignore the flag.
    const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) return false;
    std::FILE* fp = ::fdopen(fd, "rb");
    if (!fp) {
      ::close(fd);
      return false;
    }
    struct stat st {};
    std::string bytes;
    if (::fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_size > 0) {
      bytes.resize(static_cast<size_t>(st.st_size));
      bytes.resize(std::fread(bytes.data(), 1, bytes.size(), fp));
    }
    std::fclose(fp);
    if (bytes.size() < 8 + 4 + 16 || std::memcmp(bytes.data(), magic, 8) != 0) return false;
    In head(bytes.data() + 8, bytes.size() - 8);
    if (head.u() != format) return false;
    if (head.s() != key) return false;
    const uint64_t size = head.u(), sum = head.u();
    // The payload is the rest of the file, exactly.
    const size_t header = static_cast<size_t>(head.pos() - bytes.data());
    if (size != bytes.size() - header || checksum(bytes.data() + header, static_cast<size_t>(size)) != sum)
      return false;
    payload->assign(bytes, header, static_cast<size_t>(size));
    return true;
  } catch (...) {  // a header that cannot be decoded, or no memory for it: no cache
    return false;
  }
}

bool write_file(const std::string& path, const char (&magic)[8], uint32_t format, const std::string& key,
                const std::string& payload) {
  Out o;
  o.b.append(magic, 8);
  o.u(format);
  o.s(key);
  o.u(payload.size());
  o.u(checksum(payload.data(), payload.size()));
  try {  // temp file per writer + rename, as every output (atomic_file.hpp): never a torn cache;
         // not fsync'ed (a cache lost in a crash is rebuilt)
    write_file_atomically(
        path,
        [&](std::ostream& f) {
          f.write(o.b.data(), static_cast<std::streamsize>(o.b.size()));
          f.write(payload.data(), static_cast<std::streamsize>(payload.size()));
        },
        AtomicWrite{false, 0644});
    return true;
  } catch (const std::exception&) {  // a folder that cannot be written: no cache, as before
    return false;
  }
}

}  // namespace cache_io

}  // namespace ulysses::prof

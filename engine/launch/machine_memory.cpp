// Memory a run may count on before launch (machine_memory.hpp).
#include "machine_memory.hpp"

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <fstream>
#include <iterator>
#include <limits>
#include <thread>

namespace ulysses::launch {

namespace {
// The leading decimal number of `s` (after blanks), or -1 when there is none or it overflows.
int64_t leading_number(const std::string& s, size_t at) {
  while (at < s.size() && (s[at] == ' ' || s[at] == '\t')) ++at;
  if (at >= s.size() || !std::isdigit(static_cast<unsigned char>(s[at]))) return -1;
  int64_t v = 0;
  for (; at < s.size() && std::isdigit(static_cast<unsigned char>(s[at])); ++at) {
    const int d = s[at] - '0';
    if (v > (std::numeric_limits<int64_t>::max() - d) / 10) return -1;
    v = v * 10 + d;
  }
  return v;
}

// The value of the line "KEY VALUE" (or "KEY: VALUE ...") at the start of a line, or -1.
int64_t field(const std::string& text, const std::string& key) {
  for (size_t at = 0; at < text.size();) {
    const size_t nl = text.find('\n', at);
    const size_t end = nl == std::string::npos ? text.size() : nl;
    if (text.compare(at, key.size(), key) == 0) return leading_number(text.substr(at, end - at), key.size());
    at = end + 1;
  }
  return -1;
}
}  // namespace

int64_t available_memory_bytes(const std::string& meminfo, const std::string& cgroup_max,
                               const std::string& cgroup_current, const std::string& cgroup_stat, int64_t physical) {
  int64_t bytes = physical > 0 ? physical : 0;
  const int64_t kib = field(meminfo, "MemAvailable:");  // "MemAvailable:   12345678 kB"
  if (kib >= 0 && kib <= std::numeric_limits<int64_t>::max() / 1024) bytes = kib * 1024;
  const int64_t limit = leading_number(cgroup_max, 0);  // "max" (no limit) reads as -1
  if (limit > 0) {
    const int64_t used = std::max<int64_t>(0, leading_number(cgroup_current, 0));
    const int64_t cache = std::max<int64_t>(0, field(cgroup_stat, "inactive_file "));
    const int64_t left = std::max<int64_t>(0, limit - std::max<int64_t>(0, used - cache));
    if (bytes == 0 || left < bytes) bytes = left;
  }
  return bytes;
}

int64_t machine_memory_bytes() {
  const long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGESIZE);
  const int64_t physical = pages > 0 && page > 0 ? static_cast<int64_t>(pages) * page : 0;
  auto slurp = [](const char* path) {
    std::ifstream f(path);
    std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    return text.substr(0, 1 << 16);
  };
  return available_memory_bytes(slurp("/proc/meminfo"), slurp("/sys/fs/cgroup/memory.max"),
                                slurp("/sys/fs/cgroup/memory.current"), slurp("/sys/fs/cgroup/memory.stat"), physical);
}

int64_t usable_cores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (::sched_getaffinity(0, sizeof set, &set) == 0) return std::max(1, CPU_COUNT(&set));
  return std::max(1u, std::thread::hardware_concurrency());
}

}  // namespace ulysses::launch

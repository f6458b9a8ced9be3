// ulysses-run's lines on stderr (run_output.hpp).
#include "run_output.hpp"

#include <cstdio>

namespace ulysses::launch {

void err_line(const std::string& s) {
  const std::string line = s + "\n";
  std::fwrite(line.data(), 1, line.size(), stderr);
  std::fflush(stderr);
}

void say(const std::string& s) { err_line("ulysses-run: " + s); }

void say_each_line(const std::string& msg) {
  size_t start = 0;
  while (start <= msg.size()) {
    const size_t nl = msg.find('\n', start);
    const std::string line = msg.substr(start, nl == std::string::npos ? std::string::npos : nl - start);
    if (!line.empty()) say(line);
    if (nl == std::string::npos) break;
    start = nl + 1;
  }
}

}  // namespace ulysses::launch

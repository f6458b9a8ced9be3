// Fuzzes the run config loader and the --set parser: the input is a config file, then a NUL
// byte, then --set assignments one per line. load_run_config + validate may only raise
// ConfigError (bad input: exit 2), never another exception, a crash or a sanitizer report.
#include <cstdint>
#include <string>
#include <vector>

#include "fuzz_util.hpp"
#include "run_config.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace ulysses;
  const std::string all(reinterpret_cast<const char*>(data), size);
  const size_t nul = all.find('\0');
  const std::string file = all.substr(0, nul);
  std::vector<std::string> sets;
  if (nul != std::string::npos) {
    size_t i = nul + 1;
    while (i <= all.size() && sets.size() < 16) {
      const size_t nl = all.find('\n', i);
      sets.push_back(all.substr(i, nl == std::string::npos ? std::string::npos : nl - i));
      if (nl == std::string::npos) break;
      i = nl + 1;
    }
  }
  const std::string path = fuzz::as_file(reinterpret_cast<const uint8_t*>(file.data()), file.size(), ".json");
  try {
    RunConfig cfg = load_run_config(path, sets);
    (void)validate(cfg);
    (void)cfg.to_json().dump();
  } catch (const ConfigError&) {
  }
  return 0;
}

// torchrun's variables, read and checked (dist_env.hpp).
#include "dist_env.hpp"

#include <netdb.h>
#include <sys/socket.h>

#include <cctype>
#include <cerrno>
#include <cstdint>
#include <cstdlib>

#include "run_config.hpp"

namespace ulysses {

namespace {
int env_int(const char* name, int fallback) {
  const char* v = std::getenv(name);
  if (!v || !*v) return fallback;
  char* end = nullptr;
  errno = 0;
  // Digits only: " 1" and "+1" were read as 1 (strtoll skips blanks and takes a sign).
  if (!std::isdigit(static_cast<unsigned char>(v[0])))
    throw ConfigError(std::string("environment variable ") + name + "='" + v +
                      "' is not an integer from 0 to 2147483647");
  const long long x = std::strtoll(v, &end, 10);
  // Within int: RANK=2147483648 ran as rank -2147483648, 4294967297 as rank 1.
  if (*end != '\0' || x < 0 || errno == ERANGE || x > INT32_MAX)
    throw ConfigError(std::string("environment variable ") + name + "='" + v +
                      "' is not an integer from 0 to 2147483647");
  return static_cast<int>(x);
}
}  // namespace

DistEnv DistEnv::from_environment() {
  DistEnv e;
  e.rank = env_int("RANK", 0);
  e.world_size = env_int("WORLD_SIZE", 1);
  // Several ranks need each to say which it is: a missing or empty RANK was read as rank 0, and
  // the worker waited out the timeout for the rank 0 already there.
  if (e.world_size > 1 && !(std::getenv("RANK") && *std::getenv("RANK")))
    throw ConfigError(
        "WORLD_SIZE is " + std::to_string(e.world_size) +
        " but RANK is not set: give each worker its rank (torchrun and Slurm set RANK; ulysses-run does it "
        "for you)");
  e.local_rank = env_int("LOCAL_RANK", e.rank);
  e.local_world_size = env_int("LOCAL_WORLD_SIZE", e.world_size);
  if (const char* a = std::getenv("MASTER_ADDR"); a && *a) e.master_addr = a;
  e.master_port = env_int("MASTER_PORT", 29500);
  e.single_rank_groups = env_int("ULYSSES_SINGLE_RANK_GROUPS", 0) != 0;
  if (e.world_size < 1) throw ConfigError("WORLD_SIZE must be at least 1");
  if (e.rank >= e.world_size)
    throw ConfigError("RANK (" + std::to_string(e.rank) + ") must be smaller than WORLD_SIZE (" +
                      std::to_string(e.world_size) + ")");
  if (e.master_port <= 0 || e.master_port > 65535) throw ConfigError("MASTER_PORT must be a TCP port");
  // A name no resolver knows: said at once (c10d retried it once a second for timeout_s, a
  // warning each time). A resolver that is down for now (EAI_AGAIN) is left to c10d's retries.
  if (e.world_size > 1) {
    addrinfo hints{};
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* res = nullptr;
    const int rc = ::getaddrinfo(e.master_addr.c_str(), nullptr, &hints, &res);
    if (res) ::freeaddrinfo(res);
    if (rc == EAI_NONAME)
      throw ConfigError("MASTER_ADDR '" + e.master_addr + "' is not a host name or address this machine can resolve");
  }
  return e;
}

}  // namespace ulysses

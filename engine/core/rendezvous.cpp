// Rendezvous stores: a FileStore for local runs, a probed TCPStore otherwise (rendezvous.hpp).
#include "rendezvous.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <thread>

#include <torch/csrc/distributed/c10d/FileStore.hpp>

#include "run_config.hpp"
#include "store_probe.hpp"

namespace ulysses {

namespace {
using Clock = std::chrono::steady_clock;

// c10d's FileStore polls for a key every 10 ms, which makes the clock ping-pong through the
// store (Comm::sync_clock) 20 ms a round trip and the ranks' clock offsets +-10 ms. This one
// looks again after 50 us, doubling to 2 ms, and ends at the store's timeout with a message.
class PollingFileStore final : public c10d::FileStore {
 public:
  PollingFileStore(const std::string& path, int world) : c10d::FileStore(path, world) {}

  std::vector<uint8_t> get(const std::string& key) override {
    wait_for({key}, timeout_);
    return c10d::FileStore::get(key);
  }
  void wait(const std::vector<std::string>& keys) override { wait_for(keys, timeout_); }
  void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) override {
    wait_for(keys, timeout);
  }

 private:
  void wait_for(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) {
    const auto t0 = Clock::now();
    auto pause = std::chrono::microseconds(50);
    while (!c10d::FileStore::check(keys)) {
      if (timeout.count() > 0 && Clock::now() - t0 > timeout)
        throw std::runtime_error("Timed out waiting for rendezvous key '" + (keys.empty() ? "" : keys.front()) +
                                 "' after " + std::to_string(timeout.count()) + " ms (parallel.timeout_s) in " +
                                 getPath());
      std::this_thread::sleep_for(pause);
      pause = std::min(pause * 2, std::chrono::microseconds(2000));
    }
  }
};

c10::intrusive_ptr<c10d::Store> file_store(const std::string& dir, int world, std::chrono::milliseconds timeout) {
  struct stat st {};
  if (::lstat(dir.c_str(), &st) != 0)
    throw ConfigError(std::string(launch::kRendezvousDirEnv) + "=" + dir + ": " + std::strerror(errno));
  if (!S_ISDIR(st.st_mode) || st.st_uid != ::geteuid() || (st.st_mode & 077) != 0)
    throw ConfigError(std::string(launch::kRendezvousDirEnv) + "=" + dir +
                      " must be a folder of this user that no one else can enter (mode 0700): the run's "
                      "rendezvous is there");
  auto s = c10::make_intrusive<PollingFileStore>(dir + "/store", world);
  s->setTimeout(timeout);
  return s;
}

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }
}  // namespace

c10::intrusive_ptr<c10d::Store> make_rendezvous_store(const DistEnv& env, std::chrono::milliseconds timeout) {
  if (const char* dir = std::getenv(launch::kRendezvousDirEnv); dir && *dir)
    return file_store(dir, env.world_size, timeout);

  const auto w = compat::tcp_store_wire();
  const launch::StoreWire wire{w.set, w.get, w.validate, w.magic};
  const auto t0 = Clock::now();
  const std::string where = env.master_addr + ":" + std::to_string(env.master_port);
  // torchrun 2.x hands its workers the agent's own store (TORCHELASTIC_USE_AGENT_STORE=True):
  // MASTER_PORT is already served, every worker connects as a client, and the workers' keys
  // live under /worker/attempt_<restart count>, as torch.distributed's env:// rendezvous does.
  const char* agent = std::getenv("TORCHELASTIC_USE_AGENT_STORE");
  if (agent && std::string(agent) == "True") {
    const auto probe = launch::probe_store(env.master_addr, env.master_port, wire, t0 + timeout, true);
    if (probe.answer != launch::StoreAnswer::Store)
      throw ConfigError(launch::foreign_store_message(env.master_addr, env.master_port, probe, seconds_since(t0)) +
                        " (torchrun said its agent's store is there: TORCHELASTIC_USE_AGENT_STORE=True)");
    const char* attempt = std::getenv("TORCHELASTIC_RESTART_COUNT");
    return compat::prefix_store(
        std::string("/worker/attempt_") + (attempt && *attempt ? attempt : "0"),
        compat::tcp_store(env.master_addr, static_cast<uint16_t>(env.master_port), false, env.world_size, timeout));
  }
  if (env.rank == 0) {
    // Rank 0's store does not exist yet: whatever answers on the port now is someone else's.
    const auto probe = launch::probe_store(env.master_addr, env.master_port, wire,
                                           t0 + std::min(timeout, std::chrono::milliseconds(2000)), false);
    if (probe.answer == launch::StoreAnswer::Store)
      throw ConfigError(where + " already holds a c10d store before rank 0 made its own: another run's rank 0, or a " +
                        "second RANK 0 of this run; pick a free MASTER_PORT");
    if (probe.answer != launch::StoreAnswer::Nothing)
      throw ConfigError(launch::foreign_store_message(env.master_addr, env.master_port, probe, seconds_since(t0)));
    try {
      return compat::tcp_store(env.master_addr, static_cast<uint16_t>(env.master_port), true, env.world_size, timeout);
    } catch (const std::exception& e) {
      const std::string what = e.what();
      if (what.find("in use") != std::string::npos || what.find("EADDRINUSE") != std::string::npos)
        throw ConfigError("MASTER_PORT " + std::to_string(env.master_port) +
                          " is taken on this machine by another program; pick a free MASTER_PORT");
      throw;
    }
  }
  const auto probe = launch::probe_store(env.master_addr, env.master_port, wire, t0 + timeout, true);
  if (probe.answer == launch::StoreAnswer::Nothing)
    throw std::runtime_error(launch::foreign_store_message(env.master_addr, env.master_port, probe, seconds_since(t0)));
  if (probe.answer != launch::StoreAnswer::Store)
    throw ConfigError(launch::foreign_store_message(env.master_addr, env.master_port, probe, seconds_since(t0)));
  // The store's timeout also bounds every later get (the groups' connections, the clock sync).
  return compat::tcp_store(env.master_addr, static_cast<uint16_t>(env.master_port), false, env.world_size, timeout);
}

}  // namespace ulysses

// Rendezvous stores: a FileStore for local runs, a probed TCPStore otherwise (rendezvous_store.hpp).
#include "rendezvous_store.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <thread>

#include <torch/csrc/distributed/c10d/FileStore.hpp>

#include "listen_address.hpp"
#include "run_config.hpp"
#include "store_probe.hpp"

namespace ulysses {

namespace {
using Clock = std::chrono::steady_clock;

// c10d's FileStore polls for a key every 10 ms, which makes the clock ping-pong through the
// store (Comm::sync_clock) 20 ms a round trip and the ranks' clock offsets +-10 ms. This one
// looks again after 50 us, doubling to 2 ms, and ends at the store's timeout with a message.
//
// Every operation first checks the bytes other processes appended to the store's file since
// the last look (under the shared lock c10d's readers take, so no write is half done): the file
// is a sequence of (4-byte length, bytes) strings, key then value (c10d's File::write). c10d reads a length past the
// end of the file by calling read() until it has the bytes, which at end of file is forever (both
// workers at 99% CPU for 10+ minutes after random bytes were appended): refused here instead.
class PollingFileStore final : public c10d::FileStore {
 public:
  PollingFileStore(const std::string& path, int world) : c10d::FileStore(path, world), file_(path) {}

  std::vector<uint8_t> get(const std::string& key) override {
    wait_for({key}, timeout_);
    return c10d::FileStore::get(key);
  }
  void set(const std::string& key, const std::vector<uint8_t>& value) override {
    check_file();
    c10d::FileStore::set(key, value);
  }
  int64_t add(const std::string& key, int64_t value) override {
    check_file();
    return c10d::FileStore::add(key, value);
  }
  bool check(const std::vector<std::string>& keys) override {
    check_file();
    return c10d::FileStore::check(keys);
  }
  int64_t getNumKeys() override {
    check_file();
    return c10d::FileStore::getNumKeys();
  }
  void wait(const std::vector<std::string>& keys) override { wait_for(keys, timeout_); }
  void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) override {
    wait_for(keys, timeout);
  }

 private:
  // Throws naming the file when its records from checked_ on do not fit it.
  void check_file() {
    const int fd = ::open(file_.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return;  // not there yet, or gone at the end of the run: c10d says so itself
    struct Closer {
      int fd;
      ~Closer() { ::close(fd); }
    } closer{fd};
    while (::flock(fd, LOCK_SH) != 0)
      if (errno != EINTR) return;
    struct stat st {};
    if (::fstat(fd, &st) != 0) return;
    const uint64_t size = static_cast<uint64_t>(st.st_size);
    if (size < checked_) checked_ = 0, strings_ = 0;  // a new file under the same name
    uint64_t at = checked_;
    while (at < size) {
      uint32_t len = 0;
      if (size - at < sizeof len ||
          ::pread(fd, &len, sizeof len, static_cast<off_t>(at)) != static_cast<ssize_t>(sizeof len) ||
          len > size - at - sizeof len)
        corrupt("the record at byte " + std::to_string(at) + " claims " + std::to_string(len) +
                " bytes, the file has " + std::to_string(size));
      at += sizeof len + len;
      ++strings_;
    }
    if (strings_ % 2 != 0) corrupt("it ends with a key and no value");
    checked_ = at;
  }

  // The file is moved aside first: c10d's own destructor reads it too (and would spin there).
  [[noreturn]] void corrupt(const std::string& what) {
    const std::string aside = file_ + ".corrupt";
    const bool moved = ::rename(file_.c_str(), aside.c_str()) == 0;
    throw std::runtime_error("the run's rendezvous store " + file_ + " is corrupt: " + what +
                             " (something other than this run's ranks wrote into it" +
                             (moved ? "; kept as " + aside : std::string()) +
                             "); stopping instead of reading past its end forever");
  }

  void wait_for(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) {
    const auto t0 = Clock::now();
    auto pause = std::chrono::microseconds(50);
    while (!check(keys)) {
      if (timeout.count() > 0 && Clock::now() - t0 > timeout)
        throw std::runtime_error("Timed out waiting for rendezvous key '" + (keys.empty() ? "" : keys.front()) +
                                 "' after " + std::to_string(timeout.count()) + " ms (parallel.timeout_s) in " +
                                 getPath());
      std::this_thread::sleep_for(pause);
      pause = std::min(pause * 2, std::chrono::microseconds(2000));
    }
  }

  std::string file_;
  uint64_t checked_ = 0;  // bytes of whole records already checked
  uint64_t strings_ = 0;  // length-prefixed strings in them (keys and values alternate)
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
    // Listening where MASTER_ADDR says (loopback for 127.0.0.0/8 and ::1), not on every interface.
    std::string why;
    const auto listen_on = store_listen_address(env.master_addr, env.master_port, &why);
    if (!why.empty()) std::fprintf(stderr, "rendezvous: %s\n", why.c_str());
    try {
      return compat::tcp_store(env.master_addr, static_cast<uint16_t>(env.master_port), true, env.world_size, timeout,
                               listen_on ? &*listen_on : nullptr);
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

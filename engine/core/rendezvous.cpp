// Rendezvous stores: a FileStore for local runs, a probed TCPStore otherwise (rendezvous.hpp).
#include "rendezvous.hpp"

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

#include "json_checked.hpp"
#include "listen_address.hpp"
#include "run_config.hpp"
#include "xxh64.hpp"
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

namespace {
// The config's leaves ("model.hidden_size" -> 64), in key order.
void config_leaves(const json& j, const std::string& prefix, std::vector<std::pair<std::string, std::string>>& out) {
  if (j.is_object() && !j.empty()) {
    for (auto it = j.begin(); it != j.end(); ++it)
      config_leaves(it.value(), prefix.empty() ? it.key() : prefix + "." + it.key(), out);
    return;
  }
  out.emplace_back(prefix, j.dump(-1, ' ', false, json::error_handler_t::replace));
}

// Rank 0's values of `v` on every rank (collective): the others give -1, the maximum is rank 0's.
std::vector<int64_t> rank0_values(Comm& comm, std::vector<int64_t> v) {
  if (comm.rank() != 0) std::fill(v.begin(), v.end(), -1);
  auto t = torch::tensor(v, torch::kInt64).to(comm.device());  // (n,)
  comm.all_reduce_max(t);
  t = t.cpu().contiguous();
  return std::vector<int64_t>(t.data_ptr<int64_t>(), t.data_ptr<int64_t>() + t.numel());
}
}  // namespace

void check_same_config(Comm& comm, const RunConfig& cfg, const std::string& run_identity) {
  if (comm.world_size() <= 1) return;
  std::vector<std::pair<std::string, std::string>> leaves;
  config_leaves(cfg.to_json(), "", leaves);
  leaves.emplace_back("the run's identity", run_identity);
  // Each leaf's hash (key and value), 62 bits; the count first, so that a build with other keys
  // never reaches a reduction of another length (which would end inside Gloo).
  std::vector<int64_t> mine{static_cast<int64_t>(leaves.size())};
  for (const auto& [k, v] : leaves) {
    const std::string kv = k + "=" + v;
    mine.push_back(static_cast<int64_t>(xxh64(kv.data(), kv.size()) >> 2));
  }
  const int64_t n0 = rank0_values(comm, {mine[0]})[0];
  // Every rank must learn of a difference any rank sees, or the others wait in the next
  // collective: the verdict is reduced too (1 = this rank differs).
  auto any_differs = [&](bool differs) {
    auto t = torch::tensor({static_cast<int64_t>(differs)}, torch::kInt64).to(comm.device());
    comm.all_reduce_max(t);
    return t.cpu().item<int64_t>() != 0;
  };
  if (any_differs(n0 != mine[0])) {
    if (n0 != mine[0])
      throw ConfigError("rank " + std::to_string(comm.rank()) + " and rank 0 were started with different builds (" +
                        std::to_string(mine[0]) + " config keys here, " + std::to_string(n0) +
                        " on rank 0): start every rank with the same ulysses-worker");
    throw ConfigError("another rank was started with a different build or config than rank 0; see its message");
  }
  const std::vector<int64_t> ref = rank0_values(comm, mine);
  int64_t first = INT64_MAX;  // this rank's first leaf that differs from rank 0's
  for (size_t i = 1; i < mine.size() && first == INT64_MAX; ++i)
    if (ref[i] != mine[i]) first = static_cast<int64_t>(i) - 1;
  // The first differing leaf over all ranks (max of -index), then rank 0's value of it.
  auto t = torch::tensor({-first}, torch::kInt64).to(comm.device());
  comm.all_reduce_max(t);
  const int64_t any = -t.cpu().item<int64_t>();
  if (any == INT64_MAX) return;
  const auto& [key, value] = leaves[static_cast<size_t>(any)];
  std::vector<int64_t> bytes(200, 0);  // rank 0's value, cut at 200 bytes
  for (size_t i = 0; i < value.size() && i < bytes.size(); ++i) bytes[i] = static_cast<unsigned char>(value[i]);
  std::string theirs;
  for (int64_t b : rank0_values(comm, bytes))
    if (b > 0) theirs.push_back(static_cast<char>(b));
  throw ConfigError(
      "the ranks do not belong to one run: " + key + " is " + json_for_message(json(theirs)) + " on rank 0" +
      (comm.rank() == 0 ? std::string(" (rank 0 speaking)")
                        : ", " + json_for_message(json(value)) + " on rank " + std::to_string(comm.rank())) +
      "; every rank of a run needs the same config file, --set options and --out (two runs sharing "
      "one MASTER_ADDR:MASTER_PORT look like this; give each run its own port)");
}

}  // namespace ulysses

// Stand-in for ulysses-worker, used only by test_launch: speaks the worker contract of
// docs/CONTRACTS.md (torchrun environment, --config RUN/config.json --out RUN, METRIC lines
// on rank 0's stdout, metrics.jsonl, human lines on stderr) without torch. Ranks meet over
// MASTER_ADDR:MASTER_PORT like c10d's TCPStore (rank 0 listens, the others connect), so a
// wrong environment or a busy port fails the run, and end each step with a barrier. Behaviour from the environment:
//   FAKE_MODE        ok (default) | fail | crash | stop | freeze | hang | ignore_term
//                    (stop: the failing rank SIGSTOPs itself; freeze: it blocks silently, running)
//   FAKE_TIMEOUT_MS  a barrier waits at most this long, then the rank exits 1 "timed out"
//                    (as a collective's timeout does); 0 = forever (default)
//   FAKE_PEER_EXIT   1: a rank whose peer vanished exits 1 at once instead of blocking
//   FAKE_FILL        1: rank 0 fills the disk of --out (writes RUN/fill.bin until a write fails)
//   FAKE_FAIL_RANK   rank that fails in fail/crash mode (default 1)
//   FAKE_FAIL_CODE   its exit code in fail mode (default 1; 2 = bad input)
//   FAKE_FAIL_STEP   step at which it fails; the other ranks block there (default 2)
//   FAKE_STEP_MS     sleep per step (default 5)
//   FAKE_GRANDCHILD  1: every rank forks a sleeping child first (tests group kills)
//   FAKE_MAX_S       safety: SIGALRM after this many seconds (default 30)
//   FAKE_NO_HEARTBEAT 1: no heartbeat (a worker that predates ULYSSES_HEARTBEAT_FD)
// Heartbeats and the fault hook (ULYSSES_FAULT) come from the real worker's Heartbeat
// (engine/launch/heartbeat.hpp): init, rendezvous, build, step k, finish.
// Each rank records what it saw in RUN/fake/rank{r}.json (pid, environment, arguments).
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "heartbeat.hpp"
#include "line_appender.hpp"

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

std::string env_or(const char* name, const std::string& fallback) {
  const char* v = std::getenv(name);
  return v && *v ? v : fallback;
}

[[noreturn]] void die(const std::string& msg, int code = 1) {
  std::cerr << "fake_worker: " << msg << std::endl;
  std::exit(code);
}

[[noreturn]] void block_forever() {
  for (;;) ::pause();
}

// TCPStore-like rendezvous: rank 0 accepts world-1 connections, the others connect. The
// connections stay open and carry barrier(), which stands in for the collectives.
std::vector<int> g_peers;  // rank 0: one socket per other rank; others: the socket to rank 0

void rendezvous(int rank, int world, const std::string& addr, int port) {
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(static_cast<uint16_t>(port));
  if (inet_pton(AF_INET, addr.c_str(), &sa.sin_addr) != 1) die("MASTER_ADDR '" + addr + "' is not an IPv4 address");
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  if (rank == 0) {
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    if (::bind(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0)
      die("rank 0 cannot bind " + addr + ":" + std::to_string(port) + ": " + std::strerror(errno));
    ::listen(fd, 64);
    while (static_cast<int>(g_peers.size()) < world - 1) {
      pollfd p{fd, POLLIN, 0};
      if (std::chrono::steady_clock::now() > deadline) die("rank 0: rendezvous timed out");
      if (::poll(&p, 1, 100) == 1) {
        const int c = ::accept(fd, nullptr, nullptr);
        if (c >= 0) g_peers.push_back(c);
      }
    }
    ::close(fd);
    return;
  }
  for (;;) {
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    if (::connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) == 0) {
      g_peers.push_back(fd);
      return;
    }
    ::close(fd);
    if (std::chrono::steady_clock::now() > deadline)
      die("rank " + std::to_string(rank) + ": cannot reach rank 0 at " + addr + ":" + std::to_string(port));
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

// Every rank waits for every other. A peer that died leaves the others blocked here, as a
// real collective would until its timeout.
int g_timeout_ms = 0;
bool g_peer_exit = false;

void barrier(int rank) {
  char b = 1;
  auto lost = [&](const char* what) {
    if (g_peer_exit) die("rank " + std::to_string(rank) + ": " + what + ": a peer closed the connection");
    block_forever();
  };
  auto recv1 = [&](int fd) {
    if (g_timeout_ms > 0) {
      pollfd p{fd, POLLIN, 0};
      int n;
      do n = ::poll(&p, 1, g_timeout_ms);
      while (n < 0 && errno == EINTR);
      if (n == 0)
        die("rank " + std::to_string(rank) + ": collective timed out after " + std::to_string(g_timeout_ms) + " ms");
    }
    if (::recv(fd, &b, 1, MSG_WAITALL) != 1) lost("recv");
  };
  auto send1 = [&](int fd) {
    if (::send(fd, &b, 1, MSG_NOSIGNAL) != 1) lost("send");
  };
  if (rank == 0) {
    for (int fd : g_peers) recv1(fd);
    for (int fd : g_peers) send1(fd);
  } else {
    send1(g_peers[0]);
    recv1(g_peers[0]);
  }
}

}  // namespace

int main(int argc, char** argv) {
  std::string config_path, out_dir;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--config")
      config_path = argv[i + 1];
    else if (a == "--out")
      out_dir = argv[i + 1];
    else
      die("unknown argument " + a, 2);
  }
  if (config_path.empty() || out_dir.empty()) die("usage: fake_worker --config RUN/config.json --out RUN", 2);
  ::alarm(static_cast<unsigned>(std::stoi(env_or("FAKE_MAX_S", "30"))));

  using ulysses::launch::Phase;
  ulysses::launch::Heartbeat heartbeat(
      env_or("FAKE_NO_HEARTBEAT", "0") == "1" ? -1 : ulysses::launch::Heartbeat::fd_from_environment(), 0.2);
  const int rank = std::stoi(env_or("RANK", "-1"));
  const int world = std::stoi(env_or("WORLD_SIZE", "0"));
  if (rank < 0 || world < 1 || rank >= world) die("RANK/WORLD_SIZE missing or inconsistent", 2);
  const std::string mode = env_or("FAKE_MODE", "ok");
  const int fail_rank = std::stoi(env_or("FAKE_FAIL_RANK", "1"));
  const int fail_code = std::stoi(env_or("FAKE_FAIL_CODE", "1"));
  const int fail_step = std::stoi(env_or("FAKE_FAIL_STEP", "2"));
  const int step_ms = std::stoi(env_or("FAKE_STEP_MS", "5"));
  if (mode == "ignore_term") std::signal(SIGTERM, SIG_IGN);
  g_timeout_ms = std::stoi(env_or("FAKE_TIMEOUT_MS", "0"));
  g_peer_exit = env_or("FAKE_PEER_EXIT", "0") == "1";

  long grandchild = 0;
  if (env_or("FAKE_GRANDCHILD", "0") == "1") {
    const pid_t c = ::fork();
    if (c == 0) {
      // Keep no pipe open: only the process group ties it to the worker.
      ::close(1);
      ::close(2);
      ::alarm(60);  // alarms are not inherited across fork
      block_forever();
    }
    grandchild = c;
  }

  std::ifstream cin_cfg(config_path);
  if (!cin_cfg) die("cannot open " + config_path, 2);
  const json cfg = json::parse(cin_cfg, nullptr, false);
  if (!cfg.is_object()) die(config_path + " is not JSON", 2);

  json seen;
  seen["pid"] = static_cast<long>(::getpid());
  seen["pgid"] = static_cast<long>(::getpgrp());
  seen["grandchild_pid"] = grandchild;
  seen["config"] = config_path;
  seen["out"] = out_dir;
  seen["cwd"] = fs::current_path().string();
  for (const char* k : {"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
                        "OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "OMP_WAIT_POLICY", "ULYSSES_TOKENS_CHECKED"})
    seen["env"][k] = env_or(k, "");
  fs::create_directories(fs::path(out_dir) / "fake");
  const fs::path seen_path = fs::path(out_dir) / "fake" / ("rank" + std::to_string(rank) + ".json");
  {
    std::ofstream o(seen_path.string() + ".tmp");
    o << seen.dump(2);
  }
  fs::rename(seen_path.string() + ".tmp", seen_path);

  heartbeat.set(Phase::Rendezvous);
  rendezvous(rank, world, env_or("MASTER_ADDR", ""), std::stoi(env_or("MASTER_PORT", "0")));
  heartbeat.set(Phase::Build);
  if (rank == 0) std::cout << "fake worker: " << world << " ranks met" << std::endl;
  std::cerr << "rank " << rank << ": mode " << mode << std::endl;
  if (mode == "hang" || mode == "ignore_term") {
    std::cerr << "rank " << rank << ": waiting forever" << std::endl;
    block_forever();
  }

  const int64_t steps = cfg["train"].value("steps", int64_t{10});
  const int64_t tokens = cfg["train"].value("seq_length", int64_t{256}) *
                         cfg["train"].value("micro_batch_size", int64_t{1}) *
                         cfg["parallel"].value("dp_size", int64_t{1});
  const auto t0 = std::chrono::steady_clock::now();
  if (rank == 0 && env_or("FAKE_FILL", "0") == "1") {
    std::ofstream fill(fs::path(out_dir) / "fill.bin", std::ios::binary);
    const std::string block(1 << 16, 'x');
    while (fill.write(block.data(), static_cast<std::streamsize>(block.size())) && fill.flush()) {
    }
    std::cerr << "rank 0: filled the disk" << std::endl;
  }
  ulysses::launch::LineAppender metrics;  // as the real worker: whole lines, a failed append named
  if (rank == 0) {
    std::signal(SIGXFSZ, SIG_IGN);
    if (const std::string why = metrics.open((fs::path(out_dir) / "metrics.jsonl").string()); !why.empty()) die(why);
  }
  for (int64_t s = 0; s < steps; ++s) {
    heartbeat.set(Phase::Step, s);
    if ((mode == "fail" || mode == "crash" || mode == "stop" || mode == "freeze") && s == fail_step) {
      if (rank != fail_rank) {
        if (g_timeout_ms > 0 || g_peer_exit) barrier(rank);  // waits for the failed rank, then times out / notices
        block_forever();                                     // stuck in a collective with the failed rank
      }
      std::cerr << "rank " << rank << ": simulated failure at step " << s << std::endl;
      if (mode == "crash") ::raise(SIGKILL);
      if (mode == "stop") {
        ::raise(SIGSTOP);
        block_forever();
      }
      if (mode == "freeze") block_forever();
      return fail_code;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(step_ms));
    std::cerr << "rank " << rank << ": step " << s << " done" << std::endl;
    if (rank != 0) {
      barrier(rank);  // after rank 0 printed this step's METRIC line
      continue;
    }
    const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    json m;
    m["step"] = s;
    m["steps"] = steps;
    m["loss"] = 6.0 / (1.0 + 0.25 * static_cast<double>(s));
    m["lr"] = 3e-3;
    m["grad_norm"] = 1.0 / (1.0 + static_cast<double>(s));
    m["tokens"] = tokens;
    m["tokens_per_s"] = tokens / (step_ms / 1000.0 + 1e-3);
    m["step_ms"] = step_ms;
    m["max_mem_bytes"] = 1 << 20;
    m["elapsed_s"] = elapsed;
    std::cout << "METRIC " << m.dump() << std::endl;
    if (const std::string why = metrics.append(m.dump(), "step " + std::to_string(s)); !why.empty()) die(why);
    barrier(rank);
  }
  heartbeat.set(Phase::Finish);
  return 0;
}

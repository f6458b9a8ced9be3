// Test helper: runs `world` ranks as threads of this process, each with its own c10d
// Gloo groups on a fresh loopback port, and rethrows the first failure.
#pragma once

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "comm.hpp"

namespace ulysses::testing {

inline int free_port() {
  int s = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = 0;
  ::bind(s, reinterpret_cast<sockaddr*>(&a), sizeof a);
  socklen_t len = sizeof a;
  ::getsockname(s, reinterpret_cast<sockaddr*>(&a), &len);
  ::close(s);
  return ntohs(a.sin_port);
}

inline void run_ranks(int world, const std::function<void(const DistEnv&)>& fn) {
  const int port = free_port();
  std::vector<std::thread> ts;
  std::mutex mu;
  std::exception_ptr err;
  for (int r = 0; r < world; ++r) {
    ts.emplace_back([&, r] {
      DistEnv e;
      e.rank = r;
      e.world_size = world;
      e.local_rank = r;
      e.local_world_size = world;
      e.master_port = port;
      try {
        fn(e);
      } catch (...) {
        std::lock_guard<std::mutex> g(mu);
        if (!err) err = std::current_exception();
      }
    });
  }
  for (auto& t : ts) t.join();
  if (err) std::rethrow_exception(err);
}

}  // namespace ulysses::testing

// Test helper: runs `world` ranks as threads of this process, each with its own c10d
// Gloo groups on a fresh loopback port, and rethrows the first failure.
#pragma once

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <exception>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "comm.hpp"
#include "trainer.hpp"

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

// One training run of cfg with every rank as a thread (Gloo, one intra-op thread each), as
// rank 0 sees it: step 0's loss and gradients before any update, then the losses of `steps`
// optimizer steps.
struct TrainResult {
  std::vector<double> losses;                // per step
  double loss0 = 0;                          // loss of step 0 before any update
  std::map<std::string, at::Tensor> grads0;  // gradients of step 0
};

inline TrainResult train_on_ranks(const RunConfig& cfg, int steps) {
  TrainResult res;
  std::mutex mu;
  run_ranks(static_cast<int>(cfg.parallel.world_size()), [&](const DistEnv& env) {
    at::set_num_threads(1);
    Comm comm(env, static_cast<int>(cfg.parallel.sp_size), static_cast<int>(cfg.parallel.dp_size), "gloo",
              std::chrono::milliseconds(60000), static_cast<int>(cfg.parallel.ring_size));
    Trainer tr(cfg, comm, nullptr);
    const double l0 = tr.loss_and_grads(0);
    std::map<std::string, at::Tensor> g;
    for (auto& [n, p] : tr.model().named_parameters()) g[n] = p.grad().clone();
    std::vector<double> losses;
    for (int s = 0; s < steps; ++s) losses.push_back(tr.step(s).loss);
    if (env.rank == 0) {
      std::lock_guard<std::mutex> lk(mu);
      res.loss0 = l0;
      res.grads0 = g;
      res.losses = losses;
    }
  });
  return res;
}

}  // namespace ulysses::testing

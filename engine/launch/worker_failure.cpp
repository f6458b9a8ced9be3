// ulysses-worker's failures and torch-free checks (worker_failure.hpp).
#include "worker_failure.hpp"

#include <cstdlib>
#include <filesystem>

#include "folder_claim.hpp"
#include "run_identity.hpp"
#include "ulysses/common/write_error.hpp"

namespace ulysses::launch {

std::string explain_worker_failure(const std::string& what, const FailureContext& c) {
  if (c.stopped) return "stopped by a signal while in a collective [" + what + "]";
  if (const std::string hint = ulysses::file_size_limit_hint(what); !hint.empty()) {
    const bool sqlite =
        what.find("disk I/O error") != std::string::npos || what.find("disk is full") != std::string::npos;
    return what + (sqlite && !c.trace_path.empty() ? " writing " + c.trace_path : std::string()) + hint;
  }
  for (const char* k : {"Connection closed by peer", "Connection reset by peer", "Broken pipe", "Connection refused"})
    if (what.find(k) != std::string::npos) {
      // While the groups are made, Gloo takes the first connection to a pair's port for the
      // peer's (the libgloo of libtorch 1.13 cannot refuse another): a local program that
      // connects there then breaks the pair on both sides, and is named as the other cause.
      if (c.making_groups)
        return "the ranks' Gloo connections broke while the process groups were being made: a peer rank went "
               "away, or another program on this machine connected to a rank's Gloo port during rendezvous "
               "(Gloo takes the first connection to a pair's port for the peer's and cannot refuse it); start "
               "the run again [" +
               what + "]";
      if (k != std::string("Connection refused"))
        return "a peer rank went away (it exited, failed or was stopped; ulysses-run names which) [" + what + "]";
    }
  // libtorch 1.13 and 2.x say a store's wait timed out in different words ("wait timeout
  // after 6000ms, keys: ..." in 2.6).
  for (const char* k : {"Timed out waiting", "Socket Timeout", "timed out after", "wait timeout after"})
    if (what.find(k) != std::string::npos)
      return "a peer rank did not arrive within parallel.timeout_s (stopped, hung, or never started)" +
             std::string(c.making_groups ? ", or another program on this machine connected to a rank's Gloo port "
                                           "during rendezvous and Gloo took it for the peer"
                                         : "") +
             " [" + what + "]";
  return what;
}

std::string save_owner_problem(const std::string& save_to, const std::string& save_owner) {
  const auto rec = last_owner(save_to);
  if (rec && rec->run == save_owner) return "";
  return "train.save_to " + save_to + " now belongs to " +
         (rec ? rec->describe() : std::string("no run (its owner record is gone)")) + ", not to this run (" +
         save_owner + "): nothing saved, so that the folder's checkpoints stay whole";
}

std::string worker_run_identity(const std::string& out_dir) {
  for (const char* k : {kRunIdEnv, "TORCHELASTIC_RUN_ID"})
    if (const char* v = std::getenv(k); v && *v) return std::string(k) + "=" + v;
  const char* addr = std::getenv("MASTER_ADDR");
  const std::string a = addr ? addr : "127.0.0.1";
  const bool loopback = a.rfind("127.", 0) == 0 || a == "::1" || a == "localhost";
  return loopback ? "--out " + std::filesystem::absolute(out_dir).lexically_normal().string() : std::string();
}

}  // namespace ulysses::launch

// The ranks of one run check that they are one run (rendezvous.hpp).
#include "rendezvous.hpp"

#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "json_checked.hpp"
#include "run_config.hpp"
#include "xxh64.hpp"

namespace ulysses {

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

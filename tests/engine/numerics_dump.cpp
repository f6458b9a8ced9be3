// The numerics reference check (docs/NUMERICS.md), C++ half: trains step 0 of a config with
// every rank as a thread (Gloo) and writes what check_grad_norm.py compares against
// torch.nn.utils.clip_grad_norm_ in fp64: rank 0's all-reduced gradients before clipping
// (grads.f32, parameters in model order), the same gradients after step 0's clipping
// (clipped.f32), each rank's per-token fp32 losses of step 0 (tokens_rank<r>.f32, valid tokens
// only), and result.json (the engine's grad_norm and loss of step 0, the old single fp32 norm,
// names, shapes, clip).
//   numerics_dump CONFIG.json OUT_DIR [--set key=value]...
#include <cstdio>
#include <fstream>
#include <iostream>
#include <mutex>

#include "rank_threads.hpp"

using namespace ulysses;

namespace {

void write_f32(const std::string& path, const at::Tensor& t) {
  auto c = t.detach().to(torch::kCPU, torch::kFloat32).contiguous();
  std::ofstream f(path, std::ios::binary);
  f.write(reinterpret_cast<const char*>(c.data_ptr<float>()), static_cast<std::streamsize>(c.numel() * 4));
  if (!f) throw std::runtime_error("cannot write " + path);
}

at::Tensor flat_grads(Trainer& tr) {
  std::vector<at::Tensor> v;
  for (auto& p : tr.model().parameters()) v.push_back(p.grad().reshape({-1}));
  return torch::cat(v);  // (numel)
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::cerr << "usage: numerics_dump CONFIG.json OUT_DIR [--set key=value]...\n";
    return 2;
  }
  const std::string out = argv[2];
  std::vector<std::string> sets;
  for (int i = 3; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--set" && i + 1 < argc) {
      sets.push_back(argv[++i]);
    } else {
      std::cerr << "numerics_dump: unknown argument '" << a << "' (expected --set key=value)\n";
      return 2;
    }
  }
  RunConfig cfg;
  try {
    cfg = load_run_config(argv[1], sets);
    cfg.profile.enabled = false;
    throw_if_invalid(validate(cfg));
  } catch (const std::exception& e) {
    std::cerr << "numerics_dump: " << e.what() << "\n";
    return 2;
  }
  try {
    std::mutex mu;
    json result;
    const int world = static_cast<int>(cfg.parallel.world_size());
    testing::run_ranks(world, [&](const DistEnv& env) {
      at::set_num_threads(1);
      Comm comm(env, static_cast<int>(cfg.parallel.sp_size), static_cast<int>(cfg.parallel.dp_size), "gloo",
                std::chrono::milliseconds(600000));
      Trainer tr(cfg, comm, nullptr);
      // Per-token losses of step 0 (before any update): logits of this rank's shard, fp32
      // cross-entropy per token, as the engine's loss sums them.
      {
        torch::NoGradGuard ng;
        const int64_t N = cfg.train.seq_length, P = comm.sp_size(), n = N / P;
        const int64_t A = cfg.train.gradient_accumulation_steps, B = cfg.train.micro_batch_size;
        std::vector<at::Tensor> losses;
        for (int64_t a = 0; a < A; ++a) {
          auto data = TokenSource::open(cfg.data, cfg.model, N, static_cast<uint64_t>(cfg.train.seed));
          Batch b = make_batch(*data, N, 0, (comm.dp_rank() * A + a) * B, B, static_cast<uint64_t>(cfg.train.seed));
          auto ids = b.ids.narrow(1, comm.sp_rank() * n, n).contiguous();        // (B, n)
          auto labels = b.labels.narrow(1, comm.sp_rank() * n, n).contiguous();  // (B, n)
          auto logits = tr.model().forward_logits(ids, comm.sp_rank() * n);      // (B, n, V)
          auto per = torch::nn::functional::cross_entropy(
              logits.to(torch::kFloat32).view({-1, logits.size(-1)}), labels.reshape({-1}),
              torch::nn::functional::CrossEntropyFuncOptions().ignore_index(-100).reduction(torch::kNone));
          losses.push_back(per.masked_select(labels.reshape({-1}) != -100));
        }
        write_f32(out + "/tokens_rank" + std::to_string(env.rank) + ".f32", torch::cat(losses));
      }
      const double loss0 = tr.loss_and_grads(0);
      auto g = flat_grads(tr).clone();  // (numel) all-reduced mean gradients
      const double plain = g.norm().item<double>();
      const StepMetrics m = tr.step(0);  // recomputes the same gradients, clips, steps AdamW
      auto clipped = flat_grads(tr);
      if (env.rank != 0) return;
      std::lock_guard<std::mutex> lk(mu);
      write_f32(out + "/grads.f32", g);
      write_f32(out + "/clipped.f32", clipped);
      json names = json::array(), shapes = json::array();
      for (auto& [name, p] : tr.model().named_parameters()) {
        names.push_back(name);
        shapes.push_back(p.sizes().vec());
      }
      result = {{"grad_norm", m.grad_norm},
                {"loss", m.loss},
                {"loss_before_step", loss0},
                {"plain_fp32_norm", plain},
                {"clip", cfg.train.grad_clip},
                {"numel", g.numel()},
                {"world", world},
                {"names", names},
                {"shapes", shapes}};
    });
    std::ofstream(out + "/result.json") << result.dump(1) << "\n";
  } catch (const std::exception& e) {
    std::cerr << "numerics_dump: " << e.what() << "\n";
    return 1;
  }
  return 0;
}

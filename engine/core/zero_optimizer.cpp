// ZeRO shard layout and AdamW on one flat shard (torch::optim::AdamW's formulas).
#include "zero_optimizer.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

namespace ulysses {

ZeroLayout::ZeroLayout(int64_t numel_, int64_t world_, int64_t rank_) : numel(numel_), world(world_), rank(rank_) {
  if (numel_ < 0 || world_ < 1 || rank_ < 0 || rank_ >= world_)
    throw std::invalid_argument("ZeroLayout: rank " + std::to_string(rank_) + " of " + std::to_string(world_) +
                                " ranks over " + std::to_string(numel_) + " elements");
  shard = (numel_ + world_ - 1) / world_;
}

int64_t ZeroLayout::valid() const { return std::clamp<int64_t>(numel - begin(), 0, shard); }

ShardedAdamW::ShardedAdamW(const ZeroLayout& layout, const std::vector<std::pair<int64_t, bool>>& sizes_and_decay,
                           const ZeroAdamWOptions& opt, torch::Device state_device, bool pin)
    : layout_(layout), opt_(opt) {
  auto o = torch::TensorOptions().dtype(torch::kFloat32).device(state_device);
  if (pin && state_device.is_cpu()) o = o.pinned_memory(true);
  exp_avg = torch::zeros({layout.shard}, o);     // (S)
  exp_avg_sq = torch::zeros({layout.shard}, o);  // (S)
  // The decay elements of [begin, begin + S), merged into runs.
  const int64_t b = layout.begin(), e = b + layout.shard;
  int64_t off = 0;
  for (const auto& [n, decay] : sizes_and_decay) {
    const int64_t lo = std::max(off, b), hi = std::min(off + n, e);
    if (decay && lo < hi) {
      if (!decay_runs_.empty() && decay_runs_.back().first + decay_runs_.back().second == lo - b)
        decay_runs_.back().second += hi - lo;
      else
        decay_runs_.emplace_back(lo - b, hi - lo);
    }
    off += n;
  }
  if (off != layout.numel)
    throw std::invalid_argument("ShardedAdamW: parameter sizes add up to " + std::to_string(off) + ", the layout has " +
                                std::to_string(layout.numel));
}

ShardedAdamW::ShardedAdamW(int64_t shard, std::vector<std::pair<int64_t, int64_t>> decay_runs,
                           const ZeroAdamWOptions& opt, torch::Device state_device, bool pin)
    : layout_(shard, 1, 0), opt_(opt), decay_runs_(std::move(decay_runs)) {
  auto o = torch::TensorOptions().dtype(torch::kFloat32).device(state_device);
  if (pin && state_device.is_cpu()) o = o.pinned_memory(true);
  exp_avg = torch::zeros({shard}, o);     // (S)
  exp_avg_sq = torch::zeros({shard}, o);  // (S)
  for (const auto& [off, len] : decay_runs_)
    if (off < 0 || len < 0 || off + len > shard)
      throw std::invalid_argument("ShardedAdamW: decay run [" + std::to_string(off) + ", " + std::to_string(off + len) +
                                  ") outside the shard of " + std::to_string(shard));
}

Zero3Layout::Zero3Layout(const std::vector<int64_t>& numel, const std::vector<int>& unit_of, int64_t world_,
                         int64_t rank_)
    : world(world_), rank(rank_) {
  if (numel.size() != unit_of.size() || world_ < 1 || rank_ < 0 || rank_ >= world_)
    throw std::invalid_argument("Zero3Layout: rank " + std::to_string(rank_) + " of " + std::to_string(world_) +
                                " over " + std::to_string(numel.size()) + " parameters");
  for (size_t i = 0; i < numel.size(); ++i) {
    const int u = unit_of[i];
    if (u == static_cast<int>(units.size())) {
      Zero3Unit nu;
      nu.first_param = nu.end_param = i;
      units.push_back(nu);
    } else if (u != static_cast<int>(units.size()) - 1) {
      throw std::invalid_argument("Zero3Layout: parameter " + std::to_string(i) + " of unit " + std::to_string(u) +
                                  " after unit " + std::to_string(units.size() - 1) +
                                  " (each unit's parameters must be contiguous, units in order)");
    }
    units.back().end_param = i + 1;
    units.back().numel += numel[i];
  }
  for (auto& u : units) {
    u.shard = (u.numel + world - 1) / world;
    u.shard_offset = shard;
    shard += u.shard;
  }
}

std::vector<std::pair<int64_t, int64_t>> Zero3Layout::decay_runs(const std::vector<int64_t>& numel,
                                                                 const std::vector<bool>& decay) const {
  std::vector<std::pair<int64_t, int64_t>> runs;
  for (const auto& u : units) {
    // This rank's piece of the unit: unit-local [b, e); the parameters of the unit in order.
    const int64_t b = rank * u.shard, e = b + u.shard;
    int64_t off = 0;
    for (size_t i = u.first_param; i < u.end_param; ++i) {
      const int64_t lo = std::max(off, b), hi = std::min(off + numel[i], e);
      if (decay[i] && lo < hi) {
        const int64_t at = u.shard_offset + (lo - b);
        if (!runs.empty() && runs.back().first + runs.back().second == at)
          runs.back().second += hi - lo;
        else
          runs.emplace_back(at, hi - lo);
      }
      off += numel[i];
    }
  }
  return runs;
}

void ShardedAdamW::step(at::Tensor& p, const at::Tensor& grad_in, double lr) {
  torch::NoGradGuard ng;
  const at::Tensor grad = grad_in.device() == exp_avg.device() ? grad_in : grad_in.to(exp_avg.device());
  // torch::optim::AdamW::step, per element (libtorch 1.13 and 2.x adamw.cpp):
  // decoupled weight decay first, on the decay group's elements only.
  if (opt_.weight_decay != 0)
    for (const auto& [off, len] : decay_runs_) p.narrow(0, off, len).mul_(1 - lr * opt_.weight_decay);
  ++steps;
  const double bias_correction1 = 1 - std::pow(opt_.beta1, static_cast<double>(steps));
  const double bias_correction2 = 1 - std::pow(opt_.beta2, static_cast<double>(steps));
  exp_avg.mul_(opt_.beta1).add_(grad, 1 - opt_.beta1);
  exp_avg_sq.mul_(opt_.beta2).addcmul_(grad, grad, 1 - opt_.beta2);
  const at::Tensor denom = (exp_avg_sq.sqrt() / std::sqrt(bias_correction2)).add_(opt_.eps);
  const double step_size = lr / bias_correction1;
  p.addcdiv_(exp_avg, denom, -step_size);
}

}  // namespace ulysses

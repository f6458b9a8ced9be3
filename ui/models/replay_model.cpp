// Replay clock over a run's METRIC points (see replay_model.hpp).
#include "replay_model.hpp"

#include <algorithm>

namespace ulysses::ui {

ReplayModel::ReplayModel(std::vector<MetricPoint> points) : points_(std::move(points)) {
  // Times must not go backwards (a restarted worker appends from 0): keep the order, clamp.
  double t = 0;
  for (auto& p : points_) {
    t = std::max(t, p.elapsed_s);
    p.elapsed_s = t;
  }
}

std::vector<MetricPoint> ReplayModel::advance(double wall_s, double speed) {
  std::vector<MetricPoint> due;
  if (wall_s > 0 && speed > 0) clock_s_ += wall_s * speed;
  while (next_ < points_.size() && points_[next_].elapsed_s <= clock_s_) due.push_back(points_[next_++]);
  if (finished()) clock_s_ = std::max(clock_s_, durationS());
  return due;
}

bool ReplayModel::step(MetricPoint* next) {
  if (finished()) return false;
  *next = points_[next_++];
  clock_s_ = std::max(clock_s_, next->elapsed_s);
  return true;
}

void ReplayModel::restart() {
  next_ = 0;
  clock_s_ = 0;
}

double ReplayModel::durationS() const { return points_.empty() ? 0 : points_.back().elapsed_s; }

int ReplayModel::cursorStep() const { return next_ == 0 ? -1 : points_[next_ - 1].step; }

}  // namespace ulysses::ui

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

int64_t ReplayModel::cursorNs(const std::vector<TraceStepSpan>& spans) const {
  auto span_of = [&](int step) -> const TraceStepSpan* {
    for (const auto& s : spans)
      if (s.step == step) return &s;
    return nullptr;
  };
  if (points_.empty()) return -1;
  if (next_ > 0 && (finished() || clock_s_ <= points_[next_ - 1].elapsed_s)) {
    const TraceStepSpan* s = span_of(points_[next_ - 1].step);
    return s ? s->end_ns : -1;
  }
  const MetricPoint& p = points_[next_];  // the step in progress
  const TraceStepSpan* s = span_of(p.step);
  if (!s) return -1;
  double t0 = next_ > 0 ? points_[next_ - 1].elapsed_s : 0.0;
  if (p.step_ms > 0) t0 = std::max(t0, p.elapsed_s - p.step_ms / 1000.0);
  const double len = p.elapsed_s - t0;
  const double f = len > 0 ? std::clamp((clock_s_ - t0) / len, 0.0, 1.0) : 0.0;
  return s->start_ns + static_cast<int64_t>(f * static_cast<double>(s->end_ns - s->start_ns));
}

int ReplayModel::cursorStep() const { return next_ == 0 ? -1 : points_[next_ - 1].step; }

}  // namespace ulysses::ui

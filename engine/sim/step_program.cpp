// The recording tracer and the step program built from what it saw (see step_program.hpp).
#include "step_program.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace ulysses::sim {

using prof::Phase;

void RecordingTracer::push(const prof::RangeInfo& info) {
  Raw r;
  r.kind = Raw::Push;
  r.t = now_ns();
  r.info = info;
  raw_.push_back(r);
}

void RecordingTracer::pop() {
  Raw r;
  r.kind = Raw::Pop;
  r.t = now_ns();
  raw_.push_back(r);
}

void RecordingTracer::record_range(const prof::RangeInfo& info, int64_t start_ns, int64_t end_ns, int32_t lane) {
  Raw r;
  r.kind = Raw::Record;
  r.t = now_ns();
  r.s = start_ns;
  r.e = end_ns;
  r.lane = lane;
  r.info = info;
  raw_.push_back(r);
}

void RecordingTracer::push_correlation(const prof::RangeInfo& info) {
  Raw r;
  r.kind = Raw::Corr;
  r.t = now_ns();
  r.info = info;
  raw_.push_back(r);
}

namespace {

bool same_collective(const prof::RangeInfo& a, const prof::RangeInfo& b) {
  return a.phase == b.phase && a.dir == b.dir && a.layer == b.layer && a.chunk == b.chunk &&
         a.head_begin == b.head_begin;
}

// A point with its place in the dry run: the host time, then the call's index (x2; -1 for a
// point known only by its time, e.g. a backward mark; odd for "just before that call").
struct Placed {
  Point p;
  int64_t t = 0, key = 0;
};

}  // namespace

StepProgram RecordingTracer::build() const {
  StepProgram prog;
  std::vector<Placed> placed;
  std::vector<int32_t> stack;
  std::vector<bool> corr_used(raw_.size(), false);
  std::vector<std::pair<int64_t, int64_t>> span;  // compute-stream ops: (begin, end) host times
  std::vector<int32_t> marks;                     // ops recorded whole on the compute stream
  int64_t last_push = -1;                         // index of the latest Push
  auto add_op = [&](const Op& op) {
    prog.ops.push_back(op);
    span.emplace_back(0, 0);
    return static_cast<int32_t>(prog.ops.size() - 1);
  };
  for (size_t i = 0; i < raw_.size(); ++i) {
    const Raw& r = raw_[i];
    const auto key = static_cast<int64_t>(2 * i);
    switch (r.kind) {
      case Raw::Push: {
        Op op;
        op.info = r.info;
        op.comm = prof::phase_is_comm(r.info.phase);
        op.parent = stack.empty() ? -1 : stack.back();
        op.depth = static_cast<int32_t>(stack.size());
        const int32_t id = add_op(op);
        span[static_cast<size_t>(id)].first = r.t;
        placed.push_back({{Point::Begin, id}, r.t, key});
        stack.push_back(id);
        last_push = static_cast<int64_t>(i);
        break;
      }
      case Raw::Pop: {
        if (stack.empty()) throw std::runtime_error("step recording: a pop without a push");
        span[static_cast<size_t>(stack.back())].second = r.t;
        placed.push_back({{Point::End, stack.back()}, r.t, key});
        stack.pop_back();
        break;
      }
      case Raw::Corr:
        break;  // matched by the Record of its collective
      case Raw::Record: {
        Op op;
        op.info = r.info;
        if (r.lane == 0) {  // a range measured on the compute stream (the backward marks)
          op.comm = false;
          const int32_t id = add_op(op);
          span[static_cast<size_t>(id)] = {r.s, r.e};
          placed.push_back({{Point::Begin, id}, r.s, -1});
          placed.push_back({{Point::End, id}, r.e, -1});
          marks.push_back(id);
          break;
        }
        op.comm = true;
        op.lane = r.lane;
        const int32_t id = add_op(op);
        // Issued: at its ScopedCorrelation (the all-to-alls), else at the start the engine
        // stamped, else (a transport that stamps nothing: the shape-only ring) just before the
        // compute range that was pushed last, the block that runs while it travels.
        int64_t it = -1, ikey = 0;
        for (size_t k = 0; k < i; ++k) {
          if (raw_[k].kind != Raw::Corr || corr_used[k] || !same_collective(raw_[k].info, r.info)) continue;
          if (it < 0) {
            it = raw_[k].t;
            ikey = static_cast<int64_t>(2 * k);
          }
          corr_used[k] = true;  // joined messages (q, k, v sent apart) are one range
        }
        if (it < 0 && r.s > 0) {
          it = r.s;
          ikey = -1;
        } else if (it < 0 && last_push >= 0) {
          it = raw_[static_cast<size_t>(last_push)].t;
          ikey = 2 * last_push - 1;
        } else if (it < 0) {
          it = r.t;
          ikey = key - 1;
        }
        placed.push_back({{Point::Issue, id}, it, ikey});
        placed.push_back({{Point::Wait, id}, r.t, key});
        break;
      }
    }
  }
  if (!stack.empty())
    throw std::runtime_error("step recording: " + std::to_string(stack.size()) + " range(s) not popped");
  // The marks' enclosing range: the innermost pushed range whose interval holds theirs.
  for (int32_t m : marks) {
    const auto [s, e] = span[static_cast<size_t>(m)];
    int32_t best = -1;
    for (size_t k = 0; k < prog.ops.size(); ++k) {
      const Op& o = prog.ops[k];
      if (o.lane != 0 || o.comm || static_cast<int32_t>(k) == m) continue;
      const auto [ks, ke] = span[k];
      if (ks <= s && e <= ke && (best < 0 || prog.ops[static_cast<size_t>(best)].depth < o.depth))
        best = static_cast<int32_t>(k);
    }
    prog.ops[static_cast<size_t>(m)].parent = best;
    prog.ops[static_cast<size_t>(m)].depth = best < 0 ? 0 : prog.ops[static_cast<size_t>(best)].depth + 1;
  }
  std::stable_sort(placed.begin(), placed.end(), [](const Placed& a, const Placed& b) {
    if (a.t != b.t) return a.t < b.t;
    return a.key < b.key;
  });
  prog.points.reserve(placed.size());
  for (const auto& p : placed) prog.points.push_back(p.p);
  return prog;
}

}  // namespace ulysses::sim

// A simulated run (engine/sim, ulysses-run --simulate) in the studio's trace page: the real
// loader opens its folder (every rank file, the ordinary schema) and the report's summary
// headline says it is simulated; a measured-looking folder without the record does not.
#include <gtest/gtest.h>

#include <QLabel>
#include <QTemporaryDir>
#include <string>

#include "simulated_run.hpp"
#include "trace/trace_view.hpp"
#include "ulysses/profiler/trace_model.hpp"

using namespace ulysses;
using namespace ulysses::ui;

namespace {

prof::RangeInfo range(prof::Phase ph, prof::Direction d, int32_t layer, int64_t bytes = 0) {
  prof::RangeInfo r;
  r.phase = ph;
  r.dir = d;
  r.layer = layer;
  r.chunk = ph == prof::Phase::Attention || prof::phase_is_comm(ph) ? 0 : -1;
  r.bytes_sent = r.bytes_recv = bytes;
  return r;
}

// One step of a two-layer model at sp 2, recorded in the engine's order by hand.
sim::SimulatedRun tiny_run() {
  using prof::Direction;
  using prof::Phase;
  sim::RecordingTracer t;
  t.on = true;
  t.push(range(Phase::Step, Direction::None, -1));
  for (int32_t l = 0; l < 2; ++l) {
    t.push(range(Phase::QkvProj, Direction::Forward, l));
    t.pop();
    t.push_correlation(range(Phase::A2ASeqToHead, Direction::Forward, l, 4096));
    t.push(range(Phase::Attention, Direction::Forward, l));
    t.pop();
    t.push_correlation(range(Phase::A2AHeadToSeq, Direction::Forward, l, 2048));
    const int64_t now = prof::Tracer::now_ns();
    t.record_range(range(Phase::A2ASeqToHead, Direction::Forward, l, 4096), now, now, prof::Tracer::kCommLane);
    t.record_range(range(Phase::A2AHeadToSeq, Direction::Forward, l, 2048), now, now, prof::Tracer::kCommLane);
    t.push(range(Phase::Mlp, Direction::Forward, l));
    t.pop();
  }
  t.pop();
  sim::SimulatedRun run;
  run.cfg.parallel.sp_size = 2;
  run.cfg.train.seq_length = 256;
  run.cfg.train.dtype = "float32";
  run.hw = sim::load_hardware(ULYSSES_SOURCE_DIR "/resources/hardware/h200-x8.json");
  run.program = t.build();
  return run;
}

TEST(SimulatedRunInStudio, LoaderOpensItAndTheHeadlineSaysSimulated) {
  QTemporaryDir dir;
  ASSERT_TRUE(dir.isValid());
  const std::string run = dir.filePath(QStringLiteral("what-if")).toStdString();
  sim::write_simulated_run(run, tiny_run());
  TraceView tv;
  tv.resize(1200, 800);
  QString err;
  ASSERT_TRUE(tv.openTraceAndWait(QString::fromStdString(run), &err)) << err.toStdString();
  EXPECT_EQ(tv.model()->rank_set().size(), 2u);
  bool said = false;
  for (const QLabel* l : tv.findChildren<QLabel*>(QStringLiteral("headline")))
    said = said || l->text().contains(QStringLiteral("SIMULATED on h200-x8"));
  EXPECT_TRUE(said) << "the report's summary headline names the simulation";
  EXPECT_NE(sim::simulated_banner(run).find("SIMULATED on h200-x8"), std::string::npos);
  EXPECT_EQ(sim::simulated_banner(dir.path().toStdString()), "");  // no run.json: not simulated
}

}  // namespace

// The studio's view of a run directory: converts what engine/launch/run_dir_reader (the one
// Qt-free reader of METRIC lines, run.json and config.json) reads into Qt types, and reads
// rank-prefixed log lines.
#include "run_data.hpp"

#include <QDateTime>
#include <QDir>
#include <QFile>
#include <QFileInfo>
#include <QJsonDocument>
#include <QRegularExpression>
#include <QSaveFile>
#include <algorithm>
#include <cerrno>
#include <csignal>
#include <limits>
#include <vector>

#include "checkpoint_layout.hpp"
#include "native_path.hpp"
#include "ulysses/common/atomic_file.hpp"
#include "run_config.hpp"
#include "run_dir_reader.hpp"
#include "ulysses/common/run_layout.hpp"
#include "ulysses/common/run_record.hpp"

namespace ulysses::ui {

namespace {
// Every file name reaches the readers byte for byte (native_path.hpp).
std::string local(const QString& path) { return native_path(path); }
// config.json and the studio's launch record, read by the one reader and handed over as Qt
// JSON (the reader checks size, file type and syntax).
QJsonObject readJsonObject(const QString& path) {
  const auto j = launch::read_json_object_file(local(path));
  if (!j) return {};
  const auto text = j->dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  return QJsonDocument::fromJson(QByteArray::fromStdString(text)).object();
}
// True when `pid` is a live ulysses-run (a reused pid of another program does not count).
bool launcherAlive(qint64 pid) {
  if (pid <= 0 || pid > std::numeric_limits<int>::max()) return false;
  if (::kill(static_cast<pid_t>(pid), 0) != 0 && errno != EPERM) return false;
  QFile cmd(QStringLiteral("/proc/%1/cmdline").arg(pid));
  if (!cmd.open(QIODevice::ReadOnly)) return true;  // no /proc: trust kill()
  return cmd.read(4096).contains("ulysses-run");
}
}  // namespace

bool parseMetricLine(const QByteArray& raw, MetricPoint* point) {
  const auto m = launch::parse_metric_text(raw.toStdString());
  if (!m) return false;
  *point = *m;
  return true;
}

QVector<MetricPoint> readMetricsFile(const QString& path) {
  const auto pts = launch::read_metrics_file(local(path));
  return QVector<MetricPoint>(pts.begin(), pts.end());
}

bool parseRankLine(const QString& line, int* rank, QString* text) {
  static const QRegularExpression re(QStringLiteral("^\\[rank (\\d+)\\] ?(.*)$"));
  const auto m = re.match(line);
  if (!m.hasMatch()) return false;
  bool ok = false;
  const int r = m.captured(1).toInt(&ok);
  if (!ok) return false;
  *rank = r;
  *text = m.captured(2);
  return true;
}

bool isRunDir(const QString& dir) {
  namespace fs = std::filesystem;
  const fs::path d = native_path(dir);
  std::error_code ec;
  for (const char* f : run_layout::kRecords)
    if (fs::exists(d / f, ec)) return true;
  // a bare trace folder (e.g. copied from a cluster): RUN/trace/rank*.sqlite
  for (fs::directory_iterator it(run_layout::trace_dir(d), ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().native();
    if (name.size() > 11 && name.compare(0, 4, "rank") == 0 && name.compare(name.size() - 7, 7, ".sqlite") == 0 &&
        it->is_regular_file(ec))
      return true;
  }
  return false;
}

RunSummary loadRunSummary(const QString& dir) {
  RunSummary s;
  const QFileInfo fi(dir);
  s.dir = fi.absoluteFilePath();
  s.name = fi.fileName();
  const QDir d(s.dir);
  const RunRecordFile file = read_run_record_file(local(d.filePath(QString::fromLatin1(run_layout::kRunRecord))));
  const RunRecord& run = file.record;
  s.config = readJsonObject(d.filePath(QString::fromLatin1(run_layout::kConfig)));
  s.status = file.status_known ? QString::fromStdString(to_string(run.status)) : QStringLiteral("unknown");
  s.startedAt = QString::fromStdString(run.started_at);
  s.endedAt = QString::fromStdString(run.ended_at);
  if (file.has("duration_s")) s.durationS = run.duration_s;
  if (run.final_loss) {
    s.hasFinalLoss = true;
    s.finalLoss = *run.final_loss;
  }
  if (file.has("steps_done"))
    s.stepsDone = static_cast<int>(std::clamp<int64_t>(run.steps_done, -1, std::numeric_limits<int>::max()));
  s.worldSize = static_cast<int>(run.world_size);
  for (const auto& p : file.problems) s.problems << QString::fromStdString(p);
  s.exitCode = static_cast<int>(std::clamp(run.exit_code.value_or(0), -1000000, 1000000));
  if (run.failed_rank) s.failedRank = static_cast<int>(std::clamp<int64_t>(*run.failed_rank, -1, kMaxRunRanks));
  s.message = QString::fromStdString(run.message);
  const auto train = s.config.value("train").toObject();
  if (train.value("steps").isDouble()) s.steps = train.value("steps").toInt();
  if (s.worldSize == 0) {
    const auto par = s.config.value("parallel").toObject();
    const double w = par.value("sp_size").toDouble() * std::max(1.0, par.value("dp_size").toDouble(1));
    if (par.value("sp_size").isDouble() && w >= 0 && w <= kMaxRanks) s.worldSize = static_cast<int>(w);
  }
  // A "running" record whose launcher is gone: the run died without writing its end
  // (killed with SIGKILL, crashed, machine restarted). Shown as failed, not as running.
  if (s.status == QLatin1String("running") && run.pid != 0 && !launcherAlive(run.pid)) {
    s.status = QStringLiteral("failed");
    s.stale = true;
    s.message = QStringLiteral(
                    "ulysses-run (pid %1) is no longer running and never recorded how the run ended "
                    "(killed, crashed or the machine restarted)")
                    .arg(static_cast<qint64>(run.pid));
  }
  // A live run's record holds placeholders (ulysses-run writes run.json at the start with 0
  // steps done and 0 s, and no final loss): its progress so far is metrics.jsonl's. The list
  // read "0 / 400" steps and "0 ms" for a run at step 184.
  const bool live = s.status == QLatin1String("running");
  if (live || s.stale) {  // a run that died keeps the placeholders too: its steps are metrics.jsonl's
    s.stepsDone = -1;
    s.durationS = -1;
  }
  if (live) s.hasFinalLoss = false;
  if (!s.hasFinalLoss || s.stepsDone < 0) {
    // The last METRIC alone, from the file's end (every file read whole: 10 s for 3000 runs).
    if (const auto last = launch::read_last_metric(local(d.filePath(QString::fromLatin1(run_layout::kMetrics))))) {
      if (!s.hasFinalLoss && !live) {
        s.hasFinalLoss = true;
        s.finalLoss = last->loss;
      }
      if (s.stepsDone < 0)
        s.stepsDone = static_cast<int>(std::clamp<int64_t>(last->step + 1, 0, std::numeric_limits<int>::max()));
      if (s.durationS < 0) s.durationS = last->elapsed_s;
    } else if (live) {
      s.stepsDone = 0;
    }
  }
  // The studio keeps the config it launched (with its "name") in RUNS/.studio/RUN.json.
  const auto launched =
      readJsonObject(fi.absoluteDir().filePath(QStringLiteral(".studio/") + s.name + QStringLiteral(".json")));
  if (s.config.value("name").isString()) {
    s.configName = s.config.value("name").toString();
  } else if (launched.value("name").isString() && !launched.value("name").toString().isEmpty()) {
    s.configName = launched.value("name").toString();
  } else {
    // Studio runs are NAME_YYYYmmdd-HHMMSS, ulysses-run's default is YYYYmmdd-HHMMSS-NAME.
    static const QRegularExpression suffix(QStringLiteral("_\\d{8}-\\d{6}(-\\d+)?$"));
    static const QRegularExpression prefix(QStringLiteral("^\\d{8}-\\d{6}-"));
    s.configName = QString(s.name).remove(suffix).remove(prefix);
    if (s.configName.isEmpty()) s.configName = s.name;
  }
  s.hasTrace = path_exists(d.filePath(QStringLiteral("trace/rank0.sqlite")));
  return s;
}

QVector<RunSummary> scanRunsDir(const QString& runsDir) {
  namespace fs = std::filesystem;
  QVector<RunSummary> out;
  // Listed byte for byte (a QDir listing leaves out names that are not UTF-8), newest first.
  std::error_code ec;
  const fs::path top = fs::absolute(native_path(runsDir), ec);
  if (ec) return out;
  std::vector<std::pair<fs::file_time_type, fs::path>> dirs;
  for (fs::directory_iterator it(top, ec), end; !ec && it != end; it.increment(ec)) {
    std::error_code e2;
    if (!it->is_directory(e2)) continue;
    dirs.emplace_back(it->last_write_time(e2), it->path());
  }
  std::stable_sort(dirs.begin(), dirs.end(), [](const auto& a, const auto& b) {
    return a.first != b.first ? a.first > b.first : a.second < b.second;
  });
  for (const auto& [t, p] : dirs) {
    const QString dir = qs_from_native(p.native());
    if (isRunDir(dir)) out.push_back(loadRunSummary(dir));
  }
  return out;
}

MeasuredStats measure(const QVector<MetricPoint>& points) {
  const launch::MetricStats st = launch::metric_stats(std::vector<MetricPoint>(points.begin(), points.end()));
  MeasuredStats m;
  m.steps = static_cast<int>(st.steps);
  m.medianStepMs = st.median_step_ms;
  m.tokensPerS = st.median_tokens_per_s;
  m.maxMemBytes = st.max_mem_bytes;
  m.finalLoss = st.final_loss;
  m.elapsedS = st.elapsed_s;
  return m;
}

QString slug(const QString& name) {
  QString s;
  for (const QChar c : name.trimmed()) s += (c.isLetterOrNumber() || c == '.' || c == '_' || c == '-') ? c : QChar('-');
  while (s.contains(QStringLiteral("--"))) s.replace(QStringLiteral("--"), QStringLiteral("-"));
  while (s.startsWith('-') || s.startsWith('.')) s.remove(0, 1);
  if (s.size() > 80) s.truncate(80);
  if (s.endsWith('-')) s.chop(1);
  return s.isEmpty() ? QStringLiteral("run") : s;
}

bool writeFileWhole(const QString& path, const QByteArray& bytes, QString* error) {
  // Written beside and renamed over `path` only when whole, under the exact name asked for.
  try {
    ulysses::write_file_atomically(native_path(path),
                                   [&](std::ostream& o) { o.write(bytes.constData(), bytes.size()); });
  } catch (const std::exception& e) {
    if (error) *error = QStringLiteral("cannot write %1: %2").arg(display_path(path), QString::fromUtf8(e.what()));
    return false;
  }
  return true;
}

QString resumeFolderOf(const QString& runDir, QString* why) {
  auto fail = [&](const QString& w) {
    if (why) *why = w;
    return QString();
  };
  const RunSummary s = loadRunSummary(runDir);
  if (s.status == QLatin1String("finished")) return fail(QStringLiteral("the run finished"));
  if (s.status == QLatin1String("running")) return fail(QStringLiteral("the run is still running"));
  std::string saveTo;
  try {
    const json cfg = load_json_file(QDir(runDir).filePath(QString::fromLatin1(run_layout::kConfig)).toStdString());
    if (cfg.contains("train") && cfg["train"].is_object() && cfg["train"].contains("save_to") &&
        cfg["train"]["save_to"].is_string())
      saveTo = cfg["train"]["save_to"].get<std::string>();
  } catch (const std::exception& e) {
    return fail(QString::fromStdString(e.what()));
  }
  if (saveTo.empty())
    return fail(QStringLiteral("the run saved no training state (train.save_to with train.save_every)"));
  if (QFileInfo(QString::fromStdString(saveTo)).isRelative())
    saveTo = QDir(runDir).filePath(QString::fromStdString(saveTo)).toStdString();
  if (ckpt::complete_checkpoints(saveTo).empty())
    return fail(QStringLiteral("%1 holds no complete checkpoint").arg(QString::fromStdString(saveTo)));
  return QString::fromStdString(saveTo);
}

}  // namespace ulysses::ui

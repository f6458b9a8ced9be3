// Readers for METRIC lines, run.json, config.json and rank-prefixed log lines.
#include "run_data.hpp"

#include <QDateTime>
#include <QDir>
#include <QFile>
#include <QFileInfo>
#include <QJsonDocument>
#include <QRegularExpression>
#include <algorithm>
#include <cerrno>
#include <csignal>
#include <limits>

namespace ulysses::ui {

namespace {
// Only regular files of bounded size are read: a FIFO named run.json would block the
// studio forever, a huge file would stall it (QFileInfo::isFile is false for FIFOs).
bool readableFile(const QString& path, qint64 maxBytes) {
  const QFileInfo fi(path);
  return fi.exists() && fi.isFile() && fi.size() <= maxBytes;
}
QJsonObject readJsonObject(const QString& path) {
  if (!readableFile(path, kMaxRunJsonBytes)) return {};
  QFile f(path);
  if (!f.open(QIODevice::ReadOnly)) return {};
  const auto doc = QJsonDocument::fromJson(f.read(kMaxRunJsonBytes));
  return doc.isObject() ? doc.object() : QJsonObject{};
}
// True when `pid` is a live ulysses-run (a reused pid of another program does not count).
bool launcherAlive(qint64 pid) {
  if (pid <= 0 || pid > std::numeric_limits<int>::max()) return false;
  if (::kill(static_cast<pid_t>(pid), 0) != 0 && errno != EPERM) return false;
  QFile cmd(QStringLiteral("/proc/%1/cmdline").arg(pid));
  if (!cmd.open(QIODevice::ReadOnly)) return true;  // no /proc: trust kill()
  return cmd.read(4096).contains("ulysses-run");
}
double median(QVector<double> v) {
  if (v.isEmpty()) return 0;
  std::sort(v.begin(), v.end());
  const int n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}
}  // namespace

bool parseMetricLine(const QByteArray& raw, MetricPoint* point) {
  QByteArray line = raw.trimmed();
  if (line.startsWith("METRIC ")) line = line.mid(7).trimmed();
  if (!line.startsWith('{')) return false;
  QJsonParseError err{};
  const auto doc = QJsonDocument::fromJson(line, &err);
  if (err.error != QJsonParseError::NoError || !doc.isObject()) return false;
  const auto o = doc.object();
  if (!o.value("step").isDouble() || !o.value("loss").isDouble()) return false;
  MetricPoint p;
  p.step = o.value("step").toInt();
  p.steps = o.value("steps").toInt();
  p.loss = o.value("loss").toDouble();
  p.lr = o.value("lr").toDouble();
  p.grad_norm = o.value("grad_norm").toDouble();
  p.tokens = static_cast<qint64>(o.value("tokens").toDouble());
  p.tokens_per_s = o.value("tokens_per_s").toDouble();
  p.step_ms = o.value("step_ms").toDouble();
  p.max_mem_bytes = static_cast<qint64>(o.value("max_mem_bytes").toDouble());
  p.elapsed_s = o.value("elapsed_s").toDouble();
  *point = p;
  return true;
}

QVector<MetricPoint> readMetricsFile(const QString& path) {
  QVector<MetricPoint> out;
  if (!readableFile(path, kMaxMetricsBytes)) return out;
  QFile f(path);
  if (!f.open(QIODevice::ReadOnly)) return out;
  while (!f.atEnd() && out.size() < kMaxMetricPoints) {
    MetricPoint p;
    const QByteArray line = f.readLine(64 * 1024);  // a METRIC object is a few hundred bytes
    if (!line.endsWith('\n') && !f.atEnd()) {   // an overlong line: skip the rest of it
      while (!f.atEnd() && !f.readLine(64 * 1024).endsWith('\n')) {
      }
      continue;
    }
    if (parseMetricLine(line, &p)) out.push_back(p);
  }
  return out;
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
  const QDir d(dir);
  return d.exists(QStringLiteral("run.json")) || d.exists(QStringLiteral("config.json")) ||
         d.exists(QStringLiteral("metrics.jsonl")) ||
         // a bare trace folder (e.g. copied from a cluster): RUN/trace/rank*.sqlite
         !QDir(d.filePath(QStringLiteral("trace"))).entryList({QStringLiteral("rank*.sqlite")}, QDir::Files).isEmpty();
}

RunSummary loadRunSummary(const QString& dir) {
  RunSummary s;
  const QFileInfo fi(dir);
  s.dir = fi.absoluteFilePath();
  s.name = fi.fileName();
  const QDir d(s.dir);
  const auto run = readJsonObject(d.filePath(QStringLiteral("run.json")));
  s.config = readJsonObject(d.filePath(QStringLiteral("config.json")));
  s.status = run.value("status").toString(run.isEmpty() ? QStringLiteral("unknown") : QString());
  if (s.status.isEmpty()) s.status = QStringLiteral("unknown");
  s.startedAt = run.value("started_at").toString();
  s.endedAt = run.value("ended_at").toString();
  if (run.value("duration_s").isDouble()) s.durationS = run.value("duration_s").toDouble();
  if (run.value("final_loss").isDouble()) {
    s.hasFinalLoss = true;
    s.finalLoss = run.value("final_loss").toDouble();
  }
  if (run.value("steps_done").isDouble()) s.stepsDone = run.value("steps_done").toInt();
  // Claims are bounded: a run.json saying 2e9 ranks made the studio allocate 2e9 rows.
  const double claimedWorld = run.value("world_size").toDouble();
  s.worldSize = claimedWorld >= 0 && claimedWorld <= kMaxRanks ? static_cast<int>(claimedWorld) : 0;
  if (claimedWorld < 0 || claimedWorld > kMaxRanks)
    s.problems << QStringLiteral("run.json claims %1 ranks (at most %2 are shown); ignored").arg(claimedWorld).arg(kMaxRanks);
  s.exitCode = run.value("exit_code").toInt();
  if (run.value("failed_rank").isDouble()) s.failedRank = run.value("failed_rank").toInt();
  s.message = run.value("message").toString();
  const auto train = s.config.value("train").toObject();
  if (train.value("steps").isDouble()) s.steps = train.value("steps").toInt();
  if (s.worldSize == 0) {
    const auto par = s.config.value("parallel").toObject();
    const double w = par.value("sp_size").toDouble() * std::max(1.0, par.value("dp_size").toDouble(1));
    if (par.value("sp_size").isDouble() && w >= 0 && w <= kMaxRanks) s.worldSize = static_cast<int>(w);
  }
  // A "running" record whose launcher is gone: the run died without writing its end
  // (killed with SIGKILL, crashed, machine restarted). Shown as failed, not as running.
  if (s.status == QLatin1String("running") && run.value("pid").isDouble() && !launcherAlive(static_cast<qint64>(run.value("pid").toDouble()))) {
    s.status = QStringLiteral("failed");
    s.stale = true;
    s.message = QStringLiteral("ulysses-run (pid %1) is no longer running and never recorded how the run ended "
                               "(killed, crashed or the machine restarted)")
                    .arg(static_cast<qint64>(run.value("pid").toDouble()));
  }
  if (!s.hasFinalLoss || s.stepsDone < 0) {
    const auto pts = readMetricsFile(d.filePath(QStringLiteral("metrics.jsonl")));
    if (!pts.isEmpty()) {
      if (!s.hasFinalLoss) {
        s.hasFinalLoss = true;
        s.finalLoss = pts.back().loss;
      }
      if (s.stepsDone < 0) s.stepsDone = pts.back().step + 1;
      if (s.durationS < 0) s.durationS = pts.back().elapsed_s;
    }
  }
  // The studio keeps the config it launched (with its "name") in RUNS/.studio/RUN.json.
  const auto launched = readJsonObject(fi.absoluteDir().filePath(QStringLiteral(".studio/") + s.name + QStringLiteral(".json")));
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
  s.hasTrace = QFileInfo::exists(d.filePath(QStringLiteral("trace/rank0.sqlite")));
  return s;
}

QVector<RunSummary> scanRunsDir(const QString& runsDir) {
  QVector<RunSummary> out;
  const QDir d(runsDir);
  if (!d.exists()) return out;
  const auto entries = d.entryInfoList(QDir::Dirs | QDir::NoDotAndDotDot, QDir::Time);
  for (const auto& e : entries)
    if (isRunDir(e.absoluteFilePath())) out.push_back(loadRunSummary(e.absoluteFilePath()));
  return out;
}

MeasuredStats measure(const QVector<MetricPoint>& points) {
  MeasuredStats m;
  m.steps = points.size();
  if (points.isEmpty()) return m;
  QVector<double> ms, tps;
  for (int i = 0; i < points.size(); ++i) {
    m.maxMemBytes = std::max(m.maxMemBytes, points[i].max_mem_bytes);
    if (i == 0 && points.size() > 1) continue;  // first step includes warm-up
    ms.push_back(points[i].step_ms);
    tps.push_back(points[i].tokens_per_s);
  }
  m.medianStepMs = median(ms);
  m.tokensPerS = median(tps);
  m.finalLoss = points.back().loss;
  m.elapsedS = points.back().elapsed_s;
  return m;
}

QString slug(const QString& name) {
  QString s;
  for (const QChar c : name.trimmed()) s += (c.isLetterOrNumber() || c == '.' || c == '_' || c == '-') ? c : QChar('-');
  while (s.contains(QStringLiteral("--"))) s.replace(QStringLiteral("--"), QStringLiteral("-"));
  if (s.startsWith('-')) s.remove(0, 1);
  if (s.endsWith('-')) s.chop(1);
  return s.isEmpty() ? QStringLiteral("run") : s;
}

}  // namespace ulysses::ui

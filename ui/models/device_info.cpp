// GPUs via nvidia-smi, CPU threads otherwise.
#include "device_info.hpp"

#include <QProcess>
#include <QRegularExpression>
#include <QStandardPaths>
#include <QThread>

namespace ulysses::ui {

int DeviceScan::ranksFor(const QString& device) const {
  if (device == QLatin1String("cpu")) return cpuThreads;
  if (device == QLatin1String("cuda")) return gpus.size();
  return gpus.isEmpty() ? cpuThreads : gpus.size();
}

QVector<DeviceInfo> parseNvidiaSmiCsv(const QString& text) {
  static const QRegularExpression re(QStringLiteral("^\\s*(.+?)\\s*,\\s*(\\d+)\\s*(MiB|GiB|KiB|B)?\\s*$"));
  QVector<DeviceInfo> out;
  for (const auto& line : text.split(QLatin1Char('\n'), Qt::SkipEmptyParts)) {
    const auto m = re.match(line);
    if (!m.hasMatch()) continue;
    const qint64 v = m.captured(2).toLongLong();
    const QString unit = m.captured(3);
    qint64 mult = 1024 * 1024;  // nvidia-smi reports MiB
    if (unit == QLatin1String("GiB"))
      mult = 1024LL * 1024 * 1024;
    else if (unit == QLatin1String("KiB"))
      mult = 1024;
    else if (unit == QLatin1String("B"))
      mult = 1;
    out.push_back({m.captured(1), v * mult});
  }
  return out;
}

DeviceScan discoverDevices(int timeoutMs, const QString& program) {
  DeviceScan s;
  s.cpuThreads = std::max(1, QThread::idealThreadCount());
  const QString exe = program.contains(QLatin1Char('/')) ? program : QStandardPaths::findExecutable(program);
  if (exe.isEmpty()) {
    s.note = QStringLiteral("no GPU found (nvidia-smi not installed); %1 CPU threads").arg(s.cpuThreads);
    return s;
  }
  QProcess p;
  p.start(exe, {QStringLiteral("--query-gpu=name,memory.total"), QStringLiteral("--format=csv,noheader")});
  if (!p.waitForStarted(timeoutMs)) {
    s.note = QStringLiteral("nvidia-smi did not start: %1").arg(p.errorString());
    return s;
  }
  if (!p.waitForFinished(timeoutMs)) {
    p.kill();
    p.waitForFinished(1000);
    s.note = QStringLiteral("nvidia-smi did not answer within %1 ms").arg(timeoutMs);
    return s;
  }
  if (p.exitStatus() != QProcess::NormalExit || p.exitCode() != 0) {
    s.note = QStringLiteral("nvidia-smi failed: %1").arg(QString::fromLocal8Bit(p.readAllStandardError()).trimmed());
    return s;
  }
  s.gpus = parseNvidiaSmiCsv(QString::fromLocal8Bit(p.readAllStandardOutput()));
  if (s.gpus.isEmpty()) s.note = QStringLiteral("nvidia-smi listed no GPU");
  return s;
}

}  // namespace ulysses::ui

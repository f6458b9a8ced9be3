// Locating ulysses-run and the example configs.
#include "studio_paths.hpp"

#include <QCoreApplication>
#include <QDir>
#include <QFileInfo>
#include <QStandardPaths>

namespace ulysses::ui {

namespace {
bool executable(const QString& p) {
  const QFileInfo fi(p);
  return fi.isFile() && fi.isExecutable();
}
}  // namespace

QString findUlyssesRun() {
  const QString env = qEnvironmentVariable("ULYSSES_RUN");
  if (!env.isEmpty()) return executable(env) ? QFileInfo(env).absoluteFilePath() : QString();
  QStringList candidates;
  if (QCoreApplication::instance()) {
    const QDir app(QCoreApplication::applicationDirPath());
    candidates << app.filePath(QStringLiteral("ulysses-run")) << app.filePath(QStringLiteral("../run/ulysses-run"));
  }
#ifdef ULYSSES_BINARY_DIR
  candidates << QStringLiteral(ULYSSES_BINARY_DIR "/app/run/ulysses-run");
#endif
  for (const auto& c : candidates)
    if (executable(c)) return QFileInfo(c).absoluteFilePath();
  return QStandardPaths::findExecutable(QStringLiteral("ulysses-run"));
}

QString findConfigsDir() {
  const QString env = qEnvironmentVariable("ULYSSES_CONFIGS");
  if (!env.isEmpty()) return env;
#ifdef ULYSSES_SOURCE_DIR
  if (QFileInfo(QStringLiteral(ULYSSES_SOURCE_DIR "/resources/configs")).isDir()) return QStringLiteral(ULYSSES_SOURCE_DIR "/resources/configs");
#endif
  if (QCoreApplication::instance()) {
    const QString share = QDir(QCoreApplication::applicationDirPath()).filePath(QStringLiteral("../share/ulysses/configs"));
    if (QFileInfo(share).isDir()) return QFileInfo(share).absoluteFilePath();
  }
  return {};
}

}  // namespace ulysses::ui

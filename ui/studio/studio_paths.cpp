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
    // installed: bin/ulysses-studio beside bin/ulysses-run; build tree: app/studio beside app/run
    candidates << app.filePath(QStringLiteral("ulysses-run")) << app.filePath(QStringLiteral("../run/ulysses-run"));
  }
  for (const auto& c : candidates)
    if (executable(c)) return QFileInfo(c).absoluteFilePath();
  return QStandardPaths::findExecutable(QStringLiteral("ulysses-run"));
}

QString findUlyssesData() {
  const QString env = qEnvironmentVariable("ULYSSES_DATA");
  if (!env.isEmpty()) return executable(env) ? QFileInfo(env).absoluteFilePath() : QString();
  if (QCoreApplication::instance()) {
    const QDir app(QCoreApplication::applicationDirPath());
    for (const QString& c :
         {app.filePath(QStringLiteral("ulysses-data")), app.filePath(QStringLiteral("../data/ulysses-data"))})
      if (executable(c)) return QFileInfo(c).absoluteFilePath();
  }
  return QStandardPaths::findExecutable(QStringLiteral("ulysses-data"));
}

QString findConfigsDir() {
  const QString env = qEnvironmentVariable("ULYSSES_CONFIGS");
  if (!env.isEmpty()) return env;
  if (!QCoreApplication::instance()) return {};
  // installed: PREFIX/bin/ulysses-studio and PREFIX/share/ulysses/resources/configs; the build
  // tree mirrors that layout (BUILD/share/ulysses/resources links to the checkout's resources/,
  // made by CMake), so the binary carries no source path.
  const QDir app(QCoreApplication::applicationDirPath());
  for (const char* rel : {"../share/ulysses/resources/configs", "../../share/ulysses/resources/configs"}) {
    const QString dir = app.filePath(QString::fromLatin1(rel));
    if (QFileInfo(dir).isDir()) return QFileInfo(dir).absoluteFilePath();
  }
  return {};
}

}  // namespace ulysses::ui

// GoogleTest main for Qt tests: offscreen platform unless QT_QPA_PLATFORM is set, a
// QApplication for widgets and event loops, QSettings in test mode (no user settings touched)
// and in a folder of this process's own (ctest -j runs several test processes at once: one's
// QSettings().clear() must not wipe what another just remembered).
#include <gtest/gtest.h>

#include <QApplication>
#include <QSettings>
#include <QStandardPaths>
#include <QTemporaryDir>

int main(int argc, char** argv) {
  if (qEnvironmentVariableIsEmpty("QT_QPA_PLATFORM")) qputenv("QT_QPA_PLATFORM", "offscreen");
  QStandardPaths::setTestModeEnabled(true);
  QApplication app(argc, argv);
  QApplication::setOrganizationName(QStringLiteral("UlyssesTest"));
  QApplication::setApplicationName(QStringLiteral("ulysses-studio-tests"));
  const QTemporaryDir settings;
  if (settings.isValid()) {
    QSettings::setPath(QSettings::NativeFormat, QSettings::UserScope, settings.path());
    QSettings::setPath(QSettings::IniFormat, QSettings::UserScope, settings.path());
  }
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}

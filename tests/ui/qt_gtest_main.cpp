// GoogleTest main for Qt tests: offscreen platform unless QT_QPA_PLATFORM is set, a
// QApplication for widgets and event loops, QSettings in test mode (no user settings touched).
#include <gtest/gtest.h>

#include <QApplication>
#include <QStandardPaths>

int main(int argc, char** argv) {
  if (qEnvironmentVariableIsEmpty("QT_QPA_PLATFORM")) qputenv("QT_QPA_PLATFORM", "offscreen");
  QStandardPaths::setTestModeEnabled(true);
  QApplication app(argc, argv);
  QApplication::setOrganizationName(QStringLiteral("UlyssesTest"));
  QApplication::setApplicationName(QStringLiteral("ulysses-studio-tests"));
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}

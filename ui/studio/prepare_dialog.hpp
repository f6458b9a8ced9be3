// File ▸ Prepare Data…: tokenizes documents into a prepared dataset folder by running
// `ulysses-data prepare … --progress-json` as a subprocess (the studio never links the
// tokenizers' engine code into its GUI thread, as the launcher runs workers), with its
// progress and ETA live, Cancel (SIGTERM: prepare stops and leaves nothing under the output
// name) and, once done, "Use in launcher" (datasetReady).
#pragma once

#include <QDialog>
#include <QString>

class QLabel;
class QLineEdit;
class QProcess;
class QProgressBar;
class QPushButton;

namespace ulysses::ui {

class PrepareDialog : public QDialog {
  Q_OBJECT
 public:
  explicit PrepareDialog(QWidget* parent = nullptr);
  ~PrepareDialog() override;

  QLineEdit* tokenizerEdit() const { return tokenizer_; }
  QLineEdit* inputEdit() const { return input_; }
  QLineEdit* textFieldEdit() const { return textField_; }
  QLineEdit* outputEdit() const { return output_; }
  QPushButton* startButton() const { return start_; }
  QPushButton* cancelButton() const { return cancel_; }
  QPushButton* useButton() const { return use_; }
  QProgressBar* progressBar() const { return bar_; }
  QLabel* statusLabel() const { return status_; }

  bool running() const { return proc_ != nullptr; }
  // The dataset the last prepare wrote; empty until one finished.
  QString result() const { return result_; }

 public slots:
  void start();   // refuses (in the status line) while the fields are incomplete
  void cancel();  // stops a running prepare

 signals:
  void datasetReady(const QString& dir);  // "Use in launcher"
  void prepareFinished(bool ok);

 protected:
  void closeEvent(QCloseEvent* e) override;

 private:
  void readProgress();
  void finished(int code, bool crashed);
  QLineEdit *tokenizer_, *input_, *textField_, *output_;
  QPushButton *start_, *cancel_, *use_;
  QProgressBar* bar_;
  QLabel* status_;
  QProcess* proc_ = nullptr;
  QString stdoutBuf_, stderr_, result_, out_;
  bool cancelled_ = false;
};

}  // namespace ulysses::ui

// The Prepare Data dialog (prepare_dialog.hpp).
#include "prepare_dialog.hpp"

#include <QCloseEvent>
#include <QDir>
#include <QFileDialog>
#include <QFileInfo>
#include <QFormLayout>
#include <QHBoxLayout>
#include <QJsonDocument>
#include <QJsonObject>
#include <QLabel>
#include <QLineEdit>
#include <QProcess>
#include <QProgressBar>
#include <QPushButton>
#include <QToolButton>
#include <QVBoxLayout>
#include <algorithm>

#include "studio_paths.hpp"

namespace ulysses::ui {

namespace {
QString hms(double s) {
  const auto t = qint64(s + 0.5);
  return QStringLiteral("%1:%2:%3")
      .arg(t / 3600)
      .arg((t / 60) % 60, 2, 10, QLatin1Char('0'))
      .arg(t % 60, 2, 10, QLatin1Char('0'));
}

// A line edit with a "…" that browses for a file or a folder.
QWidget* path_row(QLineEdit* e, bool folder, const QString& title, QWidget* parent) {
  auto* w = new QWidget(parent);
  auto* h = new QHBoxLayout(w);
  h->setContentsMargins(0, 0, 0, 0);
  auto* b = new QToolButton(w);
  b->setText(QStringLiteral("…"));
  QObject::connect(b, &QToolButton::clicked, w, [e, folder, title, w] {
    const QString p = folder ? QFileDialog::getExistingDirectory(w, title, e->text())
                             : QFileDialog::getOpenFileName(w, title, e->text());
    if (!p.isEmpty()) e->setText(p);
  });
  h->addWidget(e, 1);
  h->addWidget(b);
  return w;
}
}  // namespace

PrepareDialog::PrepareDialog(QWidget* parent) : QDialog(parent) {
  setObjectName(QStringLiteral("prepareDialog"));
  setWindowTitle(tr("Prepare data"));
  auto* lay = new QVBoxLayout(this);
  auto* form = new QFormLayout;
  tokenizer_ = new QLineEdit(this);
  tokenizer_->setObjectName(QStringLiteral("prepareTokenizer"));
  tokenizer_->setPlaceholderText(tr("a model folder (tokenizer.json) or a tokenizer.json"));
  input_ = new QLineEdit(this);
  input_->setObjectName(QStringLiteral("prepareInput"));
  input_->setPlaceholderText(tr("JSON lines (.jsonl, .gz, .zst), a folder of text files, or a text file"));
  textField_ = new QLineEdit(this);
  textField_->setObjectName(QStringLiteral("prepareTextField"));
  textField_->setPlaceholderText(QStringLiteral("text"));
  output_ = new QLineEdit(this);
  output_->setObjectName(QStringLiteral("prepareOutput"));
  output_->setPlaceholderText(tr("the dataset folder to write (must not exist)"));
  form->addRow(tr("Tokenizer"), path_row(tokenizer_, true, tr("Choose a model folder"), this));
  form->addRow(tr("Input"), path_row(input_, false, tr("Choose the documents"), this));
  form->addRow(tr("Text field (JSON lines)"), textField_);
  form->addRow(tr("Output folder"), path_row(output_, true, tr("Choose where the dataset goes"), this));
  lay->addLayout(form);
  bar_ = new QProgressBar(this);
  bar_->setObjectName(QStringLiteral("prepareProgress"));
  bar_->setRange(0, 1000);
  bar_->setValue(0);
  bar_->setFormat(QStringLiteral("%p%"));
  lay->addWidget(bar_);
  status_ = new QLabel(this);
  status_->setObjectName(QStringLiteral("prepareStatus"));
  status_->setWordWrap(true);
  status_->setTextInteractionFlags(Qt::TextSelectableByMouse);
  status_->setMinimumHeight(3 * status_->fontMetrics().height());  // a wrapped message keeps its lines
  lay->addWidget(status_);
  auto* buttons = new QHBoxLayout;
  start_ = new QPushButton(tr("Prepare"), this);
  start_->setObjectName(QStringLiteral("prepareStart"));
  cancel_ = new QPushButton(tr("Cancel"), this);
  cancel_->setObjectName(QStringLiteral("prepareCancel"));
  cancel_->setEnabled(false);
  use_ = new QPushButton(tr("Use in launcher"), this);
  use_->setObjectName(QStringLiteral("prepareUse"));
  use_->setEnabled(false);
  auto* close = new QPushButton(tr("Close"), this);
  buttons->addWidget(start_);
  buttons->addWidget(cancel_);
  buttons->addStretch(1);
  buttons->addWidget(use_);
  buttons->addWidget(close);
  lay->addLayout(buttons);
  connect(start_, &QPushButton::clicked, this, &PrepareDialog::start);
  connect(cancel_, &QPushButton::clicked, this, &PrepareDialog::cancel);
  connect(use_, &QPushButton::clicked, this, [this] {
    if (!result_.isEmpty()) emit datasetReady(result_);
  });
  connect(close, &QPushButton::clicked, this, &QDialog::close);
  resize(640, sizeHint().height());
}

PrepareDialog::~PrepareDialog() {
  if (proc_) {  // a prepare still running when the studio closes: stopped, nothing left under its name
    proc_->disconnect(this);
    proc_->terminate();
    if (!proc_->waitForFinished(10000)) proc_->kill();
    proc_->waitForFinished(2000);
  }
}

void PrepareDialog::start() {
  if (proc_) return;
  const QString tok = tokenizer_->text().trimmed(), in = input_->text().trimmed(), out = output_->text().trimmed();
  QStringList missing;
  if (tok.isEmpty()) missing << tr("a tokenizer");
  if (in.isEmpty()) missing << tr("an input");
  if (out.isEmpty()) missing << tr("an output folder");
  if (!missing.isEmpty()) {
    status_->setText(tr("Needs %1.").arg(missing.join(QStringLiteral(", "))));
    return;
  }
  const QString exe = findUlyssesData();
  if (exe.isEmpty()) {
    status_->setText(
        tr("ulysses-data was not found (beside the studio, in the build tree or on PATH; or set "
           "ULYSSES_DATA)."));
    return;
  }
  QStringList args = {QStringLiteral("prepare"),
                      QStringLiteral("--tokenizer"),
                      tok,
                      QStringLiteral("--input"),
                      in,
                      QStringLiteral("--out"),
                      out,
                      QStringLiteral("--progress-json")};
  if (!textField_->text().trimmed().isEmpty()) args << QStringLiteral("--text-field") << textField_->text().trimmed();
  out_ = out;
  result_.clear();
  stdoutBuf_.clear();
  stderr_.clear();
  cancelled_ = false;
  bar_->setValue(0);
  use_->setEnabled(false);
  proc_ = new QProcess(this);
  connect(proc_, &QProcess::readyReadStandardOutput, this, &PrepareDialog::readProgress);
  connect(proc_, &QProcess::readyReadStandardError, this,
          [this] { stderr_ += QString::fromUtf8(proc_->readAllStandardError()); });
  connect(proc_, &QProcess::finished, this,
          [this](int code, QProcess::ExitStatus st) { finished(code, st == QProcess::CrashExit); });
  connect(proc_, &QProcess::errorOccurred, this, [this](QProcess::ProcessError e) {
    if (e == QProcess::FailedToStart) finished(-1, true);
  });
  start_->setEnabled(false);
  cancel_->setEnabled(true);
  status_->setText(tr("Starting: %1 %2").arg(QFileInfo(exe).fileName(), args.join(QLatin1Char(' '))));
  proc_->start(exe, args);
}

void PrepareDialog::cancel() {
  if (!proc_) return;
  cancelled_ = true;
  status_->setText(tr("Cancelling…"));
  proc_->terminate();  // SIGTERM: prepare stops between batches and removes its partial folder
}

void PrepareDialog::readProgress() {
  stdoutBuf_ += QString::fromUtf8(proc_->readAllStandardOutput());
  int nl;
  while ((nl = int(stdoutBuf_.indexOf(QLatin1Char('\n')))) >= 0) {
    const QString line = stdoutBuf_.left(nl);
    stdoutBuf_.remove(0, nl + 1);
    const QJsonObject o = QJsonDocument::fromJson(line.toUtf8()).object();
    if (o.isEmpty()) continue;
    const double frac = o.value(QStringLiteral("fraction")).toDouble();
    bar_->setValue(int(frac * 1000));
    const double eta = o.value(QStringLiteral("eta_s")).toDouble(-1),
                 secs = o.value(QStringLiteral("seconds")).toDouble();
    const double tokens = o.value(QStringLiteral("tokens")).toDouble();
    status_->setText(tr("%1% of %2 MB read, %L3 documents, %L4 tokens (%5M tok/s), elapsed %6, ETA %7")
                         .arg(100 * frac, 0, 'f', 1)
                         .arg(o.value(QStringLiteral("bytes_total")).toDouble() / 1e6, 0, 'f', 1)
                         .arg(qint64(o.value(QStringLiteral("documents")).toDouble()))
                         .arg(qint64(tokens))
                         .arg(tokens / std::max(secs, 1e-9) / 1e6, 0, 'f', 2)
                         .arg(hms(secs), eta < 0 ? QStringLiteral("?") : hms(eta)));
  }
}

void PrepareDialog::finished(int code, bool crashed) {
  if (!proc_) return;
  if (proc_->bytesAvailable() > 0) readProgress();
  stderr_ += QString::fromUtf8(proc_->readAllStandardError());
  proc_->deleteLater();
  proc_ = nullptr;
  start_->setEnabled(true);
  cancel_->setEnabled(false);
  const QString last = stderr_.trimmed().section(QLatin1Char('\n'), -1);
  const bool ok = !crashed && code == 0 && !cancelled_;
  if (ok) {
    result_ = QFileInfo(out_).absoluteFilePath();
    bar_->setValue(1000);
    status_->setText(tr("Done. %1\n\"Use in launcher\" trains on it (data.kind = documents).").arg(last));
    use_->setEnabled(true);
  } else if (cancelled_) {
    status_->setText(QFileInfo::exists(out_) ? tr("Cancelled, but %1 exists (it existed before?).").arg(out_)
                                             : tr("Cancelled: nothing was written under %1.").arg(out_));
  } else if (code < 0) {
    status_->setText(tr("ulysses-data could not be started."));
  } else {
    status_->setText(tr("Failed (exit %1): %2").arg(code).arg(last.isEmpty() ? tr("no message") : last));
  }
  emit prepareFinished(ok);
}

void PrepareDialog::closeEvent(QCloseEvent* e) {
  cancel();
  QDialog::closeEvent(e);
}

}  // namespace ulysses::ui

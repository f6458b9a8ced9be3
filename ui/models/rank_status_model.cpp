// Per-rank status table of a live run.
#include "rank_status_model.hpp"

#include <QBrush>
#include <QColor>
#include <QRegularExpression>

namespace ulysses::ui {

RankStatusModel::RankStatusModel(QObject* parent) : QAbstractTableModel(parent) {}

void RankStatusModel::reset(int worldSize) {
  beginResetModel();
  ranks_.clear();
  ranks_.resize(std::max(0, worldSize));
  endResetModel();
}

void RankStatusModel::ensure(int rank) {
  if (rank < ranks_.size()) return;
  beginInsertRows({}, ranks_.size(), rank);
  ranks_.resize(rank + 1);
  endInsertRows();
}

void RankStatusModel::appendLine(int rank, const QString& text) {
  if (rank < 0 || rank > 4096) return;
  ensure(rank);
  auto& r = ranks_[rank];
  r.lines++;
  r.tail.push_back(text);
  while (r.tail.size() > kKeepLines) r.tail.pop_front();
  if (r.state == State::Starting) r.state = State::Running;
  emit dataChanged(index(rank, 0), index(rank, ColumnCount - 1));
}

void RankStatusModel::setState(int rank, State s) {
  if (rank < 0 || rank > 4096) return;
  ensure(rank);
  ranks_[rank].state = s;
  emit dataChanged(index(rank, StateColumn), index(rank, StateColumn));
}

bool RankStatusModel::applyLauncherLine(const QString& line) {
  // "ulysses-run: rank 3: model build", "ulysses-run: rank 3: no heartbeat for 5.0 s (in step 2)"
  static const QRegularExpression re(QStringLiteral("^ulysses-run: rank (\\d{1,4}): (.{1,200})$"));
  const auto m = re.match(line);
  if (!m.hasMatch()) return false;
  const int rank = m.captured(1).toInt();
  if (rank > 4096) return false;
  ensure(rank);
  auto& r = ranks_[rank];
  const QString text = m.captured(2);
  static const QRegularExpression took(QStringLiteral("^step (\\d{1,18}) took ([0-9]{1,12}(?:\\.[0-9]+)?) ms$"));
  if (const auto t = took.match(text); t.hasMatch()) {  // a step time: the phase line stays
    r.timed_step = t.captured(1).toLongLong();
    r.step_ms = t.captured(2).toDouble();
    emit dataChanged(index(rank, StepTime), index(rank, StepTime));
    return true;
  }
  if (r.state == State::Starting || r.state == State::Running || r.state == State::Unresponsive)
    r.state = text.startsWith(QLatin1String("no heartbeat")) ? State::Unresponsive : State::Running;
  r.phase = text;
  emit dataChanged(index(rank, StateColumn), index(rank, StateColumn));
  return true;
}

double RankStatusModel::stepMs(int rank) const { return rank >= 0 && rank < ranks_.size() ? ranks_[rank].step_ms : -1; }

qint64 RankStatusModel::timedStep(int rank) const {
  return rank >= 0 && rank < ranks_.size() ? ranks_[rank].timed_step : -1;
}

QString RankStatusModel::phase(int rank) const {
  return rank >= 0 && rank < ranks_.size() ? ranks_[rank].phase : QString();
}

void RankStatusModel::setAllRunning(State s) {
  for (int i = 0; i < ranks_.size(); ++i)
    if (ranks_[i].state == State::Starting || ranks_[i].state == State::Running ||
        ranks_[i].state == State::Unresponsive)
      ranks_[i].state = s;
  if (!ranks_.isEmpty()) emit dataChanged(index(0, StateColumn), index(ranks_.size() - 1, StateColumn));
}

RankStatusModel::State RankStatusModel::state(int rank) const {
  return rank >= 0 && rank < ranks_.size() ? ranks_[rank].state : State::Starting;
}

QStringList RankStatusModel::lastLines(int rank, int n) const {
  if (rank < 0 || rank >= ranks_.size()) return {};
  const auto& t = ranks_[rank].tail;
  return t.mid(std::max(0, static_cast<int>(t.size()) - n));
}

QString RankStatusModel::stateName(State s) {
  switch (s) {
    case State::Starting:
      return QStringLiteral("starting");
    case State::Running:
      return QStringLiteral("running");
    case State::Finished:
      return QStringLiteral("finished");
    case State::Failed:
      return QStringLiteral("failed");
    case State::Stopped:
      return QStringLiteral("stopped");
    case State::Unresponsive:
      return QStringLiteral("unresponsive");
  }
  return {};
}

int RankStatusModel::rowCount(const QModelIndex& parent) const { return parent.isValid() ? 0 : ranks_.size(); }
int RankStatusModel::columnCount(const QModelIndex& parent) const { return parent.isValid() ? 0 : ColumnCount; }

QVariant RankStatusModel::data(const QModelIndex& index, int role) const {
  if (!index.isValid() || index.row() >= ranks_.size() || index.column() >= ColumnCount) return {};
  const auto& r = ranks_[index.row()];
  if (role == Qt::ForegroundRole && index.column() == StateColumn &&
      (r.state == State::Failed || r.state == State::Unresponsive))
    return QBrush(QColor(0xd0, 0x30, 0x30));
  if (role == Qt::ToolTipRole && index.column() == LastLine) return r.tail.join(QLatin1Char('\n'));
  if (role != Qt::DisplayRole) return {};
  switch (index.column()) {
    case Rank:
      return index.row();
    case StateColumn:
      if (r.state == State::Running && !r.phase.isEmpty()) return stateName(r.state) + QStringLiteral(": ") + r.phase;
      if (r.state == State::Unresponsive) return r.phase;  // "no heartbeat for 5.0 s (in step 2)"
      return stateName(r.state);
    case StepTime:
      return r.step_ms < 0 ? QString() : QStringLiteral("%1 (step %2)").arg(r.step_ms, 0, 'f', 1).arg(r.timed_step);
    case Lines:
      return r.lines;
    case LastLine:
      return r.tail.isEmpty() ? QString() : r.tail.back();
    default:
      return {};
  }
}

QVariant RankStatusModel::headerData(int section, Qt::Orientation o, int role) const {
  if (o != Qt::Horizontal || role != Qt::DisplayRole) return QAbstractTableModel::headerData(section, o, role);
  static const char* names[] = {"Rank", "State", "Step ms", "Lines", "Last log line"};
  return section >= 0 && section < ColumnCount ? QString::fromLatin1(names[section]) : QVariant();
}

}  // namespace ulysses::ui

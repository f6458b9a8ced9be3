// The binding table and the sheet generated from it (shortcuts.hpp).
#include "trace/shortcuts.hpp"

#include <QDialog>
#include <QDialogButtonBox>
#include <QKeyEvent>
#include <QTextBrowser>
#include <QVBoxLayout>
#include <stdexcept>

namespace ulysses::ui {

const std::vector<Binding>& bindings() {
  using C = Command;
  using S = BindingScope;
  static const std::vector<Binding> table = {
      {C::ZoomIn, S::Timeline, "W|+|=", "Zoom in at the mouse pointer"},
      {C::ZoomOut, S::Timeline, "S|-", "Zoom out at the mouse pointer"},
      {C::PanLeft, S::Timeline, "A|Left", "Pan to earlier times"},
      {C::PanRight, S::Timeline, "D|Right", "Pan to later times"},
      {C::FitAll, S::Timeline, "Home", "Fit the whole trace"},
      {C::FitSelection, S::Timeline, "F",
       "Fit the selection: the dragged window, else the selected range, else the step under the centre"},
      {C::NextStep, S::Timeline, "PgDown", "Next step"},
      {C::PrevStep, S::Timeline, "PgUp", "Previous step"},
      {C::NextCollective, S::Timeline, "]",
       "Next instance of the selected collective on its rank (selected and zoomed to, every rank's arrival)"},
      {C::PrevCollective, S::Timeline, "[", "Previous instance of the selected collective on its rank"},
      {C::FocusFilter, S::TracePage, "Ctrl+F", "Focus the filter (name or phase)"},
      {C::ClearSelection, S::TracePage, "Esc", "Clear the selection; pressed again, clear the filter"},
      {C::ExplainNext, S::Explainer, "Right|PgDown|Space", "Next stage (a presenter's clicker sends these)"},
      {C::ExplainPrev, S::Explainer, "Left|PgUp", "Previous stage"},
      {C::ExplainFirst, S::Explainer, "Home", "First stage"},
      {C::ExplainLast, S::Explainer, "End", "Last stage"},
      {C::ExplainNotes, S::Explainer, "N", "Hide or show the notes beside the picture (remembered)"},
      {C::ShowShortcuts, S::Window, "?", "Show this sheet (also Help ▸ Keyboard Shortcuts)"},
      {C::OpenFile, S::Window, "Ctrl+O", "Open a trace (.sqlite, .json, .json.gz), run config or run.json"},
      {C::OpenFolder, S::Window, "Ctrl+Shift+O", "Open a run folder, a runs folder or a folder of exports"},
      {C::PresentationMode, S::Window, "F5", "Presentation mode (large bold text, high contrast)"},
      {C::WheelScroll, S::Timeline, "Wheel", "Scroll the lanes up and down", true},
      {C::WheelZoom, S::Timeline, "Ctrl + wheel",
       "Zoom at the mouse pointer (View ▸ Wheel Zooms Timeline: plain wheel)", true},
      {C::WheelPan, S::Timeline, "Shift + wheel", "Pan along the time axis (a horizontal wheel too)", true},
      {C::DragPan, S::Timeline, "Left drag", "Pan (time and lanes)", true},
      {C::DragSelect, S::Timeline, "Right drag | Shift + left drag",
       "Select a time window (range statistics; F fits it), without zooming", true},
      {C::ClickSelect, S::Timeline, "Click",
       "Select a range (its details, kernels, arrows and launch → kernel flows); a fold zooms in", true},
      {C::ClickArrow, S::Timeline, "Click an arrow",
       "Jump to that collective instance (selected, zoomed to its arrivals); so does a Stragglers row", true},
  };
  return table;
}

const Binding& binding(Command c) {
  for (const auto& b : bindings())
    if (b.cmd == c) return b;
  throw std::logic_error("no binding for a command");
}

QString scope_name(BindingScope s) {
  switch (s) {
    case BindingScope::Timeline:
      return QObject::tr("Timeline");
    case BindingScope::TracePage:
      return QObject::tr("Trace page");
    case BindingScope::Explainer:
      return QObject::tr("Explainer");
    default:
      return QObject::tr("Window");
  }
}

QList<QKeySequence> key_sequences(Command c) {
  QList<QKeySequence> out;
  const Binding& b = binding(c);
  if (b.mouse) return out;
  for (const QString& k : QString::fromUtf8(b.keys).split(QLatin1Char('|')))
    out << QKeySequence::fromString(k.trimmed(), QKeySequence::PortableText);
  return out;
}

QString keys_text(const Binding& b) {
  QStringList parts;
  for (const QString& k : QString::fromUtf8(b.keys).split(QLatin1Char('|'))) parts << k.trimmed();
  return parts.join(QObject::tr(" or "));
}

bool key_matches(Command c, const QKeyEvent* e) {
  const int key = e->key();
  Qt::KeyboardModifiers mods = e->modifiers() & ~Qt::KeypadModifier;
  const bool letter = key >= Qt::Key_A && key <= Qt::Key_Z;
  const bool special = key >= Qt::Key_Escape;  // Esc, arrows, F-keys, PgUp: Shift is theirs
  if (!letter && !special) mods &= ~Qt::ShiftModifier;
  const QKeyCombination pressed(mods, Qt::Key(key));
  for (const QKeySequence& s : key_sequences(c))
    if (!s.isEmpty() && s[0] == pressed) return true;
  return false;
}

QString shortcuts_html() {
  QString h = QStringLiteral("<h3>%1</h3>").arg(QObject::tr("Keyboard and mouse"));
  for (BindingScope s :
       {BindingScope::Timeline, BindingScope::TracePage, BindingScope::Explainer, BindingScope::Window}) {
    h += QStringLiteral("<p><b>%1</b></p><table cellspacing=\"0\" cellpadding=\"3\">").arg(scope_name(s));
    for (const auto& b : bindings()) {
      if (b.scope != s) continue;
      h += QStringLiteral("<tr><td><tt>%1</tt></td><td>%2</td></tr>")
               .arg(keys_text(b).toHtmlEscaped(), QString::fromUtf8(b.what).toHtmlEscaped());
    }
    h += QStringLiteral("</table>");
  }
  return h;
}

QString shortcuts_markdown() {
  QString m;
  for (BindingScope s :
       {BindingScope::Timeline, BindingScope::TracePage, BindingScope::Explainer, BindingScope::Window}) {
    m += QStringLiteral("| %1 | |\n|---|---|\n").arg(scope_name(s));
    for (const auto& b : bindings())
      if (b.scope == s) m += QStringLiteral("| `%1` | %2 |\n").arg(keys_text(b), QString::fromUtf8(b.what));
    m += QLatin1Char('\n');
  }
  return m;
}

QWidget* make_shortcuts_sheet(QWidget* parent) {
  auto* dlg = new QDialog(parent);
  dlg->setObjectName(QStringLiteral("shortcutsSheet"));
  dlg->setWindowTitle(QObject::tr("Keyboard Shortcuts"));
  auto* lay = new QVBoxLayout(dlg);
  auto* text = new QTextBrowser(dlg);
  text->setObjectName(QStringLiteral("shortcutsText"));
  text->setHtml(shortcuts_html());
  lay->addWidget(text);
  auto* buttons = new QDialogButtonBox(QDialogButtonBox::Close, dlg);
  QObject::connect(buttons, &QDialogButtonBox::rejected, dlg, &QDialog::reject);
  lay->addWidget(buttons);
  dlg->resize(620, 560);
  return dlg;
}

}  // namespace ulysses::ui

// The studio's key and mouse bindings as one table: the timeline's keyPressEvent, the trace
// page's and the main window's actions take their keys from it, and the shortcut sheet
// (Help ▸ Keyboard Shortcuts, "?") and docs/STUDIO.md list it. A binding added here is bound
// and listed at once; tests/ui_trace/test_shortcuts.cpp checks that each one does what it says.
#pragma once

#include <QKeySequence>
#include <QList>
#include <QString>
#include <vector>

class QKeyEvent;
class QWidget;

namespace ulysses::ui {

enum class Command {
  // Timeline (keys act while the timeline has the focus; W/S/+/- zoom at the mouse pointer)
  ZoomIn,
  ZoomOut,
  PanLeft,
  PanRight,
  FitAll,
  FitSelection,
  NextStep,
  PrevStep,
  NextCollective,
  PrevCollective,
  // Trace page (anywhere on it)
  FocusFilter,
  ClearSelection,
  // Explainer (whatever in it holds the focus: the picture, the slider, a button)
  ExplainNext,
  ExplainPrev,
  ExplainFirst,
  ExplainLast,
  ExplainNotes,
  // Window
  ShowShortcuts,
  OpenFile,
  OpenFolder,
  PresentationMode,
  // Mouse gestures over the timeline (listed; bound in its event handlers)
  WheelScroll,
  WheelZoom,
  WheelPan,
  DragPan,
  DragSelect,
  ClickSelect,
  ClickArrow,
};

enum class BindingScope { Timeline, TracePage, Explainer, Window };

struct Binding {
  Command cmd;
  BindingScope scope;
  const char* keys;  // QKeySequence portable text, alternatives separated by '|'; mouse: shown as is
  const char* what;
  bool mouse = false;
};

const std::vector<Binding>& bindings();
const Binding& binding(Command c);
QString scope_name(BindingScope s);  // "Timeline", "Trace page", "Explainer", "Window"
// The key sequences of a (keyboard) binding.
QList<QKeySequence> key_sequences(Command c);
// How the sheet shows a binding's keys ("W or +", "Ctrl+F", "Ctrl + wheel").
QString keys_text(const Binding& b);
// Whether the key press is one of the command's keys. Shift is ignored on keys that are not
// letters ("+" is Shift+= on many layouts, "?" Shift+/), the keypad modifier always.
bool key_matches(Command c, const QKeyEvent* e);
// The sheet as HTML (one table per scope), and as Markdown for docs/STUDIO.md.
QString shortcuts_html();
QString shortcuts_markdown();
// A dialog with the sheet (Help ▸ Keyboard Shortcuts); the caller shows it.
QWidget* make_shortcuts_sheet(QWidget* parent);

}  // namespace ulysses::ui

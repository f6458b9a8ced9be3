// TimelineViewport as a Qt meta type, for signals shared by the timeline and memory views.
#pragma once

#include <QMetaType>

#include "trace/timeline_viewport.hpp"

Q_DECLARE_METATYPE(ulysses::ui::TimelineViewport)

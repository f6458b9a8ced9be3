// Where the studio finds its helpers: the ulysses-run launcher and the example configs.
#pragma once

#include <QString>

namespace ulysses::ui {

// $ULYSSES_RUN, else ulysses-run next to this program, else ../run/ulysses-run (build
// tree), else the build tree this library was configured in, else PATH. Empty if none.
QString findUlyssesRun();
// The same for ulysses-data ($ULYSSES_DATA, beside this program, ../data/ulysses-data, PATH).
QString findUlyssesData();
// $ULYSSES_CONFIGS, else resources/configs of the source tree, else ../share/ulysses/configs.
QString findConfigsDir();

}  // namespace ulysses::ui

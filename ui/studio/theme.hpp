// Light (platform) and dark (Fusion + dark palette) themes.
#pragma once

namespace ulysses::ui {
void applyTheme(bool dark);
}

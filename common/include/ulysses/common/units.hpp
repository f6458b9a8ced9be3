// Byte counts said in binary units, the one way for every front end (CLI plans, the studio's
// launcher, tables and tooltips): "12 B", "1.50 GiB", "16.0 GiB", "640 MiB" (three significant
// digits). No torch, no Qt.
#pragma once

#include <string>

namespace ulysses {

std::string format_bytes(double bytes);

}  // namespace ulysses

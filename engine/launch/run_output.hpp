// ulysses-run's voice on stderr: every line prefixed "ulysses-run: " and flushed at once (the
// studio reads these lines as they come, docs/CONTRACTS.md).
#pragma once

#include <string>

namespace ulysses::launch {

// One line on stderr as it is, flushed.
void err_line(const std::string& s);
// One line "ulysses-run: s".
void say(const std::string& s);
// Every non-empty line of a (possibly multi-line) message, each with the prefix.
void say_each_line(const std::string& msg);

}  // namespace ulysses::launch

// ulysses-run's signals: SIGINT, SIGTERM, SIGHUP and SIGQUIT ask the run to stop (poll returns
// at once, the launcher stops every worker and run.json ends "stopped"); SIGPIPE and SIGXFSZ are
// ignored (a closed stdout or a file-size limit is reported, never a silent death); Ctrl-Z
// does not pause a run (its ranks would time out) and says so.
#pragma once

namespace ulysses::launch {

void install_stop_signal_handlers();
// The stop signal received (0 when none).
int stop_signal();
// "SIGINT", "SIGHUP", "SIGQUIT" or "SIGTERM".
const char* stop_signal_name();

}  // namespace ulysses::launch

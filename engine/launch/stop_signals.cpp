// ulysses-run's signal handling (stop_signals.hpp).
#include "stop_signals.hpp"

#include <unistd.h>

#include <csignal>
#include <initializer_list>

namespace ulysses::launch {
namespace {

volatile std::sig_atomic_t g_stop_signal = 0;

extern "C" void on_stop_signal(int sig) { g_stop_signal = sig; }

extern "C" void on_terminal_stop(int) {
  static const char kMsg[] =
      "\nulysses-run: Ctrl-Z does not pause a run (its ranks would time out waiting for each other); it goes on. "
      "Ctrl-C stops it.\n";
  const ssize_t n = ::write(2, kMsg, sizeof kMsg - 1);  // async-signal-safe
  (void)n;
}

}  // namespace

void install_stop_signal_handlers() {
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = 0;  // no SA_RESTART: poll() returns at once with EINTR
  // SIGQUIT (Ctrl-\) too: its default core dump left run.json "running" with every worker killed.
  for (int s : {SIGINT, SIGTERM, SIGHUP, SIGQUIT}) sigaction(s, &sa, nullptr);
  std::signal(SIGPIPE, SIG_IGN);  // a closed stdout (| head) must not kill us before the workers are stopped
  std::signal(SIGXFSZ, SIG_IGN);  // a file-size limit makes writes fail (EFBIG), reported, instead of killing us
  // Ctrl-Z stopped the launcher but not the ranks (each in its own process group): their output
  // then filled the pipes, blocked their training and timed the run out. The run goes on instead.
  struct sigaction tstp {};
  tstp.sa_handler = on_terminal_stop;
  sigemptyset(&tstp.sa_mask);
  tstp.sa_flags = SA_RESTART;
  sigaction(SIGTSTP, &tstp, nullptr);
}

int stop_signal() { return g_stop_signal; }

const char* stop_signal_name() {
  return g_stop_signal == SIGINT    ? "SIGINT"
         : g_stop_signal == SIGHUP  ? "SIGHUP"
         : g_stop_signal == SIGQUIT ? "SIGQUIT"
                                    : "SIGTERM";
}

}  // namespace ulysses::launch

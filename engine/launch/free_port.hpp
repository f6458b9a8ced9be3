// A free TCP port for the workers' rendezvous (MASTER_PORT): bind port 0 on the given IPv4
// address, read the port the kernel chose, close. Another process can take the port before
// rank 0 binds it; torchrun accepts the same race.
#pragma once

#include <string>

namespace ulysses::launch {

// Throws LaunchError when no socket can be bound on addr (an IPv4 dotted address).
int find_free_port(const std::string& addr = "127.0.0.1");

}  // namespace ulysses::launch

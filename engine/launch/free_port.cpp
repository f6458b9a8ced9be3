// Free loopback port lookup (see free_port.hpp).
#include "free_port.hpp"

#include <cerrno>
#include <cstring>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include "launch_error.hpp"

namespace ulysses::launch {

int find_free_port(const std::string& addr) {
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = 0;
  if (inet_pton(AF_INET, addr.c_str(), &sa.sin_addr) != 1)
    throw LaunchError("master address '" + addr + "' is not an IPv4 address");
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) throw LaunchError(std::string("cannot create a TCP socket: ") + std::strerror(errno));
  if (::bind(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0) {
    const std::string why = std::strerror(errno);
    ::close(fd);
    throw LaunchError("cannot bind a TCP port on " + addr + ": " + why);
  }
  socklen_t len = sizeof sa;
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&sa), &len) != 0) {
    const std::string why = std::strerror(errno);
    ::close(fd);
    throw LaunchError("cannot read the bound port: " + why);
  }
  ::close(fd);
  return ntohs(sa.sin_port);
}

}  // namespace ulysses::launch

// Where a rank listens: rank 0's c10d store and every rank's Gloo device bind the address the
// user named in MASTER_ADDR, not every interface of the machine (docs/RELIABILITY.md, issue 54).
// - MASTER_ADDR in 127.0.0.0/8 or ::1 (or a name that resolves there): loopback only.
// - Another address of this machine: that address only, and the rank says so.
// - An address that is not this machine's (a NAT, a proxy): every interface, and the rank says so.
// Torch-free: torch_compat.hpp hands the address to the TCPStore the way each libtorch allows
// (an already-bound socket where TCPStoreOptions takes one, else BindRedirect below).
#pragma once

#include <sys/socket.h>

#include <optional>
#include <string>

namespace ulysses {

struct ListenAddress {
  sockaddr_storage addr{};  // port included
  socklen_t len = 0;
  std::string text;  // "127.0.0.1:29500", "[::1]:29500"
  bool loopback = false;
};

// The address rank 0's store listens on for MASTER_ADDR:port, or nullopt (with *why) when
// MASTER_ADDR names no address of this machine (then libtorch's own choice: every interface).
std::optional<ListenAddress> store_listen_address(const std::string& master_addr, int port, std::string* why);

// The numeric address a rank's Gloo device binds: loopback for a loopback MASTER_ADDR, else the
// address of the interface the kernel routes MASTER_ADDR through (*why says which and why);
// "127.0.0.1" when MASTER_ADDR cannot be resolved.
std::string gloo_listen_address(const std::string& master_addr, std::string* why);

// A listening TCP socket (close-on-exec) bound to `a`; -1 with *error set on failure.
int listen_socket(const ListenAddress& a, std::string* error);
// Whether fd is a socket bound to a's address and port (still the one listen_socket made).
bool is_listening_on(int fd, const ListenAddress& a);

// While one lives, bind() of a wildcard address with a's port on this thread binds a instead:
// an IPv6 wildcard with an IPv4 `a` binds a mapped into IPv6 (::ffff:a.b.c.d, which takes IPv4
// connections to a alone); an IPv4 wildcard with an IPv6 `a` fails with EADDRNOTAVAIL. For a library that opens
// its own listening socket and takes no address (libtorch 1.13's TCPStore listens on every
// interface); the program's bind() is defined next to this class and passes every other call on.
class BindRedirect {
 public:
  explicit BindRedirect(const ListenAddress& a);
  ~BindRedirect();
  BindRedirect(const BindRedirect&) = delete;
  BindRedirect& operator=(const BindRedirect&) = delete;
  int redirected() const;  // how many binds were redirected (0: the library bound nothing here)
};

}  // namespace ulysses

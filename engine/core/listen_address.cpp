// Where a rank listens (listen_address.hpp), and the program's bind() that BindRedirect steers.
#include "listen_address.hpp"

#include <arpa/inet.h>
#include <dlfcn.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <vector>

namespace ulysses {

namespace {
struct Redirect {
  ListenAddress to;
  int count = 0;
};
thread_local Redirect* t_redirect = nullptr;

bool is_loopback(const sockaddr* a) {
  if (a->sa_family == AF_INET) return (ntohl(reinterpret_cast<const sockaddr_in*>(a)->sin_addr.s_addr) >> 24) == 127;
  if (a->sa_family == AF_INET6) {
    const auto& a6 = reinterpret_cast<const sockaddr_in6*>(a)->sin6_addr;
    if (IN6_IS_ADDR_LOOPBACK(&a6)) return true;
    return IN6_IS_ADDR_V4MAPPED(&a6) && a6.s6_addr[12] == 127;
  }
  return false;
}

std::string numeric(const sockaddr* a) {
  char buf[INET6_ADDRSTRLEN] = {};
  if (a->sa_family == AF_INET)
    ::inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(a)->sin_addr, buf, sizeof buf);
  else if (a->sa_family == AF_INET6)
    ::inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6*>(a)->sin6_addr, buf, sizeof buf);
  return buf;
}

uint16_t port_of(const sockaddr* a) {
  if (a->sa_family == AF_INET) return ntohs(reinterpret_cast<const sockaddr_in*>(a)->sin_port);
  if (a->sa_family == AF_INET6) return ntohs(reinterpret_cast<const sockaddr_in6*>(a)->sin6_port);
  return 0;
}

bool is_wildcard(const sockaddr* a) {
  if (a->sa_family == AF_INET) return reinterpret_cast<const sockaddr_in*>(a)->sin_addr.s_addr == htonl(INADDR_ANY);
  if (a->sa_family == AF_INET6) {
    const auto& a6 = reinterpret_cast<const sockaddr_in6*>(a)->sin6_addr;
    return IN6_IS_ADDR_UNSPECIFIED(&a6);
  }
  return false;
}

ListenAddress make_address(const addrinfo* ai) {
  ListenAddress a;
  std::memcpy(&a.addr, ai->ai_addr, ai->ai_addrlen);
  a.len = static_cast<socklen_t>(ai->ai_addrlen);
  const auto* sa = reinterpret_cast<const sockaddr*>(&a.addr);
  a.loopback = is_loopback(sa);
  a.text = (sa->sa_family == AF_INET6 ? "[" + numeric(sa) + "]" : numeric(sa)) + ":" + std::to_string(port_of(sa));
  return a;
}

struct AddrInfo {
  addrinfo* list = nullptr;
  int rc = 0;
  AddrInfo(const std::string& host, int port) {
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_NUMERICSERV;
    rc = ::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &list);
  }
  ~AddrInfo() {
    if (list) ::freeaddrinfo(list);
  }
  AddrInfo(const AddrInfo&) = delete;
  AddrInfo& operator=(const AddrInfo&) = delete;
};

// Whether this machine has address `ai` (a socket can bind it, on a port of the kernel's choice).
bool is_local(const addrinfo* ai) {
  const int fd = ::socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  sockaddr_storage s{};
  std::memcpy(&s, ai->ai_addr, ai->ai_addrlen);
  if (s.ss_family == AF_INET) reinterpret_cast<sockaddr_in*>(&s)->sin_port = 0;
  if (s.ss_family == AF_INET6) reinterpret_cast<sockaddr_in6*>(&s)->sin6_port = 0;
  const bool ok = ::bind(fd, reinterpret_cast<const sockaddr*>(&s), static_cast<socklen_t>(ai->ai_addrlen)) == 0;
  ::close(fd);
  return ok;
}

using BindFn = int (*)(int, const sockaddr*, socklen_t);
BindFn next_bind() {
  static const BindFn f = reinterpret_cast<BindFn>(::dlsym(RTLD_NEXT, "bind"));
  return f;
}
}  // namespace

std::optional<ListenAddress> store_listen_address(const std::string& master_addr, int port, std::string* why) {
  const AddrInfo ai(master_addr, port);
  if (ai.rc != 0 || !ai.list) {
    if (why) *why = "MASTER_ADDR " + master_addr + " does not resolve (" + ::gai_strerror(ai.rc) + ")";
    return std::nullopt;
  }
  // Loopback first (IPv4 before IPv6: "localhost" gives both, and clients try each).
  for (int family : {AF_INET, AF_INET6})
    for (const addrinfo* p = ai.list; p; p = p->ai_next)
      if (p->ai_family == family && is_loopback(p->ai_addr)) return make_address(p);
  for (const addrinfo* p = ai.list; p; p = p->ai_next)
    if ((p->ai_family == AF_INET || p->ai_family == AF_INET6) && is_local(p)) {
      ListenAddress a = make_address(p);
      if (why)
        *why = "rank 0's store listens on " + a.text + " only, the address MASTER_ADDR " + master_addr +
               " names (not on this machine's other interfaces)";
      return a;
    }
  if (why)
    *why = "MASTER_ADDR " + master_addr + " (" + numeric(ai.list->ai_addr) +
           ") is not an address of this machine, so rank 0's store listens on every interface (port " +
           std::to_string(port) + ")";
  return std::nullopt;
}

std::string gloo_listen_address(const std::string& master_addr, std::string* why) {
  const AddrInfo ai(master_addr, 9);
  if (ai.rc != 0 || !ai.list) return "127.0.0.1";
  const addrinfo* p = ai.list;
  if (is_loopback(p->ai_addr)) return "127.0.0.1";
  // The kernel's route to MASTER_ADDR: a UDP socket "connected" there sends nothing, and its
  // local address is the interface's.
  const int fd = ::socket(p->ai_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return "127.0.0.1";
  std::string out = "127.0.0.1";
  sockaddr_storage local{};
  socklen_t len = sizeof local;
  if (::connect(fd, p->ai_addr, p->ai_addrlen) == 0 &&
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&local), &len) == 0) {
    out = numeric(reinterpret_cast<const sockaddr*>(&local));
    if (why)
      *why = "Gloo listens on " + out + ", the address of the interface that reaches MASTER_ADDR " + master_addr +
             " (GLOO_SOCKET_IFNAME names another)";
  }
  ::close(fd);
  return out;
}

int listen_socket(const ListenAddress& a, std::string* error) {
  const auto* sa = reinterpret_cast<const sockaddr*>(&a.addr);
  const int fd = ::socket(sa->sa_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  int one = 1;
  if (fd < 0 || ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) != 0 || ::bind(fd, sa, a.len) != 0 ||
      ::listen(fd, SOMAXCONN) != 0) {
    const int e = errno;
    if (fd >= 0) ::close(fd);
    if (error)
      *error = "cannot listen on " + a.text + ": " + std::strerror(e) +
               (e == EADDRINUSE ? " (EADDRINUSE: the port is in use)" : "");
    return -1;
  }
  return fd;
}

bool is_listening_on(int fd, const ListenAddress& a) {
  sockaddr_storage s{};
  socklen_t len = sizeof s;
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&s), &len) != 0) return false;
  const auto* mine = reinterpret_cast<const sockaddr*>(&s);
  const auto* want = reinterpret_cast<const sockaddr*>(&a.addr);
  return mine->sa_family == want->sa_family && port_of(mine) == port_of(want) && numeric(mine) == numeric(want);
}

BindRedirect::BindRedirect(const ListenAddress& a) { t_redirect = new Redirect{a, 0}; }
BindRedirect::~BindRedirect() {
  delete t_redirect;
  t_redirect = nullptr;
}
int BindRedirect::redirected() const { return t_redirect ? t_redirect->count : 0; }

}  // namespace ulysses

// The program's bind(): every call goes on to the C library's, except a wildcard bind on the
// port of a live BindRedirect on this thread (see listen_address.hpp).
extern "C" int bind(int fd, const sockaddr* addr, socklen_t len) noexcept {
  using ulysses::t_redirect;
  sockaddr_in6 mapped{};  // outlives the call below
  if (t_redirect && addr && (addr->sa_family == AF_INET || addr->sa_family == AF_INET6) && ulysses::is_wildcard(addr) &&
      ulysses::port_of(addr) == ulysses::port_of(reinterpret_cast<const sockaddr*>(&t_redirect->to.addr))) {
    if (addr->sa_family == AF_INET6 && t_redirect->to.addr.ss_family == AF_INET) {
      // libtorch tries a dual-stack IPv6 socket first: bound to the IPv4 address mapped into
      // IPv6 (::ffff:a.b.c.d) it takes IPv4 connections to that address alone, and libtorch
      // logs no failed bind.
      const auto& v4 = reinterpret_cast<const sockaddr_in&>(t_redirect->to.addr);
      mapped.sin6_family = AF_INET6;
      mapped.sin6_port = v4.sin_port;
      mapped.sin6_addr.s6_addr[10] = mapped.sin6_addr.s6_addr[11] = 0xff;
      std::memcpy(&mapped.sin6_addr.s6_addr[12], &v4.sin_addr, 4);
      ++t_redirect->count;
      addr = reinterpret_cast<const sockaddr*>(&mapped);
      len = sizeof mapped;
    } else if (addr->sa_family != t_redirect->to.addr.ss_family) {
      errno = EADDRNOTAVAIL;
      return -1;
    } else {
      ++t_redirect->count;
      addr = reinterpret_cast<const sockaddr*>(&t_redirect->to.addr);
      len = t_redirect->to.len;
    }
  }
  if (const auto f = ulysses::next_bind()) return f(fd, addr, len);
  return static_cast<int>(::syscall(SYS_bind, fd, addr, len));
}

// One SET/GET round trip in c10d's TCPStore wire format, with deadlines (see store_probe.hpp).
#include "store_probe.hpp"

#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <random>
#include <thread>
#include <vector>

namespace ulysses::launch {

namespace {
using Clock = std::chrono::steady_clock;

int ms_left(Clock::time_point deadline) {
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return static_cast<int>(std::clamp<long long>(ms, 0, 1 << 30));
}

struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

// A non-blocking connect to one address, waited for until the deadline. 0, or the errno.
int connect_one(const addrinfo* ai, Clock::time_point deadline, Fd& out) {
  Fd s;
  s.fd = ::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, ai->ai_protocol);
  if (s.fd < 0) return errno;
  if (::connect(s.fd, ai->ai_addr, ai->ai_addrlen) != 0) {
    if (errno != EINPROGRESS) return errno;
    pollfd p{s.fd, POLLOUT, 0};
    const int n = ::poll(&p, 1, ms_left(deadline));
    if (n == 0) return ETIMEDOUT;
    if (n < 0) return errno;
    int err = 0;
    socklen_t len = sizeof err;
    if (::getsockopt(s.fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0) return errno;
    if (err != 0) return err;
  }
  std::swap(out.fd, s.fd);
  return 0;
}

bool send_all(int fd, const std::vector<uint8_t>& b, Clock::time_point deadline) {
  size_t done = 0;
  while (done < b.size()) {
    const ssize_t n = ::send(fd, b.data() + done, b.size() - done, MSG_NOSIGNAL);
    if (n > 0) {
      done += static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      pollfd p{fd, POLLOUT, 0};
      if (::poll(&p, 1, ms_left(deadline)) <= 0) return false;
      continue;
    }
    return false;
  }
  return true;
}

void put_u64(std::vector<uint8_t>& b, uint64_t v) {  // c10d sends sizes in host order (x86/ARM: little endian)
  const auto* p = reinterpret_cast<const uint8_t*>(&v);
  b.insert(b.end(), p, p + sizeof v);
}
void put_string(std::vector<uint8_t>& b, const std::string& s) {
  put_u64(b, s.size());
  b.insert(b.end(), s.begin(), s.end());
}

// The first bytes a foreign program sent, quoted for a message (printable ASCII, else hex).
std::string preview(const std::vector<uint8_t>& got) {
  const size_t n = std::min<size_t>(got.size(), 24);
  bool printable = n > 0;
  for (size_t i = 0; i < n; ++i)
    if (got[i] != '\r' && got[i] != '\n' && (got[i] < 0x20 || got[i] > 0x7e)) printable = false;
  std::string out;
  if (printable) {
    for (size_t i = 0; i < n; ++i) out += got[i] == '\r' || got[i] == '\n' ? ' ' : static_cast<char>(got[i]);
    while (!out.empty() && out.back() == ' ') out.pop_back();
    return "'" + out + (got.size() > n ? "...'" : "'");
  }
  static const char* hex = "0123456789abcdef";
  for (size_t i = 0; i < std::min<size_t>(n, 12); ++i) {
    if (i) out += ' ';
    out += hex[got[i] >> 4];
    out += hex[got[i] & 15];
  }
  return "bytes " + out + (got.size() > 12 ? " ..." : "");
}

std::string bytes_word(size_t n) { return std::to_string(n) + (n == 1 ? " byte" : " bytes"); }
}  // namespace

StoreProbe probe_store(const std::string& addr, int port, const StoreWire& wire, Clock::time_point deadline,
                       bool retry_refused) {
  StoreProbe out;
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  const std::string service = std::to_string(port);
  Fd s;
  int last_err = 0;
  for (;;) {
    const int rc = ::getaddrinfo(addr.c_str(), service.c_str(), &hints, &res);
    if (rc == 0) {
      for (addrinfo* ai = res; ai && s.fd < 0; ai = ai->ai_next) last_err = connect_one(ai, deadline, s);
      ::freeaddrinfo(res);
      res = nullptr;
    } else {
      last_err = EHOSTUNREACH;
    }
    if (s.fd >= 0) break;
    if (!retry_refused || Clock::now() + std::chrono::milliseconds(100) >= deadline) {
      out.answer = StoreAnswer::Nothing;
      out.detail = last_err == ECONNREFUSED ? "nothing listens there" : std::strerror(last_err);
      return out;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }

  // SET key nonce; GET key -> (u64 length, bytes) = nonce. Only a c10d store gives this back.
  std::random_device rd;
  const std::string nonce = "ulysses-probe-" + std::to_string(rd()) + "-" + std::to_string(rd());
  const std::string key = "ulysses/probe/" + nonce;
  std::vector<uint8_t> req;
  if (wire.validate) {
    req.push_back(0);  // QueryType::VALIDATE
    const auto* m = reinterpret_cast<const uint8_t*>(&wire.magic);
    req.insert(req.end(), m, m + sizeof wire.magic);
  }
  req.push_back(wire.set);
  put_string(req, key);
  put_string(req, nonce);  // a vector<uint8_t> goes as a string does: u64 length, bytes
  req.push_back(wire.get);
  put_string(req, key);
  std::vector<uint8_t> want;
  put_u64(want, nonce.size());
  want.insert(want.end(), nonce.begin(), nonce.end());

  const bool sent = send_all(s.fd, req, deadline);
  std::vector<uint8_t> got;
  bool closed = false, reset = false;
  while (got.size() < want.size()) {
    pollfd p{s.fd, POLLIN, 0};
    const int n = ::poll(&p, 1, ms_left(deadline));
    if (n == 0) break;  // deadline
    if (n < 0) {
      if (errno == EINTR) continue;
      break;
    }
    uint8_t buf[256];
    const ssize_t r = ::recv(s.fd, buf, sizeof buf, 0);
    if (r > 0) {
      got.insert(got.end(), buf, buf + r);
      // Wrong from its first bytes: no need to wait for more.
      if (!std::equal(got.begin(), got.begin() + static_cast<std::ptrdiff_t>(std::min(got.size(), want.size())),
                      want.begin()))
        break;
      continue;
    }
    if (r < 0 && (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK)) continue;
    if (r < 0 && errno == ECONNRESET) reset = true;
    closed = true;
    break;
  }
  if (got.size() >= want.size() && std::equal(want.begin(), want.end(), got.begin())) {
    out.answer = StoreAnswer::Store;
    return out;
  }
  const bool matches_so_far = std::equal(
      got.begin(), got.begin() + static_cast<std::ptrdiff_t>(std::min(got.size(), want.size())), want.begin());
  if (!got.empty() && !matches_so_far) {
    out.answer = StoreAnswer::Foreign;
    out.detail = "it sent " + preview(got);
  } else if (closed || !sent) {
    out.answer = StoreAnswer::Foreign;
    out.detail = std::string(reset ? "it reset the connection" : "it closed the connection") +
                 (got.empty() ? " without answering" : " after " + bytes_word(got.size()));
  } else {
    out.answer = StoreAnswer::Silent;
    out.detail = got.empty() ? "it accepted the connection and answered nothing"
                             : "it answered " + bytes_word(got.size()) + " and then nothing";
  }
  return out;
}

std::string foreign_store_message(const std::string& addr, int port, const StoreProbe& p, double waited_s) {
  const std::string where = addr + ":" + std::to_string(port);
  char secs[32];
  std::snprintf(secs, sizeof secs, "%.1f", waited_s);
  switch (p.answer) {
    case StoreAnswer::Store:
      return where + " is a c10d store";
    case StoreAnswer::Nothing:
      return "a peer rank did not arrive within parallel.timeout_s: no c10d store on " + where + " within " + secs +
             " s (" + p.detail +
             "): rank 0 did not start its store (is it running, with the same MASTER_ADDR and MASTER_PORT?)";
    case StoreAnswer::Silent:
      return where + " answered with something that is not a c10d store (" + p.detail + " for " + secs +
             " s; a store answers at once): another program holds MASTER_PORT " + std::to_string(port) +
             "; pick a free MASTER_PORT";
    case StoreAnswer::Foreign:
      break;
  }
  return where + " answered with something that is not a c10d store (" + p.detail +
         "): another program holds MASTER_PORT " + std::to_string(port) + "; pick a free MASTER_PORT";
}

}  // namespace ulysses::launch

// Who answers on MASTER_ADDR:MASTER_PORT, asked before c10d's own TCPStore client touches it.
// c10d's client trusts the first bytes it reads: a foreign program on the port makes the worker
// abort (64 bytes of 0xff read as a vector length: std::length_error in a background thread),
// wait past parallel.timeout_s (a listener that accepts and stays silent), or blame "another
// worker of this run" (an SSH banner read as a counter). The probe speaks the store's own wire
// format once, with a deadline on every connect, write and read: it SETs a random key and GETs
// it back, which only a c10d store answers with the same bytes. Torch-free: the wire's byte
// codes differ between libtorch releases and come from the caller (compat::tcp_store_wire()).
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

namespace ulysses::launch {

// Set by ulysses-run for its workers: a folder (mode 0700, inside the run folder) whose file
// "store" is the run's c10d FileStore. Local ranks meet there, through no network port; without
// it (torchrun, Slurm, a worker started by hand) they meet on MASTER_ADDR:MASTER_PORT.
constexpr const char* kRendezvousDirEnv = "ULYSSES_RENDEZVOUS_DIR";
constexpr const char* kRendezvousFolder = ".rendezvous";  // RUN/.rendezvous/store

// The c10d TCPStore protocol of one libtorch release: the query codes of SET and GET, and
// whether a client first sends VALIDATE (code 0) with the magic number (libtorch >= 2.1).
struct StoreWire {
  uint8_t set = 0;
  uint8_t get = 2;
  bool validate = false;
  uint32_t magic = 0;
};

enum class StoreAnswer {
  Store,    // a c10d store answered the SET/GET round trip
  Nothing,  // nothing accepted a connection before the deadline (refused or unreachable)
  Foreign,  // something accepted and answered with bytes that are no store's, or closed
  Silent,   // something accepted and said nothing before the deadline
};

struct StoreProbe {
  StoreAnswer answer = StoreAnswer::Nothing;
  std::string detail;  // what was seen, for the user ("sent 'SSH-2.0-OpenSSH_9.2'", "closed the connection")
};

// Connects to addr:port (an IPv4/IPv6 address or a host name), retrying refused connections
// every 100 ms until `deadline` when retry_refused is true (rank 0's store may not be up yet),
// and asks the store a SET/GET round trip; everything ends by `deadline`.
StoreProbe probe_store(const std::string& addr, int port, const StoreWire& wire,
                       std::chrono::steady_clock::time_point deadline, bool retry_refused);

// The message for a worker that met something other than a c10d store on MASTER_ADDR:PORT
// ("127.0.0.1:29500 answered with something that is not a c10d store (it sent ...)").
std::string foreign_store_message(const std::string& addr, int port, const StoreProbe& p, double waited_s);

}  // namespace ulysses::launch

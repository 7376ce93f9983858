// A misbehaving peer (issue 22): a raw libfabric endpoint in the test's own process that speaks
// the plugin's wire protocol (src/wire/wire.h, core/ctrl.h) well enough to complete a real
// handshake with it, and then sends whatever a test tells it to: messages of every kind with any
// header, RDMA writes with any immediate data, clear-to-sends naming anything. Single-threaded:
// while it waits, it calls `poke` so that the plugin (manual progress) moves too.
#pragma once
#include <rdma/fabric.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>

#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "wire/wire.h"

namespace nft {

using namespace nf;  // the wire protocol's names

class Hostile {
 public:
  struct Msg {
    std::vector<uint8_t> b;  // the bytes received, header included
    uint64_t flags = 0;
    uint64_t data = 0;  // remote CQ data (FI_REMOTE_CQ_DATA)
  };
  // A region of ours that the plugin may write into (a clear-to-send of ours names it).
  struct Region {
    std::vector<uint8_t> mem;
    fid_mr* mr = nullptr;
    void* desc = nullptr;
    uint64_t key = 0;
    uint64_t addr = 0;  // as the peer's fi_writedata takes it
  };

  Hostile() = default;
  ~Hostile();
  Hostile(const Hostile&) = delete;
  Hostile& operator=(const Hostile&) = delete;

  // Opens an endpoint of `provider` (the one the plugin runs on, in this process), with tagged
  // messages too when `tagged` (SENDRECV data). False with *err.
  bool open(const std::string& provider, std::string* err, bool tagged = false);
  const uint8_t* addr() const { return addr_; }
  size_t addr_len() const { return addr_len_; }
  // Inserts a peer address; FI_ADDR_NOTAVAIL on failure.
  fi_addr_t insert(const uint8_t* addr, size_t len);

  // Sends `len` bytes (a header and what follows, as the test built them) to `to`, with remote CQ
  // data when `with_data`. Waits (bounded) for its completion. False when it failed.
  bool send(fi_addr_t to, const void* bytes, size_t len, bool with_data = false, uint64_t data = 0);
  // A tagged message (open with `tagged`), as SENDRECV data travels. Waits for its completion.
  bool tsend(fi_addr_t to, const void* bytes, size_t len, uint64_t tag);
  // A control message: CtrlHdr h, then `len` bytes of body.
  bool send_ctrl(fi_addr_t to, const CtrlHdr& h, const void* body, size_t len);
  // Writes `len` bytes of `src` (registered here) to the peer's (addr, key) with immediate data.
  // True when the write completed without error.
  bool write(fi_addr_t to, const void* src, size_t len, uint64_t raddr, uint64_t key, uint64_t imm);
  // Registers a region the peer may write into.
  bool region(size_t len, Region* out, std::string* err);
  void release(Region* r);

  // Reads the completion queue once (stores messages, reposts receives).
  void poll();
  // Waits up to timeout_ms (poking the plugin) for a message of control kind `kind` (to comm
  // `dst` of ours, unless 0); probes are answered or dropped as `answer_probes` says. False on
  // timeout.
  bool wait_msg(uint8_t kind, Msg* out, int timeout_ms, uint32_t dst = 0);
  // Polls (and pokes) for `ms` milliseconds.
  void pump(int ms);

  std::function<void()> poke;    // drives the plugin while we wait
  bool answer_probes = true;     // answer liveness pings (a live peer) or not (a dead one)
  int send_errors = 0;           // error completions of our sends and writes
  std::vector<uint64_t> writes;  // the CQ data of each write the peer made into our regions
  std::string last_error;

 private:
  struct Rx {
    fi_context2 ctx;
    uint8_t buf[2048];
    fid_mr* mr = nullptr;
    void* desc = nullptr;
  };
  bool reg(void* buf, size_t len, uint64_t access, fid_mr** mr, void** desc, std::string* err);
  void post(Rx* rx);
  bool wait_tx(int timeout_ms);
  // Copies `bytes` into the send buffer, posts `op` (retried on -FI_EAGAIN) and waits for it.
  bool post_and_wait(const void* bytes, size_t len, const std::function<ssize_t()>& op);

  fi_info* info_ = nullptr;
  fid_fabric* fabric_ = nullptr;
  fid_domain* domain_ = nullptr;
  fid_av* av_ = nullptr;
  fid_cq* cq_ = nullptr;
  fid_ep* ep_ = nullptr;
  uint8_t addr_[kMaxAddrLen] = {};
  size_t addr_len_ = 0;
  std::vector<std::unique_ptr<Rx>> rx_;
  std::vector<uint8_t> tx_;
  fid_mr* tx_mr_ = nullptr;
  void* tx_desc_ = nullptr;
  fi_context2 tx_ctx_ = {};
  int tx_pending_ = 0;
  uint64_t next_key_ = 100;
  std::deque<Msg> inbox_;
};

// A connection the hostile peer made to a plugin listen comm, as the sending side: the plugin's
// recv comm is its peer.
struct HostileConn {
  fi_addr_t peer = FI_ADDR_NOTAVAIL;
  uint32_t dst = 0;  // the plugin comm's id (the listen comm's, kept by the recv comm)
  uint32_t src = 0;  // ours
  // Wire version 7: what our CTSs, eager messages and notices carry (the plugin comm's cookie,
  // from its ProtoInfo), and what the plugin's carry to us (ours, in the ProtoInfo we sent).
  uint32_t cookie = 0;
  uint32_t my_cookie = 0;
  uint32_t eager_max = 0;
  bool compact = false;
};

}  // namespace nft

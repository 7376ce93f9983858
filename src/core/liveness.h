// Peer failure detection (docs/protocol.md, "Peer failure").
//
// A peer that dies, hangs or becomes unreachable must turn into errors of the requests pending
// toward it within NCCL_FABRIC_PEER_TIMEOUT, on both sides, also on a side that only has receives
// posted (which a provider never fails by itself). Each shared endpoint therefore probes the peers
// it has pending requests with: a small tagged ping to the peer's shared endpoint, answered by a
// pong. A peer that leaves pings unanswered for the timeout, or whose path the provider reports
// gone (reset, refused, unreachable), fails: every comm with it, one WARN.
//
// Answering must not depend on NCCL calling the plugin (a rank busy computing or checkpointing
// calls nothing for minutes): a background thread per process (the keeper) progresses every
// shared endpoint nobody progressed in the last 100 ms, which answers pings, and runs the probe
// clock. A process that is stopped or hung as a whole answers nothing, which is what is detected.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/comm.h"

namespace nf {

constexpr int kProbeTx = 16;                      // pings and pongs in flight per shared endpoint
constexpr uint64_t kKeeperTickNs = 100000000ull;  // the keeper's period
constexpr uint64_t kKeeperBusyNs = 1000000ull;    // ... while it finds completions to dispatch

struct ProbePeer {
  fi_addr_t addr = FI_ADDR_UNSPEC;
  uint64_t key = 0;                  // random: each ping's nonce derives from it (live_wire_seq)
  uint64_t seq = 0;                  // pings sent
  uint64_t answered = 0;             // the newest ping it answered
  uint64_t first_unanswered_ns = 0;  // the clock: live_step (liveness.cpp); 0: stopped
  uint64_t last_ping_ns = 0;
  bool tx_busy = false;      // its last ping is still in the provider
  bool pending = false;      // scratch: requests are pending toward it
  uint64_t events = 0;       // scratch: completions of its comms, summed
  uint64_t last_events = 0;  // ... at the previous check: any change is a sign of life
};

// The probe clock of one peer, apart from the endpoint that sends and receives the probes (so that
// tests can play it schedules: tests/unit/test_liveness.cpp). Times are now_ns() values.
enum class LiveStep { kWait, kPing, kDead };
// One check: `pending` (requests wait toward the peer) and the completions of its comms so far.
// kPing: a ping is due (the caller sends it and calls live_ping_sent if the provider took it);
// kDead: it left the probes unanswered for longer than timeout_ns.
LiveStep live_step(ProbePeer& p, bool pending, uint64_t events, uint64_t now, uint64_t timeout_ns,
                   uint64_t interval_ns);
void live_ping_sent(ProbePeer& p, uint64_t now);
// The provider gave the ping back (sent, or failed).
void live_ping_done(ProbePeer& p);
// A pong answering ping `seq` arrived at `now`.
void live_answered(ProbePeer& p, uint64_t seq, uint64_t now);
// What a ping's seq field carries on the wire: its number's low 32 bits, and above them a 32-bit
// nonce that only the prober can compute (from its random per-peer key). The pong echoes the
// field (peers of every wire version do), so a pong that was not sent in answer to one of our
// pings, or that answers a ping older than 2^32 pings, is refused (issue 36).
uint64_t live_wire_seq(const ProbePeer& p, uint64_t seq);
// The ping number a pong's echoed field names, if it carries the right nonce for one of the pings
// sent (1..p.seq). False: a forged or corrupted pong.
bool live_pong_seq(const ProbePeer& p, uint64_t wire, uint64_t* seq);

struct Liveness {
  uint64_t timeout_ns = 0;   // 0: never probe (pings of others are still answered)
  uint64_t interval_ns = 0;  // between pings to one peer
  // A probe as it is sent: the control header, then the probe (probes arrive in the endpoint's
  // control pool, core/ctrl.h).
  struct Tx {
    CtrlHdr h;
    ProbeMsg m;
  };
  std::unique_ptr<Tx[]> tx;  // kProbeTx
  MemReg tx_reg;
  OpCtx tx_ops[kProbeTx];
  int tx_owner[kProbeTx];  // -1 free, -2 a pong, else the peer index of a ping
  std::vector<ProbePeer> peers;
  uint8_t self[kMaxAddrLen];
  size_t self_len = 0;
  uint64_t last_check_ns = 0;
  uint64_t bad_probes = 0;
  // Issue 36: pings that claimed an address this endpoint never met (not answered: no AV entry is
  // made for them, and no pong goes to an address a stranger chose), and pongs refused (no peer
  // of that token, or the wrong nonce). A WARN at counts 1, 2, 4, 8, ...
  uint64_t pings_unknown = 0, pongs_refused = 0;
};

// Sets up probing of a freshly opened shared endpoint. Under sep.mu (or before it is shared).
Status live_setup(SharedEp& sep, int64_t timeout_s);
// A probe arrived (the payload of a control message of kind kCtrlProbe). Under sep.mu.
void live_on_probe(SharedEp& sep, const void* buf, size_t len);
// A probe's send completed (e != NULL) or failed (err != NULL). Under sep.mu.
void live_on_completion(SharedEp& sep, OpCtx* op, const fi_cq_tagged_entry* e, const CqError* err);
// Sends the pings that are due and fails the peers that left them unanswered. Under sep.mu.
void live_check(SharedEp& sep);
// Every comm with `peer` fails with s: one WARN that names the peer, what was pending and what was
// seen. Under sep.mu.
void peer_failed(SharedEp& sep, fi_addr_t peer, Status s, const std::string& seen);
// Reads the event queues of the endpoint's rails. An error there belongs to no operation (EFA:
// a handshake with a peer failed, an internal packet could not be sent): the peer it names fails
// (peer_failed); one that names no peer of ours fails every connection of the endpoint. Under
// sep.mu; the keeper calls it every tick.
void eq_check(SharedEp& sep);
// Closes the probe buffers (after the endpoint is closed).
void live_teardown(SharedEp& sep);

// The keeper thread: progresses idle shared endpoints and runs the probe clock.
void keeper_add(SharedEp* sep);
void keeper_remove(SharedEp* sep);
// Runs fn on the keeper's list of endpoints, which can neither come nor go meanwhile (not from the
// keeper thread itself).
void keeper_with_endpoints(const std::function<void(const std::vector<SharedEp*>&)>& fn);

}  // namespace nf

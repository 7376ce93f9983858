// The transport over raw libfabric: the plugin's transfers without the plugin. One RDM endpoint
// for all comms, as the plugin has (the comm is in the tag); a grouped receive is n tagged
// receives with the group's n tags. (An endpoint per comm cost libfabric 2.1's tcp;ofi_rxm about
// 80 MB each, zeroed at fi_enable for its pre-posted receives: 64 comms took 5 GB per rank, a
// setup of minutes, and ~100 ms per message.)
#include "perf/xport.h"

#include <sys/socket.h>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <thread>

namespace nfp {

namespace {

// The address exchange over a channel without a socket (MPI). RawFabric::connect_peer speaks to
// a socket, so it gets one end of a local socketpair, in a thread of its own; this thread reads
// our endpoint name from the other end, trades it with the peer as an N frame, and writes the
// peer's name back. The helper thread makes no MPI call; every wait is bounded.
void connect_over_frames(nfc::RawFabric* f, Chan& chan) {
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0)
    fail(std::string("raw libfabric: socketpair: ") + strerror(errno));
  nfc::Oob fabric_end(sv[0]);
  nfc::Oob here(sv[1]);
  const int timeout = chan.timeout_ms();
  bool ok = false;
  std::string err;
  std::thread helper([&] {
    ok = f->connect_peer(fabric_end, timeout, &err);
    fabric_end = nfc::Oob();  // a failure before the name went out ends our wait for it
  });
  // Joins the helper on every way out: closing our end ends its wait at once.
  struct Join {
    std::thread& t;
    nfc::Oob& end;
    ~Join() {
      end = nfc::Oob();
      if (t.joinable()) t.join();
    }
  } join{helper, here};

  constexpr uint64_t kMaxName = 4096;
  uint64_t len = 0;
  std::string name;
  if (!here.recv(&len, sizeof(len), timeout) || len == 0 || len > kMaxName) {
    here = nfc::Oob();
    helper.join();
    helper = std::thread();
    fail("raw libfabric: " + (err.empty() ? std::string("no endpoint name to send") : err));
  }
  name.resize(static_cast<size_t>(len));
  if (!here.recv(&name[0], name.size(), timeout)) fail("raw libfabric: endpoint name cut short");
  chan.send('N', name, "raw libfabric address exchange");
  const std::string theirs = chan.recv('N', "raw libfabric address exchange");
  const uint64_t theirs_len = theirs.size();
  if (!here.send(&theirs_len, sizeof(theirs_len), timeout) ||
      (theirs_len > 0 && !here.send(theirs.data(), theirs.size(), timeout)))
    fail("raw libfabric: cannot hand the peer's endpoint name over");
  helper.join();
  helper = std::thread();
  if (!ok) peer_fail("raw libfabric: " + err);
}

}  // namespace

RawXport::RawXport(int rank, int comms, int slots, int group)
    : my_tag_(static_cast<uint64_t>(rank) << 32),
      peer_tag_(static_cast<uint64_t>(1 - rank) << 32),
      group_(group),
      fab_(new nfc::RawFabric()),
      slots_(static_cast<size_t>(slots)),
      ops_(new nfc::RawOp[static_cast<size_t>(slots) * static_cast<size_t>(group)]) {
  if (comms > (1 << 24) || group > 256) fail("raw libfabric: more comms or parts than tags");
}

void RawXport::open(nfc::RawConfig cfg, Chan& chan, std::string* note) {
  // The endpoint opens before any address travels: a rank that fails here tells the other at the
  // barrier, rather than in the middle of the unframed address exchange.
  std::string err;
  if (!fab_->open(cfg, &err)) {
    if (cfg.domain.empty()) fail("raw libfabric: " + err);
    const std::string wanted = cfg.domain;
    cfg.domain.clear();
    std::string err2;
    if (!fab_->open(cfg, &err2)) fail("raw libfabric: " + err);
    *note = "the plugin's device \"" + wanted + "\" is no domain of provider '" + cfg.provider +
            "'; raw runs on its domain \"" + fab_->domain_name() + "\"";
  }
  chan.sync("raw libfabric setup");
  if (chan.oob() == nullptr)
    connect_over_frames(fab_.get(), chan);
  else if (!fab_->connect_peer(*chan.oob(), chan.timeout_ms(), &err))
    peer_fail("raw libfabric: " + err);
  chan.sync("raw libfabric address exchange");
}

void RawXport::reg(char* sbuf, char* rbuf, size_t len) {
  std::string err;
  if (smr_ != nullptr) fab_->dereg(smr_);
  if (rmr_ != nullptr) fab_->dereg(rmr_);
  smr_ = fab_->reg(sbuf, len, &err);
  if (smr_ == nullptr) fail("raw libfabric: " + err);
  rmr_ = fab_->reg(rbuf, len, &err);
  if (rmr_ == nullptr) fail("raw libfabric: " + err);
}

Xport::Post RawXport::check(nfc::RawFabric::Post p) {
  if (p == nfc::RawFabric::Post::kError) fail("raw libfabric: " + err_);
  return p == nfc::RawFabric::Post::kPosted ? Post::kPosted : Post::kRetry;
}

// Sends and receives post alike: n parts of one slot, resumed where -FI_EAGAIN stopped them.
Xport::Post RawXport::post(bool send, int slot, int comm, char* buf, size_t len, int n) {
  Slot& s = slots_[static_cast<size_t>(slot)];
  if (s.parts == 0) {
    s.comm = comm;
    s.n = n;
  }
  nfc::RawFabric& f = *fab_;
  nfc::RawOp* ops = &ops_[static_cast<size_t>(slot) * static_cast<size_t>(group_)];
  const uint64_t comm_bits = static_cast<uint64_t>(comm) << 8;
  while (s.parts < n) {
    char* part = buf + static_cast<size_t>(s.parts) * len;
    const uint64_t part_bits = comm_bits + static_cast<uint64_t>(s.parts);
    const Post p =
        send ? check(f.send(part, len, smr_, my_tag_ + part_bits, &ops[s.parts], &err_))
             : check(f.recv(part, len, rmr_, peer_tag_ + part_bits, &ops[s.parts], &err_));
    if (p == Post::kRetry) return p;
    ++s.parts;
  }
  return Post::kPosted;
}

Xport::Post RawXport::post_send(int slot, int comm, char* buf, size_t len, int n) {
  return post(true, slot, comm, buf, len, n);
}

Xport::Post RawXport::post_recv(int slot, int comm, char* buf, size_t cap, int n) {
  return post(false, slot, comm, buf, cap, n);
}

bool RawXport::poll(int slot, size_t* lens) {
  Slot& s = slots_[static_cast<size_t>(slot)];
  nfc::RawFabric& f = *fab_;
  nfc::RawOp* ops = &ops_[static_cast<size_t>(slot) * static_cast<size_t>(group_)];
  bool progressed = false;
  for (int i = 0; i < s.n; ++i) {
    if (!ops[i].done) {
      if (!progressed && !f.progress(&err_)) fail("raw libfabric: " + err_);
      progressed = true;
      if (!ops[i].done) return false;
    }
    if (ops[i].err != 0) fail("raw libfabric: " + f.op_error());
  }
  for (int i = 0; i < s.n; ++i) lens[i] = ops[i].len;
  s.parts = 0;
  return true;
}

}  // namespace nfp

// A broken or hostile peer (issue 22; docs/protocol.md, "What a peer cannot do"): a raw endpoint
// of the test's own (hostile_peer.h) completes a real handshake with the plugin on the mock EFA
// provider and on tcp;ofi_rxm, then misbehaves. For each misdeed the plugin fails the request or
// comm it touches, or ignores the message; it writes nothing outside the buffers it was given
// (every buffer has canaries on both sides, outside its registration), keeps serving a second,
// well-behaved connection on the same endpoint, and neither crashes nor waits without a bound.
#include <catch2/catch.hpp>

#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "core/ctrl.h"
#include "harness.h"
#include "hostile_peer.h"
#include "mockprov/mockefa.h"
#include "wire/wire.h"

using namespace nft;
using nf::AckMsg;
using nf::AckStatus;
using nf::ConnectMsg;
using nf::ctrl_hdr;
using nf::CtrlHdr;
using nf::CtsMsg;
using nf::CtsWire;
using nf::NoticeMsg;
using nf::WireHandle;

namespace {

using Clock = std::chrono::steady_clock;
double secs_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// A buffer NCCL would give the plugin, with 4 KiB canaries before and after it.
struct Guarded {
  static constexpr size_t kGuard = 4096;
  static constexpr uint8_t kCanary = 0xa5;
  std::vector<uint8_t> mem;
  size_t n;
  explicit Guarded(size_t size) : mem(size + 2 * kGuard, 0), n(size) {
    for (size_t i = 0; i < kGuard; ++i) mem[i] = mem[mem.size() - 1 - i] = kCanary;
  }
  uint8_t* buf() { return mem.data() + kGuard; }
  bool intact() const {
    for (size_t i = 0; i < kGuard; ++i)
      if (mem[i] != kCanary || mem[kGuard + n + i] != kCanary) return false;
    return true;
  }
};

// Polls one request until it ends: 1 done, -1 failed, 0 still pending after timeout_ms.
int outcome(nfc::NetPlugin& p, void* req, int timeout_ms, int* size = nullptr,
            Hostile* h = nullptr) {
  const auto start = Clock::now();
  for (;;) {
    int done = 0;
    int sizes[8] = {0};
    if (p.test(req, &done, sizes) != ncclSuccess) return -1;
    if (done) {
      if (size) *size = sizes[0];
      return 1;
    }
    if (h) h->poll();
    if (secs_since(start) * 1000 > timeout_ms) return 0;
  }
}

// A well-behaved pair on the same device: one message each size, checked.
int legit_transfer(nfc::NetPlugin& p, void* sc, void* rc, int round) {
  for (size_t size : {size_t{100}, size_t{100000}}) {
    Guarded s(size), r(size);
    fill(s.buf(), size, round, static_cast<int>(size));
    void *smh = nullptr, *rmh = nullptr;
    CHILD_CHECK(p.reg_mr(sc, s.buf(), size, NCCL_PTR_HOST, &smh) == ncclSuccess, "regMr");
    CHILD_CHECK(p.reg_mr(rc, r.buf(), size, NCCL_PTR_HOST, &rmh) == ncclSuccess, "regMr");
    void* data[1] = {r.buf()};
    size_t caps[1] = {size};
    int tags[1] = {9};
    void* mhs[1] = {rmh};
    void *rr = nullptr, *sr = nullptr;
    CHILD_CHECK(post_recv(p, rc, 1, data, caps, tags, mhs, &rr) == 0, "legit irecv");
    CHILD_CHECK(post_send(p, sc, s.buf(), size, 9, smh, &sr) == 0, "legit isend");
    std::vector<void*> reqs = {sr, rr};
    std::vector<int> sizes;
    CHILD_CHECK(wait_all(p, reqs, &sizes) == 0, "the well-behaved connection stopped working");
    CHILD_CHECK(sizes[1] == static_cast<int>(size) &&
                    verify(r.buf(), size, round, static_cast<int>(size)) == SIZE_MAX,
                "the well-behaved connection's data");
    CHILD_CHECK(r.intact() && s.intact(), "canaries of the well-behaved connection");
    p.dereg_mr(sc, smh);
    p.dereg_mr(rc, rmh);
  }
  return 0;
}

// The hostile peer connects to a listen comm of the plugin as a sender: *rc is the plugin's recv
// comm for it. `token_ok` false: the connect carries a wrong token (and is refused).
int hostile_connect(nfc::NetPlugin& p, Hostile& h, void* listen, const uint8_t* handle,
                    uint32_t my_id, void** rc, HostileConn* conn) {
  WireHandle wh;
  std::string why;
  CHILD_CHECK(nf::decode_handle(handle, &wh, &why), "handle: %s", why.c_str());
  conn->peer = h.insert(wh.addr, wh.addr_len);
  CHILD_CHECK(conn->peer != FI_ADDR_NOTAVAIL, "fi_av_insert of the plugin's address");
  conn->dst = wh.listen_id;
  conn->src = my_id;
  ConnectMsg cm;
  nf::encode_connect(wh, my_id, 0x5eed0000u + my_id, h.addr(), h.addr_len(), &cm);
  uint8_t rails[nf::kMaxRails - 1][nf::kMaxAddrLen] = {};
  conn->my_cookie = 0xc0c00000u + my_id;
  nf::encode_proto(nf::kProtoRdma, 1, 0, h.addr_len(), rails, conn->my_cookie, &cm.proto);
  *rc = nullptr;
  h.poke = [&]() {
    if (*rc == nullptr) p.accept(listen, rc);
  };
  CHILD_CHECK(h.send_ctrl(conn->peer, ctrl_hdr(nf::kCtrlConnect, conn->dst, my_id), &cm, sizeof cm),
              "connect: %s", h.last_error.c_str());
  Hostile::Msg m;
  CHILD_CHECK(h.wait_msg(nf::kCtrlAck, &m, 20000, my_id), "no handshake reply");
  const auto start = Clock::now();
  while (*rc == nullptr && secs_since(start) < 20) p.accept(listen, rc);
  CHILD_CHECK(*rc != nullptr, "accept never returned the comm");
  h.poke = nullptr;
  AckMsg a;
  memset(&a, 0, sizeof a);
  const size_t len = m.b.size() - nf::kCtrlHdrSize;
  memcpy(&a, m.b.data() + nf::kCtrlHdrSize, len < sizeof a ? len : sizeof a);
  CHILD_CHECK(nf::decode_ack(a, len, &why), "ack: %s", why.c_str());
  CHILD_CHECK(a.status == static_cast<uint16_t>(AckStatus::kOk), "refused: %u", a.status);
  conn->dst = a.recv_id;  // the plugin's recv comm for this connection (wire version 6)
  conn->cookie = a.proto.cookie;
  conn->eager_max = a.proto.eager_max;
  conn->compact = (a.proto.flags & nf::kProtoFlagCompactEager) != 0;
  return 0;
}

bool eager(Hostile& h, const HostileConn& c, int tag, uint32_t index, const void* data,
           size_t len) {
  return h.send_ctrl(c.peer, ctrl_hdr(nf::kCtrlEager, c.dst, c.cookie, tag, index), data, len);
}

// A receive of one guarded buffer of `size` bytes with `tag`.
struct Recv {
  Guarded g;
  void* mh = nullptr;
  void* req = nullptr;
  explicit Recv(size_t size) : g(size) {}
  int post(nfc::NetPlugin& p, void* rc, int tag) {
    CHILD_CHECK(p.reg_mr(rc, g.buf(), g.n, NCCL_PTR_HOST, &mh) == ncclSuccess, "regMr");
    void* data[1] = {g.buf()};
    size_t caps[1] = {g.n};
    int tags[1] = {tag};
    void* mhs[1] = {mh};
    CHILD_CHECK(post_recv(p, rc, 1, data, caps, tags, mhs, &req) == 0, "irecv");
    return 0;
  }
};

// Waits for the plugin's next clear-to-send and decodes it.
int await_cts(Hostile& h, CtsMsg* cts) {
  Hostile::Msg m;
  CHILD_CHECK(h.wait_msg(nf::kCtrlCts, &m, 10000), "no clear-to-send");
  std::string why;
  CHILD_CHECK(
      nf::decode_cts(m.b.data() + nf::kCtrlHdrSize, m.b.size() - nf::kCtrlHdrSize, cts, &why),
      "the plugin's CTS: %s", why.c_str());
  return 0;
}

// The CQ data of a write of `len` bytes: the immediate, and with 8 bytes of CQ data the length.
uint64_t write_data(bool wide_imm, uint64_t len, uint64_t imm) {
  return wide_imm ? (len << 32) | imm : imm;
}

// Group A: the plugin receives from the hostile peer.
int attacks_on_receiver(nfc::NetPlugin& p, bool wide_imm) {
  Hostile h;
  std::string err;
  CHILD_CHECK(h.open(getenv("NCCL_FABRIC_PROVIDER"), &err), "hostile endpoint: %s", err.c_str());
  void *sc2 = nullptr, *rc2 = nullptr;
  CHILD_CHECK(mock_pair(p, nullptr, &sc2, &rc2) == 0, "the well-behaved pair");
  int round = 0;
  uint32_t next_id = 1000;
  // One hostile connection per misdeed that fails it; those that are ignored share one.
  auto fresh = [&](void** rc, HostileConn* c) -> int {
    uint8_t handle[nf::kHandleSize];
    void* listen = nullptr;
    CHILD_CHECK(p.listen(0, handle, &listen) == ncclSuccess, "listen");
    if (hostile_connect(p, h, listen, handle, next_id++, rc, c) != 0) return 1;
    CHILD_CHECK(p.close_listen(listen) == ncclSuccess, "closeListen");
    return 0;
  };
  void* rc = nullptr;
  HostileConn c;
  if (fresh(&rc, &c) != 0) return 1;
  std::vector<uint8_t> junk(20000);
  for (size_t i = 0; i < junk.size(); ++i) junk[i] = static_cast<uint8_t>(i * 7);

  // 1. An eager message longer than the receive buffer: that receive fails, nothing lands.
  {
    Recv r(100);
    if (r.post(p, rc, 1) != 0) return 1;
    CHILD_CHECK(eager(h, c, 1, 0, junk.data(), 200), "send");
    CHILD_CHECK(outcome(p, r.req, 10000, nullptr, &h) == -1,
                "an oversized eager message: the receive did not fail");
    for (size_t i = 0; i < r.g.n; ++i) CHILD_CHECK(r.g.buf()[i] == 0, "byte %zu written", i);
    CHILD_CHECK(r.g.intact(), "canaries");
    p.dereg_mr(rc, r.mh);
    p.close_recv(rc);
  }
  if (legit_transfer(p, sc2, rc2, round++) != 0) return 1;

  // 2. Messages that are ignored: for a comm that does not exist, of unknown kinds, of another
  // wire version, too short for a header, from another comm than the peer, a clear-to-send to a
  // receiver, malformed notices, a compact eager message where none was granted (mock), a
  // duplicate; then the right message still lands.
  if (fresh(&rc, &c) != 0) return 1;
  {
    Recv r(1000);
    if (r.post(p, rc, 2) != 0) return 1;
    CHILD_CHECK(
        h.send_ctrl(c.peer, ctrl_hdr(nf::kCtrlEager, 0x0abcdef, c.cookie, 2, 0), junk.data(), 50),
        "send");
    CtrlHdr bad = ctrl_hdr(nf::kCtrlEager, c.dst, c.cookie, 2, 0);
    bad.dst = (bad.dst & nf::kMaxCommId) | (9u << 28);  // kind 9
    CHILD_CHECK(h.send_ctrl(c.peer, bad, junk.data(), 50), "send");
    bad = ctrl_hdr(nf::kCtrlEager, c.dst, c.cookie, 2, 0);
    bad.src ^= 3u << 28;  // a version-6 eager message had the version where 7 has the cookie
    CHILD_CHECK(h.send_ctrl(c.peer, bad, junk.data(), 50), "send");
    CHILD_CHECK(h.send(c.peer, junk.data(), 8), "send");  // no whole header
    CHILD_CHECK(
        h.send_ctrl(c.peer, ctrl_hdr(nf::kCtrlEager, c.dst, c.cookie + 1, 2, 0), junk.data(), 50),
        "send");
    CHILD_CHECK(h.send_ctrl(c.peer, ctrl_hdr(nf::kCtrlCts, c.dst, c.cookie), junk.data(), 48),
                "send");
    NoticeMsg n = {0x12345678u, nf::kNoticeTooLarge, 5};
    CHILD_CHECK(h.send_ctrl(c.peer, ctrl_hdr(nf::kCtrlNotice, c.dst, c.cookie, 2, 0), &n, sizeof n),
                "send");
    n = {nf::kNoticeMagic, 77, 5};
    CHILD_CHECK(h.send_ctrl(c.peer, ctrl_hdr(nf::kCtrlNotice, c.dst, c.cookie, 2, 0), &n, sizeof n),
                "send");
    CHILD_CHECK(h.send_ctrl(c.peer, ctrl_hdr(nf::kCtrlNotice, c.dst, c.cookie, 2, 0), &n, 7),
                "send");
    CHILD_CHECK(h.send_ctrl(c.peer, ctrl_hdr(nf::kCtrlConnect, c.dst, c.src), junk.data(), 100),
                "send");
    CHILD_CHECK(h.send_ctrl(c.peer, ctrl_hdr(nf::kCtrlAck, c.dst, c.src), junk.data(), 100),
                "send");
    // A compact eager message where none was granted, or (granted) for a comm that does not
    // exist. A provider with 4 bytes of CQ data may refuse to send it at all.
    h.send(c.peer, junk.data(), 60, true,
           nf::compact_eager_data(c.compact ? 0x0abcdef : c.dst, 2, 0));
    h.pump(50);
    CHILD_CHECK(outcome(p, r.req, 0) == 0, "a receive ended on messages it should ignore");
    fill(junk.data(), 700, 1, 2);
    CHILD_CHECK(eager(h, c, 2, 0, junk.data(), 700), "send");
    int size = -1;
    CHILD_CHECK(outcome(p, r.req, 10000, &size, &h) == 1, "the right message did not land");
    CHILD_CHECK(size == 700 && verify(r.g.buf(), 700, 1, 2) == SIZE_MAX, "its content");
    CHILD_CHECK(r.g.intact(), "canaries");
    // The same message again: it belongs to no receive and is dropped; the next one lands.
    CHILD_CHECK(eager(h, c, 2, 0, junk.data(), 700), "send");
    Recv r2(1000);
    if (r2.post(p, rc, 2) != 0) return 1;
    h.pump(20);
    CHILD_CHECK(outcome(p, r2.req, 0) == 0, "a duplicate message landed in the next receive");
    fill(junk.data(), 300, 1, 3);
    CHILD_CHECK(eager(h, c, 2, 1, junk.data(), 300), "send");
    CHILD_CHECK(outcome(p, r2.req, 10000, &size, &h) == 1 && size == 300 &&
                    verify(r2.g.buf(), 300, 1, 3) == SIZE_MAX,
                "the message after a duplicate");
    CHILD_CHECK(r2.g.intact(), "canaries");
    p.dereg_mr(rc, r.mh);
    p.dereg_mr(rc, r2.mh);
  }
  if (legit_transfer(p, sc2, rc2, round++) != 0) return 1;

  // 3. RDMA writes whose immediate data names no receive (slot out of range, wrong generation)
  // are ignored; with 8 bytes of CQ data, a write that claims more bytes than the buffer holds
  // fails the receive. The plugin's clear-to-send names the buffer; the peer's writes stay inside
  // it (the provider checks the key and the bounds).
  {
    const size_t size = 100000;  // above the eager limit: a clear-to-send comes
    Recv r(size);
    if (r.post(p, rc, 3) != 0) return 1;
    CtsMsg cts;
    if (await_cts(h, &cts) != 0) return 1;
    CHILD_CHECK(cts.h.n == 1 && cts.e[0].size == size, "the CTS names the buffer");
    fill(junk.data(), 4000, 2, 4);
    const uint64_t imm_wrong_slot = nf::imm_encode((cts.h.slot + 1) & 0xffff, 0, 1, cts.h.gen);
    const uint64_t imm_wrong_gen = nf::imm_encode(cts.h.slot, 0, 1, (cts.h.gen + 1) & nf::kMaxGen);
    for (uint64_t imm : {imm_wrong_slot, imm_wrong_gen}) {
      const uint64_t d = write_data(wide_imm, 4000, imm);
      h.write(c.peer, junk.data(), 4000, cts.e[0].addr, cts.e[0].key[0], d);
    }
    h.pump(20);
    CHILD_CHECK(outcome(p, r.req, 0) == 0, "a write naming no receive completed it");
    CHILD_CHECK(r.g.intact(), "canaries");
    if (wide_imm) {
      const uint64_t imm = nf::imm_encode(cts.h.slot, 0, 1, cts.h.gen);
      h.write(c.peer, junk.data(), 4000, cts.e[0].addr, cts.e[0].key[0],
              write_data(true, size + 5000, imm));
      CHILD_CHECK(outcome(p, r.req, 10000, nullptr, &h) == -1,
                  "a write claiming more than the buffer: the receive did not fail");
    } else {
      const uint64_t imm = nf::imm_encode(cts.h.slot, 0, 1, cts.h.gen);
      h.write(c.peer, junk.data(), 4000, cts.e[0].addr, cts.e[0].key[0], imm);
      int got = -1;
      CHILD_CHECK(outcome(p, r.req, 10000, &got, &h) == 1 && got == 4000,
                  "the right write after wrong ones");
      CHILD_CHECK(verify(r.g.buf(), 4000, 2, 4) == SIZE_MAX, "its content");
    }
    // A write naming a buffer the receive does not have (entry 5 of a group of 1) fails it.
    Recv r2(size);
    if (r2.post(p, rc, 3) != 0) return 1;
    if (await_cts(h, &cts) != 0) return 1;
    const uint64_t imm5 = nf::imm_encode(cts.h.slot, 5, 1, cts.h.gen);
    h.write(c.peer, junk.data(), 4000, cts.e[0].addr, cts.e[0].key[0],
            write_data(wide_imm, 4000, imm5));
    const int res5 = outcome(p, r2.req, 10000, nullptr, &h);
    CHILD_CHECK(res5 == -1,
                "a write naming a buffer the receive does not have: it did not fail (%d; CTS slot "
                "%u gen %u size %llu; write: %s)",
                res5, cts.h.slot, cts.h.gen, static_cast<unsigned long long>(cts.e[0].size),
                h.last_error.c_str());
    CHILD_CHECK(r2.g.intact(), "canaries");
    p.dereg_mr(rc, r.mh);
    p.dereg_mr(rc, r2.mh);
    p.close_recv(rc);
  }
  if (legit_transfer(p, sc2, rc2, round++) != 0) return 1;

  // 4. An eager message far ahead of every receive fails the connection (it would hold a control
  // buffer forever); so do more than 512 held at once.
  // What the peer sent fails the connection: a receive posted now (with a tag the peer did not
  // use: it waits) fails, or irecv itself does. Then the comm is closed.
  auto fails_comm = [&](const char* what) -> int {
    Recv r(100);
    h.pump(20);
    CHILD_CHECK(p.reg_mr(rc, r.g.buf(), 100, NCCL_PTR_HOST, &r.mh) == ncclSuccess, "regMr");
    void* data[1] = {r.g.buf()};
    size_t caps[1] = {100};
    int tags[1] = {55};
    void* mhs[1] = {r.mh};
    void* req = nullptr;
    const ncclResult_t res = p.irecv(rc, 1, data, caps, tags, mhs, &req);
    CHILD_CHECK(res != ncclSuccess || (req != nullptr && outcome(p, req, 10000) == -1),
                "%s: the connection did not fail", what);
    CHILD_CHECK(r.g.intact(), "canaries");
    p.dereg_mr(rc, r.mh);
    p.close_recv(rc);
    return 0;
  };
  if (fresh(&rc, &c) != 0) return 1;
  CHILD_CHECK(eager(h, c, 4, 1u << 20, junk.data(), 10), "send");
  if (fails_comm("an eager message 2^20 ahead") != 0) return 1;
  if (fresh(&rc, &c) != 0) return 1;
  for (uint32_t i = 0; i < 600; ++i) CHILD_CHECK(eager(h, c, 5, i, junk.data(), 16), "send");
  if (fails_comm("600 eager messages held") != 0) return 1;
  if (legit_transfer(p, sc2, rc2, round++) != 0) return 1;

  // 5. A message longer than any control buffer: the comm it names fails (or it is ignored);
  // nothing else does.
  if (fresh(&rc, &c) != 0) return 1;
  {
    Recv r(20000);
    if (r.post(p, rc, 6) != 0) return 1;
    std::vector<uint8_t> big(nf::kCtrlHdrSize + 18000);
    const CtrlHdr hh = ctrl_hdr(nf::kCtrlEager, c.dst, c.cookie, 6, 0);
    memcpy(big.data(), &hh, sizeof hh);
    h.send(c.peer, big.data(), big.size());
    h.pump(50);
    CHILD_CHECK(outcome(p, r.req, 0) != 1, "a message larger than the eager limit landed");
    CHILD_CHECK(r.g.intact(), "canaries");
    p.dereg_mr(rc, r.mh);
    p.close_recv(rc);
  }
  if (legit_transfer(p, sc2, rc2, round++) != 0) return 1;

  // 6. Writes outside the buffer a clear-to-send named: refused by the provider (the key covers
  // that buffer alone, not even the rest of its pages). Last: tcp;ofi_rxm drops the connection
  // of a peer that tries.
  if (fresh(&rc, &c) != 0) return 1;
  {
    const size_t size = 100000;
    Recv r(size);
    if (r.post(p, rc, 3) != 0) return 1;
    CtsMsg cts;
    if (await_cts(h, &cts) != 0) return 1;
    const uint64_t imm = nf::imm_encode(cts.h.slot, 0, 1, cts.h.gen);
    h.write(c.peer, junk.data(), 100, cts.e[0].addr + size, cts.e[0].key[0],
            write_data(wide_imm, 100, imm));
    h.write(c.peer, junk.data(), 100, cts.e[0].addr - 200, cts.e[0].key[0],
            write_data(wide_imm, 100, imm));
    h.pump(20);
    CHILD_CHECK(r.g.intact(), "canaries after writes outside the buffer");
    p.dereg_mr(rc, r.mh);
    p.close_recv(rc);
  }
  if (legit_transfer(p, sc2, rc2, round++) != 0) return 1;
  CHILD_CHECK(p.close_send(sc2) == ncclSuccess && p.close_recv(rc2) == ncclSuccess, "close");
  return 0;
}

// The hostile peer as a listener: a handle of ours that the plugin connects to; *sc is the
// plugin's send comm. The ack grants `eager_max`.
int hostile_accept(nfc::NetPlugin& p, Hostile& h, uint32_t my_id, uint32_t eager_max, void** sc,
                   HostileConn* conn) {
  // The provider hash the plugin expects: from a handle of its own.
  uint8_t own[nf::kHandleSize];
  void* l = nullptr;
  CHILD_CHECK(p.listen(0, own, &l) == ncclSuccess, "listen");
  WireHandle wh;
  std::string why;
  CHILD_CHECK(nf::decode_handle(own, &wh, &why), "handle: %s", why.c_str());
  p.close_listen(l);
  uint8_t handle[nf::kHandleSize];
  nf::encode_handle(0x1234567890ull + my_id, wh.provider_hash, my_id, h.addr(), h.addr_len(),
                    handle);
  *sc = nullptr;
  h.poke = [&]() {
    if (*sc == nullptr) p.connect(0, handle, sc);
  };
  h.poke();
  Hostile::Msg m;
  CHILD_CHECK(h.wait_msg(nf::kCtrlConnect, &m, 20000), "no connect came");
  ConnectMsg cm;
  memset(&cm, 0, sizeof cm);
  const size_t len = m.b.size() - nf::kCtrlHdrSize;
  memcpy(&cm, m.b.data() + nf::kCtrlHdrSize, len < sizeof cm ? len : sizeof cm);
  bool bad_version = false;
  CHILD_CHECK(nf::decode_connect(cm, len, &why, &bad_version), "connect: %s", why.c_str());
  conn->peer = h.insert(cm.addr, cm.addr_len);
  conn->dst = cm.sender_id;
  conn->src = my_id;
  conn->cookie = cm.proto.cookie;
  conn->my_cookie = 0xacce0000u + my_id;
  AckMsg a;
  nf::encode_ack(cm, AckStatus::kOk, &a);
  nf::set_ack_recv_id(&a, my_id);
  uint8_t rails[nf::kMaxRails - 1][nf::kMaxAddrLen] = {};
  nf::encode_proto(nf::kProtoRdma, 1, eager_max, h.addr_len(), rails, conn->my_cookie, &a.proto);
  CHILD_CHECK(h.send_ctrl(conn->peer, ctrl_hdr(nf::kCtrlAck, conn->dst, my_id), &a, sizeof a),
              "ack");
  const auto start = Clock::now();
  while (*sc == nullptr && secs_since(start) < 20) p.connect(0, handle, sc);
  h.poke = nullptr;
  CHILD_CHECK(*sc != nullptr, "connect never returned the comm");
  return 0;
}

// A clear-to-send of one buffer, as the test wants it (then broken by the caller).
CtsMsg one_cts(int tag, uint32_t index, uint64_t size, const Hostile::Region& reg, uint16_t slot) {
  CtsMsg m;
  memset(&m, 0, sizeof m);
  m.h.magic = nf::kCtsMagic;
  m.h.version = nf::kWireVersion;
  m.h.n = 1;
  m.h.nrails = 1;
  m.h.gen = 1;
  m.h.slot = slot;
  m.e[0].tag = tag;
  m.e[0].index = index;
  m.e[0].size = size;
  m.e[0].addr = reg.addr;
  m.e[0].key[0] = reg.key;
  return m;
}

bool send_cts(Hostile& h, const HostileConn& c, const CtsMsg& m, size_t cut = 0, bool raw = false,
              const void* raw_bytes = nullptr, size_t raw_len = 0) {
  CtsWire w;
  size_t len;
  if (raw) {
    memcpy(w.b, raw_bytes, raw_len);
    len = raw_len;
  } else {
    len = nf::encode_cts(m, w.b) - cut;
  }
  return h.send_ctrl(c.peer, ctrl_hdr(nf::kCtrlCts, c.dst, c.cookie), w.b, len);
}

// Group B: the plugin sends to the hostile peer, which answers with clear-to-sends of its making.
int attacks_on_sender(nfc::NetPlugin& p) {
  Hostile h;
  std::string err;
  CHILD_CHECK(h.open(getenv("NCCL_FABRIC_PROVIDER"), &err), "hostile endpoint: %s", err.c_str());
  void *sc2 = nullptr, *rc2 = nullptr;
  CHILD_CHECK(mock_pair(p, nullptr, &sc2, &rc2) == 0, "the well-behaved pair");
  Hostile::Region reg;
  CHILD_CHECK(h.region(1 << 20, &reg, &err), "%s", err.c_str());
  const size_t kSend = 65536;
  Guarded src(kSend);
  fill(src.buf(), kSend, 3, 1);
  uint32_t id = 2000;
  int round = 10;

  // Each case on a connection of its own: (name, how the CTS is made, whether the send must fail).
  struct Case {
    const char* name;
    int what;
  };
  const Case cases[] = {
      {"a key of another registration", 1},
      {"an address outside the peer's registration", 2},
      {"a buffer smaller than the message", 3},
      {"a buffer larger than the message", 4},
      {"n = 0", 5},
      {"n = 9", 6},
      {"nrails = 5", 7},
      {"a generation above 511", 8},
      {"a length that is not the entries'", 9},
      {"address + size wrapping", 10},
      {"another magic", 11},
      {"another version", 12},
      {"the same CTS twice", 13},
      {"another tag", 14},
      {"an index ahead", 15},
      {"keys for 2 rails on a connection of 1", 16},
  };
  for (const Case& k : cases) {
    void* sc = nullptr;
    HostileConn c;
    if (hostile_accept(p, h, id++, 0, &sc, &c) != 0) return 1;
    void* mh = nullptr;
    CHILD_CHECK(p.reg_mr(sc, src.buf(), kSend, NCCL_PTR_HOST, &mh) == ncclSuccess, "regMr");
    memset(reg.mem.data(), 0x5a, reg.mem.size());
    const size_t off = 4096;  // the CTS's buffer starts here; what is before and after stays 0x5a
    Hostile::Region at = reg;
    at.addr = reg.addr + off;
    CtsMsg m = one_cts(7, 0, kSend, at, 3);
    bool sent = true;
    switch (k.what) {
      case 1: m.e[0].key[0] = reg.key + 12345; break;
      case 2: m.e[0].addr = reg.addr + reg.mem.size() + 65536; break;
      case 3: m.e[0].size = kSend / 2; break;
      case 4: m.e[0].size = kSend * 4; break;
      case 5: {
        uint8_t b[64];
        nf::encode_cts(m, b);
        b[6] = 0;
        sent = send_cts(h, c, m, 0, true, b, nf::cts_size(1, 1));
        break;
      }
      case 6: {
        uint8_t b[nf::kCtsMaxSize + 64] = {};
        nf::encode_cts(m, b);
        b[6] = 9;
        sent = send_cts(h, c, m, 0, true, b, nf::cts_size(8, 1) + nf::cts_entry_size(1));
        break;
      }
      case 7: {
        uint8_t b[nf::kCtsMaxSize + 64] = {};
        nf::encode_cts(m, b);
        b[7] = 5;
        sent = send_cts(h, c, m, 0, true, b, nf::cts_size(1, 5));
        break;
      }
      case 8: m.h.gen = 600; break;
      case 9: sent = send_cts(h, c, m, 8); break;
      case 10: m.e[0].addr = ~uint64_t{0} - 100; break;
      case 11: m.h.magic = 0x11111111u; break;
      case 12: m.h.version = 3; break;
      case 14: m.e[0].tag = 8; break;
      case 15: m.e[0].index = 1000; break;
      case 16:
        m.h.nrails = 2;
        m.e[0].key[1] = reg.key;
        break;
      default: break;
    }
    if (k.what == 8 || k.what == 10 || k.what == 11 || k.what == 12) {
      // Fields the encoder would not write: set after encoding.
      CtsWire w;
      CtsMsg ok = m;
      ok.h.gen = 1;
      const size_t len = nf::encode_cts(ok, w.b);
      if (k.what == 8) memcpy(w.b + 8, &m.h.gen, 4);
      if (k.what == 10) memcpy(w.b + 16 + 16, &m.e[0].addr, 8);
      if (k.what == 11) memcpy(w.b, &m.h.magic, 4);
      if (k.what == 12) memcpy(w.b + 4, &m.h.version, 2);
      sent = send_cts(h, c, m, 0, true, w.b, len);
    } else if (k.what < 5 || k.what >= 13) {
      sent = send_cts(h, c, m);
      if (k.what == 13) sent = sent && send_cts(h, c, m);
    }
    CHILD_CHECK(sent, "%s: the CTS did not go: %s", k.name, h.last_error.c_str());
    h.pump(20);
    void* req = nullptr;
    const auto start = Clock::now();
    ncclResult_t res = ncclSuccess;
    while (req == nullptr && secs_since(start) < 0.3) {
      res = p.isend(sc, src.buf(), kSend, 7, mh, &req);
      if (res != ncclSuccess) break;
      h.poll();
    }
    int result = res != ncclSuccess ? -1 : req == nullptr ? 0 : outcome(p, req, 10000, nullptr, &h);
    h.pump(20);
    // What must have happened, and never outside the CTS's buffer.
    bool outside_ok = true;
    for (size_t i = 0; i < off; ++i) outside_ok = outside_ok && reg.mem[i] == 0x5a;
    const size_t end = off + kSend;
    for (size_t i = end; i < reg.mem.size(); ++i) outside_ok = outside_ok && reg.mem[i] == 0x5a;
    CHILD_CHECK(outside_ok, "%s: the plugin wrote outside the buffer the CTS named", k.name);
    CHILD_CHECK(src.intact(), "%s: canaries of the send buffer", k.name);
    switch (k.what) {
      case 1:
      case 2:
        // The provider refuses the write (the send fails), or reports it done at the initiator
        // and drops it at the target (tcp;ofi_rxm): either way nothing landed outside.
        CHILD_CHECK(result != 0, "%s: the send neither failed nor completed", k.name);
        break;
      case 3: CHILD_CHECK(result == -1, "%s: the send did not fail (%d)", k.name, result); break;
      case 13:
        // The second is refused (the connection fails) or ignored; the data is whole if it went.
        CHILD_CHECK(result != 0, "%s: the send neither failed nor completed", k.name);
        if (result == 1)
          CHILD_CHECK(verify(reg.mem.data() + off, kSend, 3, 1) == SIZE_MAX, "%s: data", k.name);
        break;
      case 4:
        CHILD_CHECK(result == 1, "%s: the send did not complete (%d)", k.name, result);
        CHILD_CHECK(verify(reg.mem.data() + off, kSend, 3, 1) == SIZE_MAX, "%s: data", k.name);
        break;
      default:
        // Refused: the send waits for a CTS that fits (or the connection failed); it never
        // completes into a buffer that was not offered for it.
        CHILD_CHECK(result != 1, "%s: the send completed on a malformed CTS", k.name);
        break;
    }
    p.dereg_mr(sc, mh);
    CHILD_CHECK(p.close_send(sc) == ncclSuccess, "%s: closeSend", k.name);
    if (legit_transfer(p, sc2, rc2, round++) != 0) {
      fprintf(stderr, "after: %s\n", k.name);
      return 1;
    }
  }
  h.release(&reg);
  CHILD_CHECK(p.close_send(sc2) == ncclSuccess && p.close_recv(rc2) == ncclSuccess, "close");
  return 0;
}

// Group C: handshakes that go wrong.
// Opens the hostile endpoint and a listen comm of the plugin (its handle in `handle`).
int open_and_listen(nfc::NetPlugin& p, Hostile& h, uint8_t* handle, void** listen) {
  std::string err;
  CHILD_CHECK(h.open(getenv("NCCL_FABRIC_PROVIDER"), &err), "hostile endpoint: %s", err.c_str());
  CHILD_CHECK(p.listen(0, handle, listen) == ncclSuccess, "listen");
  return 0;
}

int attacks_on_handshake(nfc::NetPlugin& p) {
  Hostile h;
  uint8_t handle[nf::kHandleSize];
  void* listen = nullptr;
  if (open_and_listen(p, h, handle, &listen) != 0) return 1;
  WireHandle wh;
  std::string why;
  CHILD_CHECK(nf::decode_handle(handle, &wh, &why), "handle: %s", why.c_str());
  const fi_addr_t to = h.insert(wh.addr, wh.addr_len);
  // 300 connects with wrong tokens, a truncated one, one of another version, one with a broken
  // checksum, and messages of other kinds before any peer was accepted: each refused or ignored.
  void* rc = nullptr;
  h.poke = [&]() {
    if (rc == nullptr) p.accept(listen, &rc);
  };
  for (uint32_t i = 0; i < 300; ++i) {
    WireHandle bad = wh;
    bad.token ^= 0x1000 + i;
    ConnectMsg cm;
    nf::encode_connect(bad, 3000 + i, i, h.addr(), h.addr_len(), &cm);
    uint8_t rails[nf::kMaxRails - 1][nf::kMaxAddrLen] = {};
    nf::encode_proto(nf::kProtoRdma, 1, 0, h.addr_len(), rails, 0x1000u + i, &cm.proto);
    if (i == 1) cm.checksum ^= 1;
    if (i == 2) cm.version = 99;
    const size_t len = i == 3 ? 100 : sizeof cm;
    CHILD_CHECK(h.send_ctrl(to, ctrl_hdr(nf::kCtrlConnect, wh.listen_id, 3000 + i), &cm, len),
                "connect %u", i);
    if (i % 50 == 0) {
      CHILD_CHECK(h.send_ctrl(to, ctrl_hdr(nf::kCtrlEager, wh.listen_id, 3000 + i, 1, 0), &cm, 64),
                  "eager before accept");
      CHILD_CHECK(h.send_ctrl(to, ctrl_hdr(nf::kCtrlCts, wh.listen_id, 3000 + i), &cm, 48),
                  "CTS before accept");
    }
  }
  h.pump(200);
  CHILD_CHECK(rc == nullptr, "accept returned a comm for a connect with a wrong token");
  // The plugin's own connect with the right handle is still accepted, and works.
  void* sc = nullptr;
  const auto start = Clock::now();
  while ((sc == nullptr || rc == nullptr) && secs_since(start) < 30) {
    if (sc == nullptr) CHILD_CHECK(p.connect(0, handle, &sc) == ncclSuccess, "connect");
    if (rc == nullptr) CHILD_CHECK(p.accept(listen, &rc) == ncclSuccess, "accept");
    h.poll();
  }
  h.poke = nullptr;
  CHILD_CHECK(sc != nullptr && rc != nullptr,
              "after a flood of bad connects the right one was not accepted");
  if (legit_transfer(p, sc, rc, 20) != 0) return 1;
  CHILD_CHECK(p.close_listen(listen) == ncclSuccess, "closeListen");

  // A connect that stops half-way: the handshake completes, then the peer sends nothing and
  // answers no probe. The receive fails at the peer timeout (NCCL_FABRIC_PEER_TIMEOUT=2).
  {
    h.answer_probes = false;
    void* l2 = nullptr;
    uint8_t h2[nf::kHandleSize];
    CHILD_CHECK(p.listen(0, h2, &l2) == ncclSuccess, "listen");
    void* rc3 = nullptr;
    HostileConn c;
    if (hostile_connect(p, h, l2, h2, 4000, &rc3, &c) != 0) return 1;
    p.close_listen(l2);
    Recv r(1000);
    if (r.post(p, rc3, 1) != 0) return 1;
    const auto t0 = Clock::now();
    const int res = outcome(p, r.req, 30000, nullptr, &h);
    CHILD_CHECK(res == -1, "a receive from a silent, unanswering peer did not fail (%d)", res);
    CHILD_CHECK(secs_since(t0) < 20, "it took %.1f s", secs_since(t0));
    CHILD_CHECK(r.g.intact(), "canaries");
    p.dereg_mr(rc3, r.mh);
    p.close_recv(rc3);
    h.answer_probes = true;
  }
  // A listener that never answers: connect fails at NCCL_FABRIC_CONNECT_TIMEOUT=2.
  {
    uint8_t own[nf::kHandleSize];
    void* l = nullptr;
    CHILD_CHECK(p.listen(0, own, &l) == ncclSuccess, "listen");
    CHILD_CHECK(nf::decode_handle(own, &wh, &why), "handle");
    p.close_listen(l);
    uint8_t mute[nf::kHandleSize];
    nf::encode_handle(42, wh.provider_hash, 77, h.addr(), h.addr_len(), mute);
    void* sc3 = nullptr;
    const auto t0 = Clock::now();
    ncclResult_t res = ncclSuccess;
    while (sc3 == nullptr && res == ncclSuccess && secs_since(t0) < 30) {
      res = p.connect(0, mute, &sc3);
      h.poll();
    }
    CHILD_CHECK(res != ncclSuccess, "connect to a listener that never answers did not fail");
    CHILD_CHECK(secs_since(t0) < 20, "it took %.1f s", secs_since(t0));
  }
  // The well-behaved pair still works.
  if (legit_transfer(p, sc, rc, 21) != 0) return 1;
  CHILD_CHECK(p.close_send(sc) == ncclSuccess && p.close_recv(rc) == ncclSuccess, "close");
  return 0;
}

// Issue 36, liveness from known peers only. A third party that learned the plugin's address (the
// handle's, as a same-host process could) sends (1) pongs with guessed tokens and sequence numbers
// while a real peer is silent: they must not keep that dead peer alive; (2) 10,000 pings that
// claim addresses the plugin never met: none is answered (no AV entry, no pong where a stranger
// chose); a well-behaved pair keeps working throughout. Before the fix the receive from the silent
// peer never failed (each forged pong restarted its clock) and every forged ping got a pong.
int attacks_on_liveness(nfc::NetPlugin& p, bool mock) {
  Hostile h, x;
  std::string err;
  CHILD_CHECK(h.open(getenv("NCCL_FABRIC_PROVIDER"), &err), "hostile endpoint: %s", err.c_str());
  CHILD_CHECK(x.open(getenv("NCCL_FABRIC_PROVIDER"), &err), "third party: %s", err.c_str());
  void *sc = nullptr, *rc = nullptr;
  if (mock_pair(p, nullptr, &sc, &rc) != 0) return 1;
  if (legit_transfer(p, sc, rc, 30) != 0) return 1;
  // A receive kept pending on the well-behaved pair: testing it progresses the plugin's endpoint
  // while the third party waits for its sends.
  Recv keep(64);
  if (keep.post(p, rc, 77) != 0) return 1;
  x.poke = [&]() {
    int done = 0, sizes[8] = {0};
    p.test(keep.req, &done, sizes);
  };
  // (1) The silent peer, and forged pongs from the third party every 20 ms.
  h.answer_probes = false;
  void* l2 = nullptr;
  uint8_t h2[nf::kHandleSize];
  CHILD_CHECK(p.listen(0, h2, &l2) == ncclSuccess, "listen");
  WireHandle wh;
  std::string why;
  CHILD_CHECK(nf::decode_handle(h2, &wh, &why), "handle: %s", why.c_str());
  const fi_addr_t victim = x.insert(wh.addr, wh.addr_len);
  CHILD_CHECK(victim != FI_ADDR_NOTAVAIL, "the third party's fi_av_insert of the plugin");
  void* rc3 = nullptr;
  HostileConn c;
  if (hostile_connect(p, h, l2, h2, 5000, &rc3, &c) != 0) return 1;
  p.close_listen(l2);
  Recv r(1000);
  if (r.post(p, rc3, 1) != 0) return 1;
  const auto t0 = Clock::now();
  auto last_pongs = Clock::now() - std::chrono::seconds(1);
  int res = 0;
  uint64_t forged = 0;
  while (res == 0 && secs_since(t0) < 15) {
    res = outcome(p, r.req, 5, nullptr, &h);
    if (res != 0 || std::chrono::duration<double>(Clock::now() - last_pongs).count() < 0.02)
      continue;
    last_pongs = Clock::now();
    for (uint32_t token = 0; token < 4; ++token) {
      for (uint64_t seq : {uint64_t{1}, uint64_t{2}, forged + 1}) {
        nf::ProbeMsg m;
        memset(&m, 0, sizeof m);
        m.magic = nf::kProbeMagic;
        m.version = nf::kWireVersion;
        m.kind = nf::kProbePong;
        m.token = token;
        m.seq = seq;
        CHILD_CHECK(x.send_ctrl(victim, ctrl_hdr(nf::kCtrlProbe, 0, 0), &m, nf::kProbeFixed),
                    "forged pong");
      }
    }
    ++forged;
  }
  CHILD_CHECK(res == -1,
              "forged pongs kept a silent peer alive: its receive did not fail in %.1f s (%d)",
              secs_since(t0), res);
  CHILD_CHECK(r.g.intact(), "canaries");
  p.dereg_mr(rc3, r.mh);
  p.close_recv(rc3);
  // (2) 10,000 pings from addresses the plugin never met. On tcp they name 127.0.0.1 ports (a
  // pong, were one sent, stays on this host); on the mock, random EFA addresses.
  mockefa_api api{};
  uint64_t tx_before = 0;
  if (mock) {
    CHILD_CHECK(mockefa_load_api(getenv("NF_MOCKPROV_LIB"), &api) == 0, "mock API");
    mockefa_counters cn;
    api.get_counters(&cn);
    tx_before = cn.tx_posted;
  }
  std::mt19937_64 rng(36);
  for (int i = 0; i < 10000; ++i) {
    nf::ProbeMsg m;
    memset(&m, 0, sizeof m);
    m.magic = nf::kProbeMagic;
    m.version = nf::kWireVersion;
    m.kind = nf::kProbePing;
    m.token = static_cast<uint32_t>(i);
    m.seq = static_cast<uint64_t>(i) + 1;
    m.addr_len = static_cast<uint8_t>(h.addr_len());
    for (size_t b = 0; b < m.addr_len; ++b) m.addr[b] = static_cast<uint8_t>(rng());
    if (!mock) {
      sockaddr_in sa{};
      sa.sin_family = AF_INET;
      sa.sin_port = htons(static_cast<uint16_t>(30000 + rng() % 30000));
      sa.sin_addr.s_addr = htonl(0x7f000001);
      memset(m.addr, 0, sizeof m.addr);
      memcpy(m.addr, &sa, sizeof sa);
      m.addr_len = static_cast<uint8_t>(sizeof sa);
    }
    CHILD_CHECK(
        x.send_ctrl(victim, ctrl_hdr(nf::kCtrlProbe, 0, 0), &m, nf::kProbeFixed + m.addr_len),
        "forged ping %d", i);
    if (i % 500 == 0 && legit_transfer(p, sc, rc, 31) != 0) return 1;
  }
  x.pump(200);
  {
    Guarded sb(64);
    void* smh = nullptr;
    void* sr = nullptr;
    CHILD_CHECK(p.reg_mr(sc, sb.buf(), 64, NCCL_PTR_HOST, &smh) == ncclSuccess, "regMr");
    CHILD_CHECK(post_send(p, sc, sb.buf(), 64, 77, smh, &sr) == 0, "isend");
    std::vector<void*> reqs = {sr, keep.req};
    std::vector<int> sizes;
    CHILD_CHECK(wait_all(p, reqs, &sizes) == 0, "the kept receive");
    p.dereg_mr(sc, smh);
    p.dereg_mr(rc, keep.mh);
  }
  if (mock) {
    mockefa_counters cn;
    api.get_counters(&cn);
    // The mock counts every endpoint of the process: the third party's 10,000 pings, and the
    // plugin's own posts for the legit transfers (a few dozen each, 20 transfers). A pong per
    // ping would add 10,000 more.
    const uint64_t plugin_posts = cn.tx_posted - tx_before - 10000;
    CHILD_CHECK(plugin_posts < 2000,
                "the plugin posted %llu sends during a flood of 10,000 pings from strangers",
                static_cast<unsigned long long>(plugin_posts));
  }
  if (legit_transfer(p, sc, rc, 32) != 0) return 1;
  CHILD_CHECK(p.close_send(sc) == ncclSuccess && p.close_recv(rc) == ncclSuccess, "close");
  return 0;
}

// The statistics file's unsolicited.wrong_cookie (NCCL_FABRIC_STATS, written every second here),
// once it is at least `at_least` (up to 10 s); 0 without the file.
unsigned long long stats_wrong_cookie(Hostile& h, unsigned long long at_least) {
  const char* stats = getenv("NCCL_FABRIC_STATS");
  if (stats == nullptr || *stats == 0) return 0;
  std::string path(stats);
  const size_t at = path.find("%p");
  if (at != std::string::npos) path.replace(at, 2, std::to_string(getpid()));
  unsigned long long counted = 0;
  h.pump(1500);  // the file is rewritten every second: this read sees what came before the call
  const auto t0 = Clock::now();
  do {
    h.pump(100);
    FILE* f = fopen(path.c_str(), "r");
    if (f == nullptr) continue;
    char buf[8192];
    const size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    const char* w = strstr(buf, "\"wrong_cookie\": ");
    if (w != nullptr) counted = strtoull(w + 16, nullptr, 10);
  } while (counted < at_least && secs_since(t0) < 10);
  return counted;
}

// Issue 36, every message tied to its connection. A third party that learned the plugin's
// address (a listen handle's, as a same-host process could) sends, before each real message of a
// well-behaved pair, messages that claim to belong to that pair's connection: clear-to-sends naming
// a region of its own, eager messages for the message's tag and index (ahead of the real sender),
// too-large notices for it, and (where the provider carries 8 bytes of CQ data) compact eager
// messages. It guesses the receiving comm id (1..16: ids count up from 1) and the header's second
// word (0..16: before wire version 7 the sending comm's id, since then the connection's cookie).
// Every byte NCCL receives must be the real sender's, the plugin must write nothing into the third
// party's region, and the pair must keep working. Before the fix the forged eager messages landed
// in NCCL's buffer, the forged clear-to-sends drew the plugin's writes, and the notices failed the
// receive.
int attacks_on_connections(nfc::NetPlugin& p) {
  Hostile x;
  std::string err;
  CHILD_CHECK(x.open(getenv("NCCL_FABRIC_PROVIDER"), &err), "third party: %s", err.c_str());
  void *sc = nullptr, *rc = nullptr;
  if (mock_pair(p, nullptr, &sc, &rc) != 0) return 1;
  if (legit_transfer(p, sc, rc, 40) != 0) return 1;
  void* l = nullptr;
  uint8_t handle[nf::kHandleSize];
  CHILD_CHECK(p.listen(0, handle, &l) == ncclSuccess, "listen");
  WireHandle wh;
  std::string why;
  CHILD_CHECK(nf::decode_handle(handle, &wh, &why), "handle: %s", why.c_str());
  const fi_addr_t victim = x.insert(wh.addr, wh.addr_len);
  CHILD_CHECK(victim != FI_ADDR_NOTAVAIL, "the third party's fi_av_insert of the plugin");
  Hostile::Region reg;
  CHILD_CHECK(x.region(1 << 20, &reg, &err), "%s", err.c_str());
  // A receive kept pending on the pair (another tag): testing it progresses the plugin while the
  // third party waits for its sends.
  Recv keep(64);
  if (keep.post(p, rc, 77) != 0) return 1;
  x.poke = [&]() {
    int done = 0, sizes[8] = {0};
    p.test(keep.req, &done, sizes);
  };
  // NF_FORGE (cts, eager, notice, compact; comma-separated) limits the attacks to some kinds, to
  // see each one fail on an old build; unset: all.
  const char* only = getenv("NF_FORGE");
  auto forge = [only](const char* kind) {
    return only == nullptr || *only == 0 || strstr(only, kind) != nullptr;
  };
  const int kTag = 21;
  std::vector<uint8_t> junk(256, 0xee);
  uint32_t index = 0;  // the per-tag index of the pair's next message of kTag
  uint64_t forged = 0;
  // Every forgery, for message `index` of kTag (of `size` bytes).
  auto forge_all = [&](size_t size) -> int {
    for (uint32_t dst = 1; dst <= 16; ++dst) {
      for (uint32_t w1 = 0; w1 <= 16; ++w1) {
        CtsMsg m = one_cts(kTag, index, reg.mem.size(), reg, static_cast<uint16_t>(w1));
        CtsWire w;
        const size_t len = nf::encode_cts(m, w.b);
        if (forge("cts")) {
          CHILD_CHECK(x.send_ctrl(victim, ctrl_hdr(nf::kCtrlCts, dst, w1), w.b, len), "forged CTS");
          ++forged;
        }
        if (forge("eager")) {
          CHILD_CHECK(x.send_ctrl(victim, ctrl_hdr(nf::kCtrlEager, dst, w1, kTag, index),
                                  junk.data(), size < junk.size() ? size : junk.size()),
                      "forged eager message");
          ++forged;
        }
        const NoticeMsg n = {nf::kNoticeMagic, nf::kNoticeTooLarge, size * 2};
        if (forge("notice")) {
          CHILD_CHECK(
              x.send_ctrl(victim, ctrl_hdr(nf::kCtrlNotice, dst, w1, kTag, index), &n, sizeof n),
              "forged notice");
          ++forged;
        }
      }
      // Compact: no header at all before wire version 7. A provider with 4 bytes of CQ data
      // may refuse to send it.
      if (forge("compact"))
        forged += x.send(victim, junk.data(), 64, true, nf::compact_eager_data(dst, kTag, index));
    }
    x.pump(20);
    return 0;
  };
  for (int round = 0; round < 2; ++round) {
    for (size_t size : {size_t{64}, size_t{200000}}) {
      // Before the receive is posted (ahead of it), and again once it is (before the real send).
      if (forge_all(size) != 0) return 1;
      Guarded s(size), r(size);
      fill(s.buf(), size, 41 + round, static_cast<int>(size));
      void *smh = nullptr, *rmh = nullptr;
      CHILD_CHECK(p.reg_mr(sc, s.buf(), size, NCCL_PTR_HOST, &smh) == ncclSuccess, "regMr");
      CHILD_CHECK(p.reg_mr(rc, r.buf(), size, NCCL_PTR_HOST, &rmh) == ncclSuccess, "regMr");
      void *rr = nullptr, *sr = nullptr;
      CHILD_CHECK(post_recv1(p, rc, r.buf(), size, kTag, rmh, &rr) == 0, "irecv");
      if (forge_all(size) != 0) return 1;
      CHILD_CHECK(post_send(p, sc, s.buf(), size, kTag, smh, &sr) == 0, "isend");
      std::vector<void*> reqs = {sr, rr};
      std::vector<int> sizes;
      CHILD_CHECK(wait_all(p, reqs, &sizes) == 0,
                  "round %d, %zu B: the pair's transfer failed after %llu forged messages", round,
                  size, static_cast<unsigned long long>(forged));
      CHILD_CHECK(sizes[1] == static_cast<int>(size), "round %d: %d B arrived of %zu", round,
                  sizes[1], size);
      const size_t bad = verify(r.buf(), size, 41 + round, static_cast<int>(size));
      CHILD_CHECK(bad == SIZE_MAX, "round %d, %zu B: byte %zu is not the real sender's (0x%02x)",
                  round, size, bad, bad == SIZE_MAX ? 0 : r.buf()[bad]);
      CHILD_CHECK(r.intact() && s.intact(), "canaries");
      CHILD_CHECK(x.writes.empty(), "the plugin wrote %zu times into the third party's region",
                  x.writes.size());
      for (size_t i = 0; i < reg.mem.size(); ++i)
        CHILD_CHECK(reg.mem[i] == 0, "the third party's region was written at byte %zu", i);
      p.dereg_mr(sc, smh);
      p.dereg_mr(rc, rmh);
      ++index;
    }
  }
  p.close_listen(l);
  {
    Guarded sb(64);
    void* smh = nullptr;
    void* sr = nullptr;
    CHILD_CHECK(p.reg_mr(sc, sb.buf(), 64, NCCL_PTR_HOST, &smh) == ncclSuccess, "regMr");
    CHILD_CHECK(post_send(p, sc, sb.buf(), 64, 77, smh, &sr) == 0, "isend");
    std::vector<void*> reqs = {sr, keep.req};
    std::vector<int> sizes;
    CHILD_CHECK(wait_all(p, reqs, &sizes) == 0, "the kept receive");
    p.dereg_mr(sc, smh);
    p.dereg_mr(rc, keep.mh);
  }
  x.release(&reg);
  if (legit_transfer(p, sc, rc, 42) != 0) return 1;
  // Counted in the statistics file: those that reached a comm.
  if (getenv("NCCL_FABRIC_STATS") != nullptr) {
    const unsigned long long counted = stats_wrong_cookie(x, 1);
    CHILD_CHECK(counted > 0 && counted <= forged,
                "the statistics file counts %llu messages without the cookie (%llu forged)",
                counted, static_cast<unsigned long long>(forged));
  }
  CHILD_CHECK(p.close_send(sc) == ncclSuccess && p.close_recv(rc) == ncclSuccess, "close");
  return 0;
}

// The same for SENDRECV: a third party sends tagged messages with NCCL's tag under every comm id
// 0..16 (before wire version 7 the upper half of the tag was the receiving comm's id, since then it
// is its cookie) while a receive waits and before the real sender sends. Before the fix the forged
// message matched the receive and NCCL got its bytes.
int forged_sendrecv_data(nfc::NetPlugin& p) {
  Hostile x;
  std::string err;
  CHILD_CHECK(x.open(getenv("NCCL_FABRIC_PROVIDER"), &err, true), "third party: %s", err.c_str());
  void *sc = nullptr, *rc = nullptr;
  if (mock_pair(p, nullptr, &sc, &rc) != 0) return 1;
  if (legit_transfer(p, sc, rc, 50) != 0) return 1;
  void* l = nullptr;
  uint8_t handle[nf::kHandleSize];
  CHILD_CHECK(p.listen(0, handle, &l) == ncclSuccess, "listen");
  // Read as an attacker would, unchecked (the layout of every version): the test also runs against
  // a plugin of an older wire version (NF_PLUGIN_LIB).
  WireHandle wh;
  memcpy(&wh, handle, sizeof wh);
  CHILD_CHECK(wh.addr_len > 0 && wh.addr_len <= nf::kMaxAddrLen, "handle address length");
  const fi_addr_t victim = x.insert(wh.addr, wh.addr_len);
  CHILD_CHECK(victim != FI_ADDR_NOTAVAIL, "the third party's fi_av_insert of the plugin");
  const int kTag = 23;
  std::vector<uint8_t> junk(256, 0xee);
  for (int round = 0; round < 2; ++round) {
    for (size_t size : {size_t{64}, size_t{200000}}) {
      Guarded s(size), r(size);
      fill(s.buf(), size, 51 + round, static_cast<int>(size));
      void *smh = nullptr, *rmh = nullptr;
      CHILD_CHECK(p.reg_mr(sc, s.buf(), size, NCCL_PTR_HOST, &smh) == ncclSuccess, "regMr");
      CHILD_CHECK(p.reg_mr(rc, r.buf(), size, NCCL_PTR_HOST, &rmh) == ncclSuccess, "regMr");
      void *rr = nullptr, *sr = nullptr;
      CHILD_CHECK(post_recv1(p, rc, r.buf(), size, kTag, rmh, &rr) == 0, "irecv");
      x.poke = [&]() {
        int done = 0, sizes[8] = {0};
        p.test(rr, &done, sizes);
      };
      for (uint64_t id = 0; id <= 16; ++id)
        CHILD_CHECK(x.tsend(victim, junk.data(), size < junk.size() ? size : junk.size(),
                            (id << 32) | static_cast<uint32_t>(kTag)),
                    "forged tagged message");
      x.poke = nullptr;
      CHILD_CHECK(post_send(p, sc, s.buf(), size, kTag, smh, &sr) == 0, "isend");
      std::vector<void*> reqs = {sr, rr};
      std::vector<int> sizes;
      CHILD_CHECK(wait_all(p, reqs, &sizes) == 0,
                  "round %d, %zu B: the pair's transfer failed (the receive buffer starts with "
                  "0x%02x; the real sender's 0x%02x)",
                  round, size, r.buf()[0], s.buf()[0]);
      const size_t bad = verify(r.buf(), size, 51 + round, static_cast<int>(size));
      CHILD_CHECK(sizes[1] == static_cast<int>(size) && bad == SIZE_MAX,
                  "round %d, %zu B: %d B arrived, byte %zu is not the real sender's (0x%02x)",
                  round, size, sizes[1], bad, bad == SIZE_MAX ? 0 : r.buf()[bad]);
      CHILD_CHECK(r.intact() && s.intact(), "canaries");
      p.dereg_mr(sc, smh);
      p.dereg_mr(rc, rmh);
    }
  }
  p.close_listen(l);
  if (legit_transfer(p, sc, rc, 52) != 0) return 1;
  CHILD_CHECK(p.close_send(sc) == ncclSuccess && p.close_recv(rc) == ncclSuccess, "close");
  return 0;
}

// A compact eager message that arrives after its comm closed (its peer did not know yet) names a
// cookie no listed comm has: it is dropped as late, not counted as forged (a healthy job's
// statistics keep wrong_cookie at 0), and a comm made later never takes it.
int late_compact_messages(nfc::NetPlugin& p) {
  Hostile h;
  uint8_t handle[nf::kHandleSize];
  void* listen = nullptr;
  if (open_and_listen(p, h, handle, &listen) != 0) return 1;
  void* rc = nullptr;
  HostileConn c;
  if (hostile_connect(p, h, listen, handle, 4100, &rc, &c) != 0) return 1;
  CHILD_CHECK(c.compact, "the listener did not grant compact eager messages");
  CHILD_CHECK(p.close_recv(rc) == ncclSuccess, "closeRecv");
  std::vector<uint8_t> junk(64, 0xee);
  for (uint32_t i = 0; i < 20; ++i)
    CHILD_CHECK(
        h.send(c.peer, junk.data(), junk.size(), true, nf::compact_eager_data(c.cookie, 3, i)),
        "late compact message");
  // A new connection on the same listen comm: its comm never takes them.
  void* rc2 = nullptr;
  HostileConn c2;
  if (hostile_connect(p, h, listen, handle, 4101, &rc2, &c2) != 0) return 1;
  CHILD_CHECK((c2.cookie & nf::kMaxCommId) != (c.cookie & nf::kMaxCommId), "a closed comm's key");
  Recv r(64);
  if (r.post(p, rc2, 3) != 0) return 1;
  CHILD_CHECK(h.send(c2.peer, junk.data(), 16, true, nf::compact_eager_data(c.cookie, 3, 0)),
              "late compact message");
  h.pump(50);
  CHILD_CHECK(outcome(p, r.req, 0) == 0, "a late message of a closed comm landed in a new one");
  CHILD_CHECK(stats_wrong_cookie(h, 0) == 0, "late messages counted as forged");
  // The forged one next to them is counted.
  CHILD_CHECK(h.send(c2.peer, junk.data(), 16, true,
                     nf::compact_eager_data((c.cookie ^ 0x5555u) & nf::kMaxCommId, 3, 0)),
              "forged compact message");
  CHILD_CHECK(stats_wrong_cookie(h, 1) == 1, "a forged compact message was not counted");
  p.dereg_mr(rc2, r.mh);
  p.close_recv(rc2);
  p.close_listen(listen);
  return 0;
}

std::vector<std::pair<std::string, PairOptions>> hostile_providers() {
  std::vector<std::pair<std::string, PairOptions>> v;
  PairOptions mock = mock_options();
  v.push_back({"mock EFA", mock});
  PairOptions tcp;
  tcp.provider = "tcp;ofi_rxm";
  v.push_back({"tcp;ofi_rxm", tcp});
  for (auto& k : v) {
    k.second.env.push_back({"NCCL_FABRIC_PROTOCOL", "rdma"});
    k.second.env.push_back({"NCCL_FABRIC_PEER_TIMEOUT", "2"});
    k.second.env.push_back({"NCCL_FABRIC_CONNECT_TIMEOUT", "2"});
  }
  return v;
}

// run_single with the statistics file on (every second, in a directory of its own, removed after).
bool run_with_stats(PairOptions o, const std::function<int(nfc::NetPlugin&)>& body,
                    std::string* log) {
  char dir[] = "/tmp/nf-hostile-stats.XXXXXX";
  if (mkdtemp(dir) == nullptr) return false;
  o.env.push_back({"NCCL_FABRIC_STATS", std::string(dir) + "/%p.json"});
  o.env.push_back({"NCCL_FABRIC_STATS_INTERVAL", "1"});
  const bool ok = run_single(o, body, log);
  if (DIR* d = opendir(dir)) {
    while (dirent* e = readdir(d))
      if (e->d_name[0] != '.') unlink((std::string(dir) + "/" + e->d_name).c_str());
    closedir(d);
  }
  rmdir(dir);
  return ok;
}

// Runs body in a child process of its own on each provider of hostile_providers(), a section each
// (`mock`: the mock EFA provider); with `stats` the statistics file is on (run_with_stats), with
// `protocol` NCCL_FABRIC_PROTOCOL is that one instead of rdma.
void each_provider(const std::function<int(nfc::NetPlugin&, bool mock)>& body, bool stats = false,
                   const char* protocol = nullptr) {
  for (auto& k : hostile_providers()) {
    SECTION(k.first) {
      if (protocol != nullptr)
        for (auto& e : k.second.env)
          if (e.first == "NCCL_FABRIC_PROTOCOL") e.second = protocol;
      const bool mock = k.first == "mock EFA";
      const auto run = [&](nfc::NetPlugin& p) { return body(p, mock); };
      std::string log;
      CHECK((stats ? run_with_stats(k.second, run, &log) : run_single(k.second, run, &log)));
      INFO(log);
    }
  }
}

}  // namespace

TEST_CASE("a hostile sender: the receiving plugin fails what it touches and nothing else",
          "[plugin][hostile]") {
  each_provider([](nfc::NetPlugin& p, bool mock) { return attacks_on_receiver(p, !mock); });
}

TEST_CASE("a hostile receiver: its clear-to-sends cannot make the plugin write elsewhere",
          "[plugin][hostile]") {
  each_provider([](nfc::NetPlugin& p, bool) { return attacks_on_sender(p); });
}

TEST_CASE("handshakes that go wrong: floods of bad connects, silent peers, mute listeners",
          "[plugin][hostile]") {
  each_provider([](nfc::NetPlugin& p, bool) { return attacks_on_handshake(p); });
}

TEST_CASE("a third party: forged pongs keep no dead peer alive, pings from strangers get nothing",
          "[plugin][hostile]") {
  each_provider(attacks_on_liveness);
}

TEST_CASE("a third party: messages it forges for a connection are not taken as the peer's",
          "[plugin][hostile]") {
  each_provider([](nfc::NetPlugin& p, bool) { return attacks_on_connections(p); }, true);
}

TEST_CASE("a third party: SENDRECV data it forges for a connection does not match its receives",
          "[plugin][hostile]") {
  each_provider([](nfc::NetPlugin& p, bool) { return forged_sendrecv_data(p); }, false, "sendrecv");
}

TEST_CASE("late compact messages of a closed comm are dropped quietly, not taken as forged",
          "[plugin][hostile]") {
  PairOptions o;
  o.provider = "tcp;ofi_rxm";  // 8 bytes of CQ data: compact messages (the mock, like EFA, has 4)
  o.env.push_back({"NCCL_FABRIC_PROTOCOL", "rdma"});
  std::string log;
  CHECK(run_with_stats(o, late_compact_messages, &log));
  INFO(log);
}

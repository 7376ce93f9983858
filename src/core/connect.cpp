// Connection setup for SENDRECV: listen publishes a handle, connect sends a ConnectMsg that
// proves it holds the handle, accept answers with an AckMsg. Every step is a poll: nothing here
// blocks, and every wait ends at NCCL_FABRIC_CONNECT_TIMEOUT.
#include <cstring>

#include "core/connect.h"
#include "core/ctrl.h"
#include "core/plugin.h"
#include "core/stats.h"
#include "fabric/errors.h"

#include "util/clock.h"
#include "util/log.h"
#include "util/random.h"

namespace nf {
namespace {

enum ListenStage { kPostRecv = 0, kWaitConnect, kPostAck, kWaitAck, kWaitNack };
enum ConnectStage { kPostAckRecv = 0, kPostConnect, kWaitReply };

bool timed_out(const Comm& c, const Params& p) {
  const uint64_t limit = static_cast<uint64_t>(p.get_int(ParamId::kConnectTimeout)) * 1000000000ull;
  return now_ns() - c.started_ns > limit;
}

Status our_address(const Comm& c, uint8_t* addr, size_t* len) {
  *len = kMaxAddrLen;
  Status s = c.ep->name(addr, len);
  if (!ok(s)) return s;
  if (*len == 0 || *len > kMaxAddrLen) {
    NF_WARN("provider address of %zu bytes does not fit the %zu bytes the handle has", *len,
            kMaxAddrLen);
    return Status::kInternalError;
  }
  return Status::kOk;
}

const char* proto_names(uint8_t mask) {
  switch (mask) {
    case kProtoSendRecv: return "SENDRECV";
    case kProtoRdma: return "RDMA";
    case kProtoSendRecv | kProtoRdma: return "SENDRECV or RDMA";
    default: return "nothing";
  }
}

// Our rail addresses 1.. for the ProtoInfo block.
Status rail_addresses(const Comm& c, size_t main_len, uint8_t (*out)[kMaxAddrLen]) {
  for (int r = 1; r < c.sep->nrails; ++r) {
    size_t len = kMaxAddrLen;
    NF_CHECK(c.sep->rail(r)->name(out[r - 1], &len));
    if (len != main_len) {
      NF_WARN("rail %d's address is %zu bytes, rail 0's %zu", r, len, main_len);
      return Status::kInternalError;
    }
  }
  return Status::kOk;
}

// The connection's rails: addresses of the peer's rails 1.. from its ProtoInfo.
Status insert_rails(Comm& c, const ProtoInfo& p, int nrails) {
  c.nrails = nrails;
  c.peer_rail[0] = c.peer;
  for (int r = 1; r < nrails; ++r)
    NF_CHECK(c.sep->insert_rail_peer(r, p.rail_addr[r - 1], p.addr_len, &c.peer_rail[r]));
  return Status::kOk;
}

// Answers a connect we refuse, so the sender fails at once instead of at its timeout.
// The sender's comm id is at the same offset in every version; one out of range gets no answer.
// Answering needs the sender in the address vector: at most kMaxRefusedPeers addresses are added
// for that per endpoint (a flood of connects from made-up addresses would grow it without end);
// past that, only senders already known get an answer.
constexpr size_t kMaxRefusedPeers = 64;

void send_nack(Comm& l, AckStatus why) {
  const uint32_t to = l.ctrl->connect.sender_id;
  if (to == 0 || to > kMaxCommId) return;
  SharedEp& sep = *l.sep;
  const std::string key(reinterpret_cast<const char*>(l.ctrl->connect.addr),
                        l.ctrl->connect.addr_len);
  if (sep.peers.find(key) == sep.peers.end()) {
    if (sep.refused_peers >= kMaxRefusedPeers) {
      stats_unsolicited(Unsolicited::kConnectPastAvCap);
      if (sep.refused_peers++ == kMaxRefusedPeers)
        NF_WARN(
            "%s: %zu refused connects came from addresses this endpoint did not know; further "
            "ones get no answer (their senders fail at their connect timeout)",
            l.peer_name.c_str(), kMaxRefusedPeers);
      return;
    }
    ++sep.refused_peers;
  }
  fi_addr_t a;
  if (!ok(sep.insert_peer(l.ctrl->connect.addr, l.ctrl->connect.addr_len, &a))) return;
  l.peer = a;
  encode_ack(l.ctrl->connect, why, &l.ctrl->ack);
  if (ok(ctrl_post_send(l, kCtrlAck, to, ack_size(why), &l.ctrl_send)) && l.ctrl_send)
    l.stage = kWaitNack;
}

}  // namespace

namespace {

// The recv comm for the connection listen comm l is accepting (the connect is in l.ctrl->connect,
// its choices in l): an id, requests and handshake buffer of its own, the protocol set up, listed
// (not established: messages for it wait). Under sep->mu.
// On a failure *out may hold the half-made comm, for the caller to drop once it released the lock.
Status make_recv_comm(Comm& l, const Params& params, std::unique_ptr<Comm>* out) {
  NF_CHECK(comm_create(CommRole::kRecv, l.sep, params, out, true));
  Comm* rc = out->get();
  rc->peer_id = l.peer_id;
  comm_observe(*rc, l.prof, l.hints);
  rc->early_ok = l.early_ok;
  rc->ctrl->connect = l.ctrl->connect;
  rc->peer = l.peer;
  rc->peer_name = rc->ep->address_text(rc->ctrl->connect.addr, rc->ctrl->connect.addr_len);
  rc->handle = l.handle;
  rc->protocol = l.protocol;
  rc->offered = l.offered;
  rc->nrails = l.nrails;
  for (int k = 0; k < kMaxRails; ++k) rc->peer_rail[k] = l.peer_rail[k];
  rc->eager_max = l.eager_max;
  rc->compact_eager = l.compact_eager;
  rc->cookie_out = l.ctrl->connect.proto.cookie;
  NF_CHECK(rc->protocol->setup(*rc));
  comm_register(*rc);  // its cookie_in, which the reply carries
  return Status::kOk;
}

}  // namespace

Status comm_listen(const ConnectEnv& env, void* handle, std::unique_ptr<Comm>* out) {
  std::unique_ptr<Comm> l;
  NF_CHECK(comm_create(CommRole::kListen, env.sep, *env.params, &l));
  uint8_t addr[kMaxAddrLen];
  size_t len = 0;
  NF_CHECK(our_address(*l, addr, &len));
  encode_handle(random_u64(), env.prov_hash, l->id, addr, len, handle);
  memcpy(&l->handle, handle, sizeof(WireHandle));
  l->peer_name = "listener " + l->ep->address_text(addr, len);
  l->offered = env.offered;
  comm_observe(*l, env.prof, env.hints);
  l->early_ok = env.early_ok;
  l->stage = kPostRecv;
  {
    std::lock_guard<TicketLock> lock(l->sep->mu);
    comm_register(*l);  // complete: connect messages for its id now come to it
  }
  *out = std::move(l);
  return Status::kOk;
}

Status comm_accept(Comm& l, const Params& params, std::unique_ptr<Comm>* out) {
  out->reset();
  // A recv comm whose reply failed goes after the lock is released (its close takes the lock).
  std::unique_ptr<Comm> failed_accept;
  if (l.started_ns == 0) l.started_ns = now_ns();
  std::lock_guard<TicketLock> lock(l.sep->mu);
  if (l.stage == kPostRecv) {
    NF_CHECK(ctrl_expect(l, kCtrlConnect, &l.ctrl_recv));
    if (l.ctrl_recv != nullptr) l.stage = kWaitConnect;
  }
  if (l.stage == kPostAck) {
    // The reply was refused with -FI_EAGAIN on an earlier call: it is encoded already; post it
    // now. (The peer sends its connect once and waits for the reply: dropping the connect here
    // would leave both sides waiting until the connect timeout; the soak found it.)
    NF_CHECK(ctrl_post_send(l, kCtrlAck, l.peer_id, sizeof(AckMsg), &l.ctrl_send));
    if (l.ctrl_send != nullptr) l.stage = kWaitAck;
  }
  NF_CHECK(comm_progress(l));

  if (l.stage == kWaitConnect && l.ctrl_recv->state != ReqState::kPending) {
    Request* r = l.ctrl_recv;
    l.ctrl_recv = nullptr;
    const bool got = r->state == ReqState::kDone;
    const size_t len = r->ctrl.size;
    request_release(r);
    l.stage = kPostRecv;
    std::string why;
    bool bad_version = false;
    if (!got) {
      NF_WARN("%s: a connection attempt failed before it was read; still waiting",
              l.peer_name.c_str());
    } else if (!decode_connect(l.ctrl->connect, len, &why, &bad_version)) {
      NF_WARN("%s refused a connection: %s", l.peer_name.c_str(), why.c_str());
      if (bad_version && l.ctrl->connect.addr_len > 0 && l.ctrl->connect.addr_len <= kMaxAddrLen)
        send_nack(l, AckStatus::kBadVersion);
    } else if (l.ctrl->connect.token != l.handle.token) {
      NF_WARN("%s refused a connection with the wrong token (a stale or foreign handle)",
              l.peer_name.c_str());
      send_nack(l, AckStatus::kBadToken);
    } else if (l.ctrl->connect.provider_hash != l.handle.provider_hash) {
      NF_WARN(
          "%s refused a connection from a peer on another libfabric provider; set "
          "NCCL_FABRIC_PROVIDER the same on every node",
          l.peer_name.c_str());
      send_nack(l, AckStatus::kProviderMismatch);
    } else if ((l.ctrl->connect.proto.protocols & l.offered) == 0) {
      NF_WARN("%s refused a connection: the peer accepts %s, this side %s; %s", l.peer_name.c_str(),
              proto_names(l.ctrl->connect.proto.protocols), proto_names(l.offered),
              (l.offered & kProtoSendRecv) == 0 && ll128_rdma_only()
                  ? "this side takes RDMA only because NCCL's LL128 relies on the ordering of RDMA "
                    "writes, which sends lack here: set NCCL_PROTO=^LL128 on every node, or let "
                    "every node use RDMA (docs/troubleshooting.md#ll128)"
                  : "set NCCL_FABRIC_PROTOCOL the same on every node (auto works everywhere)");
      send_nack(l, AckStatus::kNoCommonProtocol);
    } else {
      const ConnectMsg& cm = l.ctrl->connect;
      const uint8_t common = cm.proto.protocols & l.offered;
      const uint8_t chosen = (common & kProtoRdma) ? kProtoRdma : kProtoSendRecv;
      l.protocol = &protocol_for(chosen);
      const int nrails = chosen == kProtoRdma
                             ? (cm.proto.nrails < l.sep->nrails ? cm.proto.nrails : l.sep->nrails)
                             : 1;
      NF_CHECK(l.sep->insert_peer(cm.addr, cm.addr_len, &l.peer));
      NF_CHECK(insert_rails(l, cm.proto, nrails));
      l.peer_id = cm.sender_id;
      // With GPUDirect, NCCL's receive buffers are GPU memory: an eager message would have to be
      // copied out of a control buffer by the CPU, so every message is written by the NIC.
      // An eager message travels in one control message: no larger than the endpoint's control
      // buffers (efa-direct: a send is at most one MTU).
      size_t eager = chosen == kProtoRdma && !l.ep->domain().gdr()
                         ? static_cast<size_t>(params.get_int(ParamId::kEagerMax))
                         : 0;
      if (eager > ctrl_max_payload(*l.sep)) eager = ctrl_max_payload(*l.sep);
      l.eager_max = static_cast<uint32_t>(eager);
      // Compact eager messages need 8 bytes of remote CQ data (their header travels there).
      l.compact_eager = eager > 0 && l.sep->wide_imm && params.get_int(ParamId::kCompactEager) != 0;
      // Our rail addresses, in our address length: the peer's may differ (shm names carry the
      // process id, so two processes' addresses differ in length when their pids do).
      uint8_t rails[kMaxRails - 1][kMaxAddrLen] = {};
      NF_CHECK(rail_addresses(l, l.handle.addr_len, rails));
      // The recv comm that takes this connection, with an id of its own (the reply names it: the
      // peer's messages go there), listed before the reply leaves so that nothing the peer sends
      // once it has the reply finds no comm; it keeps them until it is established.
      // (One left from a connect whose reply could not be posted goes, after the lock.)
      failed_accept = std::move(l.accepting);
      if (Status s = make_recv_comm(l, params, &l.accepting); !ok(s)) {
        failed_accept = std::move(l.accepting);
        return s;
      }
      encode_ack(cm, AckStatus::kOk, &l.ctrl->ack);
      set_ack_recv_id(&l.ctrl->ack, l.accepting->id);
      encode_proto(chosen, static_cast<uint8_t>(nrails), l.eager_max, l.handle.addr_len, rails,
                   l.accepting->cookie_in, &l.ctrl->ack.proto);
      if (l.compact_eager) {
        l.ctrl->ack.proto.flags |= kProtoFlagCompactEager;
        l.ctrl->ack.proto.checksum =
            wire_checksum(&l.ctrl->ack.proto, offsetof(ProtoInfo, checksum));
      }
      NF_CHECK(ctrl_post_send(l, kCtrlAck, l.peer_id, sizeof(AckMsg), &l.ctrl_send));
      if (l.ctrl_send == nullptr) {
        // The provider pushed back: the reply goes from the next call.
        l.stage = kPostAck;
        NF_INFO(kSubsysNet, "%s: the handshake reply waits for the provider (-FI_EAGAIN)",
                l.peer_name.c_str());
      } else {
        l.stage = kWaitAck;
      }
    }
  }

  if ((l.stage == kWaitAck || l.stage == kWaitNack) && l.ctrl_send->state != ReqState::kPending) {
    Request* r = l.ctrl_send;
    l.ctrl_send = nullptr;
    const bool sent = r->state == ReqState::kDone;
    request_release(r);
    if (l.stage == kWaitNack) {
      l.stage = kPostRecv;  // keep listening for the right peer
    } else if (!sent) {
      NF_WARN("%s: the handshake reply to the peer failed", l.peer_name.c_str());
      failed_accept = std::move(l.accepting);
      l.stage = kPostRecv;
      return Status::kRemoteError;
    } else {
      // The reply has left: the recv comm is the peer's, and the listen comm listens again.
      std::unique_ptr<Comm> rc = std::move(l.accepting);
      rc->established = true;
      ctrl_replay(*rc);  // what the peer sent once it had the reply
      l.stage = kPostRecv;
      l.peer_id = 0;
      l.started_ns = 0;
      NF_INFO(kSubsysNet, "accepted a connection from %s: %s%s", rc->peer_name.c_str(),
              rc->protocol->name,
              rc->protocol->writes
                  ? (", " + std::to_string(rc->nrails) + " rail(s), eager up to " +
                     std::to_string(rc->eager_max) + " B" + (rc->compact_eager ? ", compact" : ""))
                        .c_str()
                  : "");
      *out = std::move(rc);
      return Status::kOk;
    }
  }

  if (timed_out(l, params)) {
    NF_WARN(
        "%s: no peer completed a connection within NCCL_FABRIC_CONNECT_TIMEOUT=%lld s; is the "
        "peer alive and can it reach this host?",
        l.peer_name.c_str(), static_cast<long long>(params.get_int(ParamId::kConnectTimeout)));
    return Status::kTimeout;
  }
  return Status::kOk;
}

Status comm_connect_start(const ConnectEnv& env, const void* handle, std::unique_ptr<Comm>* out) {
  WireHandle h;
  std::string why;
  if (!decode_handle(handle, &h, &why)) {
    NF_WARN("connect: bad handle: %s", why.c_str());
    return Status::kInternalError;
  }
  if (h.provider_hash != env.prov_hash) {
    NF_WARN(
        "connect: the peer listens on another libfabric provider than ours (%s); set "
        "NCCL_FABRIC_PROVIDER the same on every node",
        env.provider.c_str());
    return Status::kInvalidUsage;
  }
  std::unique_ptr<Comm> c;
  NF_CHECK(comm_create(CommRole::kSend, env.sep, *env.params, &c));
  comm_observe(*c, env.prof, env.hints);
  uint8_t addr[kMaxAddrLen];
  size_t len = 0;
  NF_CHECK(our_address(*c, addr, &len));
  c->peer_name = c->ep->address_text(h.addr, h.addr_len);
  // Addresses of one provider may differ in length between processes (shm: the pid is in the
  // name); a different provider is caught by the hash above.
  const uint8_t offer = env.offered;
  c->peer_id = h.listen_id;
  c->handle = h;
  c->nonce = random_u64();
  c->offered = offer;
  encode_connect(h, c->id, c->nonce, addr, len, &c->ctrl->connect);
  uint8_t rails[kMaxRails - 1][kMaxAddrLen] = {};
  NF_CHECK(rail_addresses(*c, len, rails));
  c->started_ns = now_ns();
  c->stage = kPostAckRecv;
  {
    // Every field set before the endpoint lists it: the keeper and route() read listed comms.
    std::lock_guard<TicketLock> lock(c->sep->mu);
    NF_CHECK(c->sep->insert_peer(h.addr, h.addr_len, &c->peer));
    comm_register(*c);
    // The offer carries the cookie registering gave us (nothing reads it before it is sent).
    encode_proto(offer, static_cast<uint8_t>(c->sep->nrails), 0, len, rails, c->cookie_in,
                 &c->ctrl->connect.proto);
  }
  *out = std::move(c);
  return Status::kOk;
}

Status comm_connect_poll(Comm& c, const Params& params, bool* done) {
  *done = false;
  std::lock_guard<TicketLock> lock(c.sep->mu);
  if (c.stage == kPostAckRecv) {
    NF_CHECK(ctrl_expect(c, kCtrlAck, &c.ctrl_recv));
    if (c.ctrl_recv != nullptr) c.stage = kPostConnect;
  }
  if (c.stage == kPostConnect) {
    NF_CHECK(ctrl_post_send(c, kCtrlConnect, c.peer_id, sizeof(ConnectMsg), &c.ctrl_send));
    if (c.ctrl_send != nullptr) c.stage = kWaitReply;
  }
  NF_CHECK(comm_progress(c));
  if (c.stage == kWaitReply) {
    if (c.ctrl_send->state == ReqState::kError) {
      NF_WARN("connect to %s: the handshake could not be delivered", c.peer_name.c_str());
      return c.ctrl_send->error;
    }
    if (c.ctrl_recv->state != ReqState::kPending) {
      std::string why;
      if (c.ctrl_recv->state != ReqState::kDone ||
          !decode_ack(c.ctrl->ack, c.ctrl_recv->ctrl.size, &why)) {
        NF_WARN("connect to %s failed: %s", c.peer_name.c_str(),
                why.empty() ? "the handshake reply did not arrive" : why.c_str());
        return Status::kRemoteError;
      }
      if (c.ctrl->ack.nonce != c.nonce || c.ctrl->ack.token != c.handle.token) {
        NF_WARN("connect to %s: the reply belongs to another connection", c.peer_name.c_str());
        return Status::kRemoteError;
      }
      const ProtoInfo& p = c.ctrl->ack.proto;
      if ((p.protocols & c.offered) == 0 || p.nrails > c.sep->nrails ||
          p.addr_len != c.handle.addr_len || (p.protocols == kProtoSendRecv && p.nrails != 1)) {
        NF_WARN(
            "connect to %s: the listener chose %s with %u rail(s); this side offered %s "
            "with %d",
            c.peer_name.c_str(), proto_names(p.protocols), p.nrails, proto_names(c.offered),
            c.sep->nrails);
        return Status::kRemoteError;
      }
      c.protocol = &protocol_for(p.protocols);
      c.peer_id = c.ctrl->ack.recv_id;  // the listener's recv comm for this connection
      c.cookie_out = p.cookie;          // what our messages to it carry
      NF_CHECK(insert_rails(c, p, p.nrails));
      c.eager_max = p.eager_max;
      c.compact_eager = (p.flags & kProtoFlagCompactEager) != 0 && c.sep->wide_imm;
      NF_CHECK(c.protocol->setup(c));
      request_release(c.ctrl_recv);
      request_release(c.ctrl_send);  // may still be in flight: released when it completes
      c.ctrl_recv = c.ctrl_send = nullptr;
      c.established = true;
      ctrl_replay(c);  // clear-to-sends that overtook the reply
      NF_INFO(kSubsysNet, "connected to %s: %s, %d rail(s)", c.peer_name.c_str(), c.protocol->name,
              c.nrails);
      *done = true;
      return Status::kOk;
    }
  }
  if (timed_out(c, params)) {
    NF_WARN(
        "connect to %s: no answer within NCCL_FABRIC_CONNECT_TIMEOUT=%lld s; is the peer "
        "alive, and does the network between the hosts allow this traffic?",
        c.peer_name.c_str(), static_cast<long long>(params.get_int(ParamId::kConnectTimeout)));
    return Status::kTimeout;
  }
  return Status::kOk;
}

}  // namespace nf

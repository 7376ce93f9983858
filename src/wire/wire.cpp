#include "wire/wire.h"

#include <cstdio>
#include <cstring>

namespace nf {
namespace {

std::string fmt(const char* f, unsigned long long a, unsigned long long b = 0) {
  char buf[256];
  snprintf(buf, sizeof(buf), f, a, b);
  return buf;
}

}  // namespace

uint32_t wire_checksum(const void* data, size_t len) {
  const uint8_t* p = static_cast<const uint8_t*>(data);
  uint32_t h = 2166136261u;
  for (size_t i = 0; i < len; ++i) {
    h ^= p[i];
    h *= 16777619u;
  }
  return h;
}

uint32_t provider_hash(const std::string& provider) {
  return wire_checksum(provider.data(), provider.size());
}

const char* ack_status_text(AckStatus s) {
  switch (s) {
    case AckStatus::kOk: return "accepted";
    case AckStatus::kBadToken:
      return "the connect carried the wrong token (stale or foreign handle)";
    case AckStatus::kBadVersion: return "the listener speaks another wire version";
    case AckStatus::kProviderMismatch: return "the two sides use different libfabric providers";
    case AckStatus::kMalformed: return "the listener found the connect message malformed";
    case AckStatus::kNoCommonProtocol:
      return "no protocol both sides accept (NCCL_FABRIC_PROTOCOL=sendrecv on one side and rdma "
             "on the other, rdma forced where the provider cannot do it, or RDMA only on a side "
             "where LL128 relies on it: NCCL_PROTO=^LL128 lets SENDRECV in)";
  }
  return "unknown status";
}

void encode_handle(uint64_t token, uint32_t prov_hash, uint32_t listen_id, const uint8_t* addr,
                   size_t addr_len, void* out128) {
  WireHandle h;
  memset(&h, 0, sizeof(h));
  h.magic = kHandleMagic;
  h.version = kWireVersion;
  h.addr_len = static_cast<uint16_t>(addr_len);
  h.token = token;
  h.provider_hash = prov_hash;
  h.listen_id = listen_id;
  memcpy(h.addr, addr, addr_len);
  h.checksum = wire_checksum(&h, offsetof(WireHandle, checksum));
  memcpy(out128, &h, sizeof(h));
}

bool decode_handle(const void* in128, WireHandle* out, std::string* why) {
  memcpy(out, in128, sizeof(*out));
  if (out->magic != kHandleMagic) {
    *why =
        fmt("not an nccl-fabric handle (magic 0x%08llx, expected 0x%08llx): is the peer using "
            "another network plugin?",
            out->magic, kHandleMagic);
    return false;
  }
  if (out->version != kWireVersion) {
    *why =
        fmt("handle of wire version %llu; this plugin speaks version %llu: run the same "
            "nccl-fabric version on every node",
            out->version, kWireVersion);
    return false;
  }
  if (out->checksum != wire_checksum(out, offsetof(WireHandle, checksum))) {
    *why = "handle checksum mismatch: the handle was corrupted or truncated in transit";
    return false;
  }
  if (out->addr_len == 0 || out->addr_len > kMaxAddrLen) {
    *why = fmt("handle address length %llu is out of range (1..%llu)", out->addr_len, kMaxAddrLen);
    return false;
  }
  if (out->listen_id == 0 || out->listen_id > kMaxCommId) {
    *why = fmt("handle listen id %llu is out of range (1..%llu)", out->listen_id, kMaxCommId);
    return false;
  }
  return true;
}

void encode_connect(const WireHandle& h, uint32_t sender_id, uint64_t nonce, const uint8_t* addr,
                    size_t addr_len, ConnectMsg* out) {
  memset(out, 0, sizeof(*out));
  out->magic = kConnectMagic;
  out->version = kWireVersion;
  out->addr_len = static_cast<uint16_t>(addr_len);
  out->token = h.token;
  out->provider_hash = h.provider_hash;
  out->sender_id = sender_id;
  out->nonce = nonce;
  memcpy(out->addr, addr, addr_len);
  out->checksum = wire_checksum(out, offsetof(ConnectMsg, checksum));
}

bool decode_connect(const ConnectMsg& m, size_t received_len, std::string* why, bool* bad_version) {
  *bad_version = false;
  if (received_len < 8 || m.magic != kConnectMagic) {
    *why = fmt("stray message on a listening endpoint (%llu bytes, magic 0x%08llx)", received_len,
               received_len >= 4 ? m.magic : 0);
    return false;
  }
  if (m.version != kWireVersion) {
    *bad_version = true;
    *why =
        fmt("peer speaks wire version %llu; this plugin speaks version %llu: run the same "
            "nccl-fabric version on every node",
            m.version, kWireVersion);
    return false;
  }
  if (received_len != sizeof(ConnectMsg)) {
    *why = fmt("connect message of %llu bytes, expected %llu", received_len, sizeof(ConnectMsg));
    return false;
  }
  if (!decode_proto(m.proto, m.addr_len, why)) return false;
  if (m.checksum != wire_checksum(&m, offsetof(ConnectMsg, checksum))) {
    *why = "connect message checksum mismatch";
    return false;
  }
  if (m.addr_len == 0 || m.addr_len > kMaxAddrLen) {
    *why =
        fmt("connect message address length %llu out of range (1..%llu)", m.addr_len, kMaxAddrLen);
    return false;
  }
  if (m.sender_id == 0 || m.sender_id > kMaxCommId) {
    *why = fmt("connect message sender id %llu out of range (1..%llu)", m.sender_id, kMaxCommId);
    return false;
  }
  return true;
}

void encode_proto(uint8_t protocols, uint8_t nrails, uint32_t eager_max, size_t addr_len,
                  const uint8_t (*rail_addrs)[kMaxAddrLen], uint32_t cookie, ProtoInfo* out) {
  memset(out, 0, sizeof(*out));
  out->magic = kProtoMagic;
  out->protocols = protocols;
  out->nrails = nrails;
  out->addr_len = static_cast<uint16_t>(addr_len);
  out->eager_max = eager_max;
  out->cookie = cookie;
  for (int r = 1; r < nrails && r < kMaxRails; ++r)
    memcpy(out->rail_addr[r - 1], rail_addrs[r - 1], addr_len);
  out->checksum = wire_checksum(out, offsetof(ProtoInfo, checksum));
}

bool decode_proto(const ProtoInfo& p, size_t main_addr_len, std::string* why) {
  if (p.magic != kProtoMagic || p.checksum != wire_checksum(&p, offsetof(ProtoInfo, checksum))) {
    *why = "protocol block corrupted (magic or checksum)";
    return false;
  }
  if ((p.protocols & ~(kProtoSendRecv | kProtoRdma)) != 0 || p.protocols == 0) {
    *why = fmt("protocol mask 0x%llx names no known protocol", p.protocols);
    return false;
  }
  if (p.nrails < 1 || p.nrails > kMaxRails) {
    *why = fmt("rail count %llu out of range (1..%llu)", p.nrails, kMaxRails);
    return false;
  }
  // Rail addresses are read with this length, whatever the caller passed as the main address's
  // (an ack names its own: tests/fuzz/regress/ack/, tests/fuzz/regress/proto/).
  if (p.addr_len == 0 || p.addr_len > kMaxAddrLen) {
    *why = fmt("rail address length %llu out of range (1..%llu)", p.addr_len, kMaxAddrLen);
    return false;
  }
  if (p.addr_len != main_addr_len) {
    *why = fmt("rail address length %llu differs from the main address's %llu", p.addr_len,
               main_addr_len);
    return false;
  }
  if (p.eager_max > kMaxEagerMax) {
    *why =
        fmt("eager message size %llu above the protocol's bound (%llu)", p.eager_max, kMaxEagerMax);
    return false;
  }
  if (p.cookie == 0) {
    *why = "protocol block without a connection cookie";
    return false;
  }
  return true;
}

size_t ack_size(AckStatus status) {
  return status == AckStatus::kOk ? sizeof(AckMsg) : kAckRefusalSize;
}

void encode_ack(const ConnectMsg& m, AckStatus status, AckMsg* out) {
  memset(out, 0, sizeof(*out));
  out->magic = kAckMagic;
  out->version = kWireVersion;
  out->status = static_cast<uint16_t>(status);
  out->token = m.token;
  out->nonce = m.nonce;
  out->checksum = wire_checksum(out, offsetof(AckMsg, checksum));
}

void set_ack_recv_id(AckMsg* m, uint32_t recv_id) {
  m->recv_id = recv_id;
  m->checksum = wire_checksum(m, offsetof(AckMsg, checksum));
}

bool decode_ack(const AckMsg& m, size_t received_len, std::string* why) {
  if (received_len < 8 || m.magic != kAckMagic) {
    *why = fmt("malformed handshake reply (%llu bytes, magic 0x%08llx)", received_len,
               received_len >= 4 ? m.magic : 0);
    return false;
  }
  if (m.status != static_cast<uint16_t>(AckStatus::kOk)) {
    *why = std::string("the listener refused the connection: ") +
           ack_status_text(static_cast<AckStatus>(m.status));
    return false;
  }
  if (m.version != kWireVersion) {
    *why = fmt("listener replied with wire version %llu; this plugin speaks version %llu",
               m.version, kWireVersion);
    return false;
  }
  if (received_len != sizeof(AckMsg) ||
      m.checksum != wire_checksum(&m, offsetof(AckMsg, checksum))) {
    *why = "handshake reply corrupted (size or checksum)";
    return false;
  }
  if (m.recv_id == 0 || m.recv_id > kMaxCommId) {
    *why = fmt("handshake reply names no receiving comm (id %llu)", m.recv_id);
    return false;
  }
  std::string pwhy;
  if (!decode_proto(m.proto, m.proto.addr_len, &pwhy)) {
    *why = "handshake reply: " + pwhy;
    return false;
  }
  if (m.proto.protocols != kProtoSendRecv && m.proto.protocols != kProtoRdma) {
    *why = "handshake reply names no single protocol";
    return false;
  }
  return true;
}

size_t encode_cts(const CtsMsg& m, void* out) {
  uint8_t* p = static_cast<uint8_t*>(out);
  memcpy(p, &m.h, sizeof(CtsHeader));
  p += sizeof(CtsHeader);
  const size_t keys = 8 * static_cast<size_t>(m.h.nrails);
  for (int i = 0; i < m.h.n; ++i) {
    const CtsEntry& e = m.e[i];
    memcpy(p + 0, &e.tag, 4);
    memcpy(p + 4, &e.index, 4);
    memcpy(p + 8, &e.size, 8);
    memcpy(p + 16, &e.addr, 8);
    memcpy(p + kCtsEntryFixed, e.key, keys);
    p += kCtsEntryFixed + keys;
  }
  return static_cast<size_t>(p - static_cast<uint8_t*>(out));
}

bool decode_cts(const void* in, size_t len, CtsMsg* out, std::string* why) {
  const uint8_t* p = static_cast<const uint8_t*>(in);
  CtsHeader h;
  if (len < sizeof(h)) {
    *why = fmt("%llu bytes: shorter than a clear-to-send header", len);
    return false;
  }
  memcpy(&h, p, sizeof(h));
  if (h.magic != kCtsMagic || h.version != kWireVersion) {
    *why = "not a clear-to-send of this protocol version";
    return false;
  }
  if (h.n < 1 || h.n > kMaxCtsEntries) {
    *why = fmt("group of %llu buffers (a clear-to-send holds 1..%llu)", h.n, kMaxCtsEntries);
    return false;
  }
  if (h.nrails < 1 || h.nrails > kMaxRails) {
    *why = fmt("%llu rails (a clear-to-send has keys for 1..%llu)", h.nrails, kMaxRails);
    return false;
  }
  const size_t want = cts_size(h.n, h.nrails);
  if (len != want) {
    char buf[160];
    snprintf(buf, sizeof(buf), "%zu bytes for %u buffers on %u rails (expected %zu)", len, h.n,
             h.nrails, want);
    *why = buf;
    return false;
  }
  if (h.gen > kMaxGen || h.reserved != 0) {
    *why = fmt("generation %llu or reserved field %llu out of range", h.gen, h.reserved);
    return false;
  }
  const uint8_t* q = p + sizeof(h);
  CtsEntry e[kMaxCtsEntries];
  const size_t keys = 8 * static_cast<size_t>(h.nrails);
  for (int i = 0; i < h.n; ++i, q += kCtsEntryFixed + keys) {
    CtsEntry& x = e[i];
    memcpy(&x.tag, q + 0, 4);
    memcpy(&x.index, q + 4, 4);
    memcpy(&x.size, q + 8, 8);
    memcpy(&x.addr, q + 16, 8);
    memset(x.key, 0, sizeof(x.key));
    memcpy(x.key, q + kCtsEntryFixed, keys);
    if (x.addr + x.size < x.addr) {
      char buf[160];
      snprintf(buf, sizeof(buf), "buffer %d: %llu bytes at 0x%llx is not a possible buffer", i,
               static_cast<unsigned long long>(x.size), static_cast<unsigned long long>(x.addr));
      *why = buf;
      return false;
    }
  }
  out->h = h;
  memcpy(out->e, e, sizeof(CtsEntry) * h.n);
  return true;
}

bool decode_probe(const void* in, size_t len, ProbeMsg* out, std::string* why) {
  if (len < kProbeFixed || len > sizeof(ProbeMsg)) {
    *why = "a liveness probe of " + std::to_string(len) + " bytes";
    return false;
  }
  memset(out, 0, sizeof(*out));
  memcpy(out, in, len);
  if (out->magic != kProbeMagic || out->version != kWireVersion) {
    *why = "a liveness probe with a wrong magic or version " + std::to_string(out->version);
    return false;
  }
  if (out->kind != kProbePing && out->kind != kProbePong) {
    *why = "a liveness probe of unknown kind " + std::to_string(out->kind);
    return false;
  }
  if (out->kind == kProbePing &&
      (out->addr_len == 0 || out->addr_len > kMaxAddrLen || len != kProbeFixed + out->addr_len)) {
    *why = "a ping whose address length " + std::to_string(out->addr_len) + " disagrees with its " +
           std::to_string(len) + " bytes";
    return false;
  }
  // A pong names no address: its fixed part alone (found by tests/fuzz/fuzz_probe.cpp).
  if (out->kind == kProbePong && (out->addr_len != 0 || len != kProbeFixed)) {
    *why = "a pong of " + std::to_string(len) + " bytes with address length " +
           std::to_string(out->addr_len) + " (a pong is " + std::to_string(kProbeFixed) +
           " bytes, no address)";
    return false;
  }
  return true;
}

bool decode_notice(const void* in, size_t len, NoticeMsg* out, std::string* why) {
  NoticeMsg m;
  if (len != sizeof(m)) {
    *why = fmt("a notice of %llu bytes (expected %llu)", len, sizeof(m));
    return false;
  }
  memcpy(&m, in, sizeof(m));
  if (m.magic != kNoticeMagic || (m.kind != kNoticeRts && m.kind != kNoticeTooLarge)) {
    *why = fmt("a malformed notice (magic 0x%08llx, kind %llu)", m.magic, m.kind);
    return false;
  }
  *out = m;
  return true;
}

bool decode_ctrl_hdr(const void* in, size_t len, CtrlHdr* out, std::string* why) {
  if (len < kCtrlHdrSize) {
    *why = "a control message of " + std::to_string(len) + " bytes, shorter than its header";
    return false;
  }
  memcpy(out, in, kCtrlHdrSize);
  const uint8_t kind = ctrl_kind(*out);
  if (kind == 0 || kind > kCtrlKindMax) {
    *why = "a control message of unknown kind " + std::to_string(kind);
    return false;
  }
  // The connection's kinds carry a cookie where the others carry the version: the comm checks it.
  const uint32_t version = out->src >> 28;
  if (!ctrl_conn_kind(kind) && version != kCtrlVersion) {
    *why = "a control message of wire version " + std::to_string(version) +
           " (this plugin speaks " + std::to_string(kCtrlVersion) + ")";
    return false;
  }
  const bool comm_less = kind == kCtrlProbe;
  if (comm_less != (ctrl_dst(*out) == 0)) {
    *why = "a control message of kind " + std::to_string(kind) + " for comm id " +
           std::to_string(ctrl_dst(*out));
    return false;
  }
  const bool indexed = kind == kCtrlEager || kind == kCtrlNotice;
  if (!indexed && (out->tag != 0 || out->index != 0)) {
    *why = "a control message of kind " + std::to_string(kind) + " with tag/index fields set";
    return false;
  }
  return true;
}

}  // namespace nf

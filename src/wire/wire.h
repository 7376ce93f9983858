// Every message on the wire (docs/protocol.md describes them). Fixed layouts, little-endian,
// versioned, with a checksum: what a peer sends is checked before anything of it is used.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace nf {

// 3: per-tag indices, notices; 4: probes; 5: untagged control; 6: each accepted connection has
// its own comm id, which the AckMsg names (recv_id): one listen comm accepts any number; 7: every
// message after the handshake carries the receiving comm's random cookie (ProtoInfo::cookie).
constexpr uint16_t kWireVersion = 7;
constexpr uint32_t kHandleMagic = 0x4641424eu;   // "NBAF" in memory: nccl-fabric handle
constexpr uint32_t kConnectMagic = 0x4e4e4f43u;  // "CONN"
constexpr uint32_t kAckMagic = 0x4b434f41u;      // "AOCK"
constexpr size_t kHandleSize = 128;              // NCCL_NET_HANDLE_MAXSIZE
constexpr size_t kMaxAddrLen = 96;               // EFA: 32, IPv6 sockaddr: 28, shm: a name

// Comm ids: every comm of a process shares one endpoint per device; a comm is its id there.
constexpr uint32_t kMaxCommId = (1u << 28) - 1;

// The control path (wire version 5): every message of the plugin's own (handshake, clear-to-send,
// eager message, notice, probe) is an untagged message (fi_send / fi_recv) that starts with this
// 16-byte header, received into the endpoint's pool of receive buffers and routed by the plugin to
// the comm it names: the endpoint needs no tag matching for it (libfabric's efa-direct has none).
enum CtrlKind : uint8_t {
  kCtrlConnect = 1,  // ConnectMsg, connector -> listen comm
  kCtrlAck = 2,      // AckMsg, listener -> connecting comm
  kCtrlCts = 3,      // clear-to-send, receiver -> sender (RDMA)
  kCtrlProbe = 4,    // liveness probe, endpoint -> endpoint (comm id 0)
  kCtrlEager = 5,    // eager message: NCCL's payload, sender -> receiver (RDMA)
  kCtrlNotice = 6,   // NoticeMsg about a message, sender -> receiver (RDMA)
};
constexpr uint8_t kCtrlKindMax = kCtrlNotice;
// The kinds of a connection (version 7): sent once the handshake is done, each carries the
// receiving comm's cookie where the handshake kinds and probes carry the sender's id and version.
inline bool ctrl_conn_kind(uint8_t kind) {
  return kind == kCtrlCts || kind == kCtrlEager || kind == kCtrlNotice;
}
struct CtrlHdr {
  uint32_t dst;  // bits 0..27: the receiving comm's id (0: the endpoint, probes); 28..31: kind
  // Connect, ack, probe: bits 0..27 the sending comm's id (0: none), 28..31 the wire version (7).
  // CTS, eager message, notice: the receiving comm's cookie (its ProtoInfo::cookie), all 32 bits.
  uint32_t src;
  int32_t tag;     // eager, notice: NCCL's tag; otherwise 0
  uint32_t index;  // eager, notice: the message's per-tag index; otherwise 0
};
static_assert(sizeof(CtrlHdr) == 16, "wire layout");
constexpr size_t kCtrlHdrSize = sizeof(CtrlHdr);
constexpr uint32_t kCtrlVersion = kWireVersion & 0xf;
// `src`: the sending comm's id for connect, ack and probe; the receiving comm's cookie for the
// connection's kinds (ctrl_conn_kind).
inline CtrlHdr ctrl_hdr(uint8_t kind, uint32_t dst, uint32_t src, int32_t tag = 0,
                        uint32_t index = 0) {
  CtrlHdr h;
  h.dst = (dst & kMaxCommId) | (static_cast<uint32_t>(kind) << 28);
  h.src = ctrl_conn_kind(kind) ? src : (src & kMaxCommId) | (kCtrlVersion << 28);
  h.tag = tag;
  h.index = index;
  return h;
}
inline uint8_t ctrl_kind(const CtrlHdr& h) { return static_cast<uint8_t>(h.dst >> 28); }
inline uint32_t ctrl_dst(const CtrlHdr& h) { return h.dst & kMaxCommId; }
// Connect, ack, probe only.
inline uint32_t ctrl_src(const CtrlHdr& h) { return h.src & kMaxCommId; }
// CTS, eager message, notice only.
inline uint32_t ctrl_cookie(const CtrlHdr& h) { return h.src; }
// Checks the header of a received control message of `len` bytes (payload after it): long
// enough, our version, a known kind, the fields a kind does not use 0. False with *why.
bool decode_ctrl_hdr(const void* in, size_t len, CtrlHdr* out, std::string* why);

// Tags: only SENDRECV data is tagged: the receiving comm's cookie in bits 32..63 (unique among the
// comms of its endpoint), NCCL's tag below.
inline uint64_t data_tag(uint32_t cookie, int tag) {
  return (static_cast<uint64_t>(cookie) << 32) | static_cast<uint32_t>(tag);
}

// Compact eager messages (docs/protocol.md): where the provider carries 8 bytes of remote CQ data
// and the listener granted it (kProtoFlagCompactEager), an eager message whose tag fits 16 bits
// goes as NCCL's payload alone (one piece; injected up to the provider's inject size), its header
// in the CQ data: mark 0xE (bits 60..63) | the low 28 bits of the receiving comm's cookie (32..59;
// wire version 7, before it the comm's id) | tag (16..31) | the low 16 bits of the per-tag index.
// The receiver finds the comm by those cookie bits (unique on its endpoint): a sender that does not
// know the cookie names no comm. It completes the index from the buffers it has posted for the tag
// (a message is never 32768 messages away from them: kMaxAhead holds it far closer).
constexpr uint64_t kCompactMark = 0xeull << 60;
constexpr int32_t kCompactTagMax = 0xffff;
inline uint64_t compact_eager_data(uint32_t cookie, int32_t tag, uint32_t index) {
  return kCompactMark | (static_cast<uint64_t>(cookie & kMaxCommId) << 32) |
         (static_cast<uint64_t>(static_cast<uint32_t>(tag) & 0xffffu) << 16) | (index & 0xffffu);
}
// The full per-tag index of a compact message whose low 16 bits are `low`, near `ref` (the index
// of the next buffer the receiver will post for the tag).
inline uint32_t compact_index(uint32_t low, uint32_t ref) {
  const int16_t d = static_cast<int16_t>(static_cast<uint16_t>(low - ref));
  return ref + static_cast<uint32_t>(static_cast<int32_t>(d));
}

// The header of a compact eager message received with remote CQ data `data` by comm `id`, found by
// the cookie bits of the data (route_find): an eager message's header with the comm's cookie, whose
// index holds the low 16 bits.
inline CtrlHdr compact_hdr(uint64_t data, uint32_t id, uint32_t cookie) {
  return ctrl_hdr(kCtrlEager, id, cookie, static_cast<int32_t>((data >> 16) & 0xffffu),
                  static_cast<uint32_t>(data & 0xffffu));
}

// What listen writes into NCCL's 128-byte handle.
struct WireHandle {
  uint32_t magic;
  uint16_t version;
  uint16_t addr_len;
  uint64_t token;          // random; accept refuses a connect that does not carry it
  uint32_t provider_hash;  // so a sender on another provider hears why it cannot connect
  uint32_t listen_id;      // the listen comm's id: the connect and all data go to it
  uint8_t addr[kMaxAddrLen];
  uint32_t reserved;
  uint32_t checksum;  // FNV-1a over every byte before it
};
static_assert(sizeof(WireHandle) == kHandleSize, "the handle fills NCCL's 128 bytes exactly");
static_assert(offsetof(WireHandle, token) == 8, "wire layout");
static_assert(offsetof(WireHandle, listen_id) == 20, "wire layout");
static_assert(offsetof(WireHandle, addr) == 24, "wire layout");
static_assert(offsetof(WireHandle, checksum) == 124, "wire layout");

constexpr int kMaxRails = 4;
// The largest eager message a receiver may announce (NCCL_FABRIC_EAGER_MAX's bound): a peer's
// larger figure is refused in the handshake rather than trusted.
constexpr uint32_t kMaxEagerMax = 65536;
// The largest RMA write we post: EFA takes at most 1 GiB in one device write (efa-semantics.md).
constexpr uint64_t kMaxWriteSize = 1ull << 30;
// The largest message of one isend (maxP2pBytes): test() reports sizes as int.
constexpr uint64_t kMaxMessageSize = 1ull << 30;
// What one isend may carry on a provider whose largest message is `provider_max` (0: no limit).
inline uint64_t message_limit(uint64_t provider_max) {
  return provider_max == 0 || provider_max > kMaxMessageSize ? kMaxMessageSize : provider_max;
}
constexpr uint32_t kProtoMagic = 0x544f5250u;
constexpr uint8_t kProtoSendRecv = 0x1;  // protocol bits of ProtoInfo::protocols
constexpr uint8_t kProtoRdma = 0x2;
// ProtoInfo::flags of an ack: the listener takes compact eager messages (no header; its fields in
// 8 bytes of remote CQ data: docs/protocol.md, "Compact eager messages"). A peer that predates the
// flag sends 0 here and never sees a compact message.
constexpr uint32_t kProtoFlagCompactEager = 0x1;

// What each side of a connection offers (ConnectMsg) and what the listener chose (AckMsg).
struct ProtoInfo {
  uint32_t magic;
  uint8_t protocols;   // connect: those the connector accepts; ack: the one chosen
  uint8_t nrails;      // connect: rails the connector has; ack: rails used (the smaller count)
  uint16_t addr_len;   // of each rail address
  uint32_t eager_max;  // ack: largest eager message the receiver takes (0: none); connect: 0
  uint32_t flags;      // ack: kProtoFlag* the listener grants; connect: 0
  uint8_t rail_addr[kMaxRails - 1][kMaxAddrLen];  // rails 1..3 (rail 0's is the main address)
  // Version 7: random, not 0; the sender's comm (connect) or the listener's recv comm (ack) takes
  // the connection's messages only with this in their control header (CtrlHdr::src), and SENDRECV
  // data only with it in the tag's upper half (data_tag).
  uint32_t cookie;
  uint8_t reserved1[8];
  uint32_t checksum;  // FNV-1a over every byte before it
};
static_assert(sizeof(ProtoInfo) == 320, "wire layout");
static_assert(offsetof(ProtoInfo, rail_addr) == 16, "wire layout");
static_assert(offsetof(ProtoInfo, cookie) == 304, "wire layout");
static_assert(offsetof(ProtoInfo, checksum) == 316, "wire layout");

// Sender to listener (control kind kCtrlConnect): who I am, and proof that I was given the handle.
struct ConnectMsg {
  uint32_t magic;
  uint16_t version;
  uint16_t addr_len;
  uint64_t token;
  uint32_t provider_hash;
  uint32_t sender_id;  // the sending comm's id: the ack and the CTSs go to it
  uint64_t nonce;      // echoed in the ack: ties it to this connect
  uint8_t addr[kMaxAddrLen];
  uint32_t reserved;
  uint32_t checksum;  // FNV-1a over bytes 0..131
  ProtoInfo proto;    // version 2 on
};
static_assert(sizeof(ConnectMsg) == 136 + sizeof(ProtoInfo), "wire layout");
static_assert(offsetof(ConnectMsg, proto) == 136, "wire layout");
static_assert(offsetof(ConnectMsg, sender_id) == 20, "wire layout");
static_assert(offsetof(ConnectMsg, nonce) == 24, "wire layout");
static_assert(offsetof(ConnectMsg, addr) == 32, "wire layout");
static_assert(offsetof(ConnectMsg, checksum) == 132, "wire layout");

enum class AckStatus : uint16_t {
  kOk = 0,
  kBadToken = 1,
  kBadVersion = 2,
  kProviderMismatch = 3,
  kMalformed = 4,
  kNoCommonProtocol = 5,
};
const char* ack_status_text(AckStatus s);

// Listener to sender (control kind kCtrlAck). Its first 8 bytes keep this layout in every version,
// so a peer of another version can still read why it was refused.
struct AckMsg {
  uint32_t magic;
  uint16_t version;
  uint16_t status;  // AckStatus
  uint64_t token;
  uint64_t nonce;
  uint32_t recv_id;   // accepted: the id of the listener's new recv comm (the sender's peer comm)
  uint32_t checksum;  // FNV-1a over bytes 0..27
  ProtoInfo proto;    // accepted connections only: a refusal is the first 32 bytes alone
};
constexpr size_t kAckRefusalSize = 32;
static_assert(sizeof(AckMsg) == kAckRefusalSize + sizeof(ProtoInfo), "wire layout");
static_assert(offsetof(AckMsg, status) == 6, "wire layout");
static_assert(offsetof(AckMsg, checksum) == 28, "wire layout");

uint32_t wire_checksum(const void* data, size_t len);
uint32_t provider_hash(const std::string& provider);

// Each decode returns false with *why set (a sentence for the log) when the bytes are not a
// valid message of our version.
void encode_handle(uint64_t token, uint32_t prov_hash, uint32_t listen_id, const uint8_t* addr,
                   size_t addr_len, void* out128);
bool decode_handle(const void* in128, WireHandle* out, std::string* why);

void encode_connect(const WireHandle& h, uint32_t sender_id, uint64_t nonce, const uint8_t* addr,
                    size_t addr_len, ConnectMsg* out);
// A ConnectMsg's version is checked apart (bad_version), so the listener can answer it.
bool decode_connect(const ConnectMsg& m, size_t received_len, std::string* why, bool* bad_version);

// Fills msg.proto (the connect's offer or the ack's choice); rail addresses of rails 1..nrails-1;
// the cookie of the comm that takes the connection's messages on this side (not 0).
void encode_proto(uint8_t protocols, uint8_t nrails, uint32_t eager_max, size_t addr_len,
                  const uint8_t (*rail_addrs)[kMaxAddrLen], uint32_t cookie, ProtoInfo* out);
bool decode_proto(const ProtoInfo& p, size_t main_addr_len, std::string* why);

// An ack with status kOk must carry its ProtoInfo (encode_proto) before it is sent; its length
// is ack_size(status).
void encode_ack(const ConnectMsg& m, AckStatus status, AckMsg* out);
// An accepting reply names the recv comm that takes the connection (1..kMaxCommId).
void set_ack_recv_id(AckMsg* m, uint32_t recv_id);
size_t ack_size(AckStatus status);
bool decode_ack(const AckMsg& m, size_t received_len, std::string* why);

// ---- RDMA protocol ----------------------------------------------------------------------------

constexpr uint32_t kCtsMagic = 0x53544352u;
constexpr int kMaxCtsEntries = 8;

// A CTS is this 16-byte header followed by n entries of cts_entry_size(nrails) bytes each: tag,
// index, size, addr (kCtsEntryFixed bytes), then one 8-byte key per rail in use. Packed, so an
// entry need not be 8-byte aligned: encode_cts/decode_cts copy fields with memcpy.
struct CtsHeader {
  uint32_t magic;
  uint16_t version;
  uint8_t n;       // buffers in the group, 1..8
  uint8_t nrails;  // rails of the connection: keys per entry
  uint32_t gen;    // the slot's generation (0..kMaxGen), echoed in every write's immediate data
  uint16_t slot;   // receiver's completion slot, echoed too
  uint16_t reserved;
};
static_assert(sizeof(CtsHeader) == 16, "wire layout");
static_assert(offsetof(CtsHeader, n) == 6 && offsetof(CtsHeader, gen) == 8, "wire layout");
static_assert(offsetof(CtsHeader, slot) == 12 && offsetof(CtsHeader, reserved) == 14,
              "wire layout");

// One buffer of a CTS as the plugin holds it (not a wire layout: on the wire only the first
// nrails keys are present).
// Messages match buffers per tag, in order: the k-th message the sender sends with tag t lands in
// the k-th buffer the receiver posted with tag t. `index` is that k (mod 2^32) for this buffer.
struct CtsEntry {
  int32_t tag;
  uint32_t index;
  uint64_t size;            // capacity of the buffer
  uint64_t addr;            // remote address as fi_writedata takes it
  uint64_t key[kMaxRails];  // registration key per rail; 0 beyond the connection's rails
};

// A decoded CTS: the header and its first h.n entries.
struct CtsMsg {
  CtsHeader h;
  CtsEntry e[kMaxCtsEntries];
};

constexpr size_t kCtsEntryFixed = 24;  // tag 4, index 4, size 8, addr 8
constexpr size_t cts_entry_size(int nrails) {
  return kCtsEntryFixed + 8 * static_cast<size_t>(nrails);
}
constexpr size_t cts_size(int n, int nrails) {
  return sizeof(CtsHeader) + static_cast<size_t>(n) * cts_entry_size(nrails);
}
constexpr size_t kCtsMaxSize = cts_size(kMaxCtsEntries, kMaxRails);
static_assert(cts_size(1, 1) == 48, "a one-buffer, one-rail CTS fits a 64-byte inject");
static_assert(kCtsMaxSize == 464, "wire layout");

// A CTS as it is sent or received. The slack past the largest CTS lets a longer message arrive
// whole and be refused for its length, rather than be truncated by the provider.
struct CtsWire {
  alignas(8) uint8_t b[kCtsMaxSize + 64];
};

// Writes m.h and its m.h.n entries, m.h.nrails keys each, to out (at least kCtsMaxSize bytes);
// returns the length, cts_size(m.h.n, m.h.nrails). m.h.n and m.h.nrails must be in range.
size_t encode_cts(const CtsMsg& m, void* out);
// What can be checked without the connection: a header (magic, version), n in 1..8, nrails in
// 1..4, len exactly cts_size(n, nrails), gen at most kMaxGen, reserved fields 0, and in every entry
// addr + size not wrapping. Fills *out (keys beyond nrails 0) only when everything holds.
bool decode_cts(const void* in, size_t len, CtsMsg* out, std::string* why);

// A notice from sender to receiver, sent as an eager message (tag bit kTagNoticeBit, CQ data = the
// message's per-tag index) into the receiver's control buffers:
// - kNoticeRts: the message is larger than an eager message and no clear-to-send has come for it:
//   send one even if the buffer is small (a receive of small buffers sends none by itself);
// - kNoticeTooLarge: the message is larger than the buffer the clear-to-send named; the receive
//   fails, as the send does.
constexpr uint32_t kNoticeMagic = 0x4543544eu;  // "NTCE"
enum NoticeKind : uint32_t { kNoticeRts = 1, kNoticeTooLarge = 2 };
struct NoticeMsg {
  uint32_t magic;
  uint32_t kind;
  uint64_t size;  // the message's length
};
static_assert(sizeof(NoticeMsg) == 16, "wire layout");
// Checks a received notice of `len` bytes: exactly sizeof(NoticeMsg), our magic, a known kind (its
// size may be anything). Writes *out only when it holds; false with *why otherwise.
bool decode_notice(const void* in, size_t len, NoticeMsg* out, std::string* why);

// The remote CQ data of each RDMA write: 4 bytes (EFA's limit). Where the provider offers 8 bytes
// of CQ data, the upper 4 carry the write's length, because fi_cq promises a length only for
// receives (EFA reports it for writes too; tcp;ofi_rxm and shm do not).
// Layout: slot (16 bits) | buffer of the group (3) | pieces - 1 (4) | slot generation (9).
constexpr int kMaxChunks = 16;
constexpr uint32_t kMaxSlots = 1u << 16;
constexpr uint32_t kGenBits = 9;
constexpr uint32_t kMaxGen = (1u << kGenBits) - 1;
inline uint32_t imm_encode(uint32_t slot, uint32_t entry, uint32_t nchunks, uint32_t gen) {
  return (slot & 0xffffu) | ((entry & 7u) << 16) | (((nchunks - 1) & 15u) << 19) |
         ((gen & kMaxGen) << 23);
}
struct Imm {
  uint32_t slot, entry, nchunks, gen;
};
inline Imm imm_decode(uint64_t data) {
  Imm i;
  const uint32_t v = static_cast<uint32_t>(data);
  i.slot = v & 0xffffu;
  i.entry = (v >> 16) & 7u;
  i.nchunks = ((v >> 19) & 15u) + 1;
  i.gen = (v >> 23) & kMaxGen;
  return i;
}

// A liveness probe (control kind kCtrlProbe to comm id 0), between shared endpoints rather than
// comms: a ping names the prober's address, so that the peer can answer (a pong) without a comm;
// the token and sequence number come back in the pong (docs/protocol.md, "Peer failure").
constexpr uint32_t kProbeMagic = 0x42525050u;  // "PPRB"
enum ProbeKind : uint8_t { kProbePing = 1, kProbePong = 2 };
struct ProbeMsg {
  uint32_t magic;
  uint16_t version;
  uint8_t kind;
  uint8_t addr_len;  // ping: bytes of addr; pong: 0
  uint32_t token;    // the prober's peer entry
  uint32_t reserved;
  uint64_t seq;  // the prober's ping number
  uint8_t addr[kMaxAddrLen];
};
constexpr size_t kProbeFixed = 24;  // a pong is this long, a ping this plus addr_len
static_assert(sizeof(ProbeMsg) == kProbeFixed + kMaxAddrLen, "wire layout");
// Checks a received probe of `len` bytes: our magic and version, a known kind; a ping is
// kProbeFixed + addr_len bytes (addr_len 1..kMaxAddrLen), a pong kProbeFixed bytes with addr_len 0.
// False with *why on anything malformed.
bool decode_probe(const void* in, size_t len, ProbeMsg* out, std::string* why);

}  // namespace nf

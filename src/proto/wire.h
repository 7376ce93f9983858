// Every message on the wire (docs/protocol.md describes them). Fixed layouts, little-endian,
// versioned, with a checksum: what a peer sends is checked before anything of it is used.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace nf {

constexpr uint16_t kWireVersion = 1;
constexpr uint32_t kHandleMagic = 0x4641424eu;   // "NBAF" in memory: nccl-fabric handle
constexpr uint32_t kConnectMagic = 0x4e4e4f43u;  // "CONN"
constexpr uint32_t kAckMagic = 0x4b434f41u;      // "AOCK"
constexpr size_t kHandleSize = 128;              // NCCL_NET_HANDLE_MAXSIZE
constexpr size_t kMaxAddrLen = 96;               // EFA: 32, IPv6 sockaddr: 28, shm: a name

// Tags. Every comm of a process shares one endpoint per device; the receiving comm's id (1..2^28-1)
// sits in bits 32..59 of every tag. Data: NCCL's tag in the low 32 bits. Control: bit 60 set, the
// kind (connect, ack) in the low bits, so a control message never matches a data receive.
constexpr uint64_t kTagCtrlBit = 1ull << 60;
constexpr uint32_t kMaxCommId = (1u << 28) - 1;
constexpr uint64_t kCtrlConnect = 1;
constexpr uint64_t kCtrlAck = 2;
inline uint64_t ctrl_tag(uint32_t comm_id, uint64_t kind) {
  return kTagCtrlBit | (static_cast<uint64_t>(comm_id) << 32) | kind;
}
inline uint64_t data_tag(uint32_t comm_id, int tag) {
  return (static_cast<uint64_t>(comm_id) << 32) | static_cast<uint32_t>(tag);
}

// What listen writes into NCCL's 128-byte handle.
struct WireHandle {
  uint32_t magic;
  uint16_t version;
  uint16_t addr_len;
  uint64_t token;          // random; accept refuses a connect that does not carry it
  uint32_t provider_hash;  // so a sender on another provider hears why it cannot connect
  uint32_t listen_id;      // the listen comm's id: connect and data go to tags carrying it
  uint8_t addr[kMaxAddrLen];
  uint32_t reserved;
  uint32_t checksum;       // FNV-1a over every byte before it
};
static_assert(sizeof(WireHandle) == kHandleSize, "the handle fills NCCL's 128 bytes exactly");
static_assert(offsetof(WireHandle, token) == 8, "wire layout");
static_assert(offsetof(WireHandle, listen_id) == 20, "wire layout");
static_assert(offsetof(WireHandle, addr) == 24, "wire layout");
static_assert(offsetof(WireHandle, checksum) == 124, "wire layout");

// Sender to listener, tag kTagConnect: who I am, and proof that I was given the handle.
struct ConnectMsg {
  uint32_t magic;
  uint16_t version;
  uint16_t addr_len;
  uint64_t token;
  uint32_t provider_hash;
  uint32_t sender_id;  // the sending comm's id: the ack goes to tags carrying it
  uint64_t nonce;  // echoed in the ack: ties it to this connect
  uint8_t addr[kMaxAddrLen];
  uint32_t reserved;
  uint32_t checksum;
};
static_assert(sizeof(ConnectMsg) == 136, "wire layout");
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
};
const char* ack_status_text(AckStatus s);

// Listener to sender, tag kTagAck. Its first 8 bytes keep this layout in every version, so a
// peer of another version can still read why it was refused.
struct AckMsg {
  uint32_t magic;
  uint16_t version;
  uint16_t status;  // AckStatus
  uint64_t token;
  uint64_t nonce;
  uint32_t reserved;
  uint32_t checksum;
};
static_assert(sizeof(AckMsg) == 32, "wire layout");
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

void encode_ack(const ConnectMsg& m, AckStatus status, AckMsg* out);
bool decode_ack(const AckMsg& m, size_t received_len, std::string* why);

}  // namespace nf

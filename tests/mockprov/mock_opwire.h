// Mock operations between processes (issue 35, point 1; second step): how an operation, its
// pieces and its result travel as messages of the wire (mock_net.h), and how the receiving side
// puts a message's pieces back together. Pure functions and one bounded container, no sockets:
// tests/mockprov/test_mock_net.cpp checks them, random orders, duplicates and bad input included.
//
// Every message of the wire is one frame: a fixed header (OpFrame, 144 bytes, little-endian as
// the machines are), then `piece` bytes of payload. An operation larger than one frame goes as
// pieces (offset, piece) of its `total` bytes; the target acts on it once every piece is there.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace mockefa {
namespace opwire {

constexpr uint32_t kMagic = 0x4d4f5057;  // "MOPW"
constexpr uint8_t kVersion = 1;
constexpr size_t kAddr = 32;  // FI_ADDR_EFA

enum class Kind : uint8_t {
  kSend = 1,  // untagged message
  kTagged,    // tagged message
  kWrite,     // RMA write (with CQ data when kHasData)
  kRead,      // RMA read request (no payload)
  kResult,    // the target's answer: status, and for a read its data
};
constexpr uint8_t kHasData = 1;  // flags: the write or send carries remote CQ data

struct OpFrame {
  uint32_t magic = kMagic;
  uint8_t version = kVersion;
  Kind kind = Kind::kSend;
  uint8_t flags = 0;
  uint8_t pad = 0;
  uint64_t op_id = 0;  // the initiator's id of the operation (a result names it)
  uint64_t tag = 0;
  uint64_t data = 0;      // remote CQ data (4 bytes used, as EFA)
  uint64_t rma_addr = 0;  // target address (write, read)
  uint64_t rma_key = 0;
  uint64_t total = 0;   // bytes of the whole operation (a read: bytes asked for)
  uint64_t offset = 0;  // of this piece
  uint64_t seq = 0;     // a message's place among those of its sender to its target (SAS)
  uint32_t piece = 0;   // payload bytes in this frame
  int32_t status = 0;   // kResult: 0, or the EFA provider error the operation failed with
  uint8_t src[kAddr] = {};
  uint8_t dst[kAddr] = {};
};
static_assert(sizeof(OpFrame) == 144, "the operation frame header is 144 bytes");

// Largest operation a frame may announce (EFA's max_msg_size is far below).
constexpr uint64_t kMaxTotal = uint64_t{1} << 32;

// Header then payload, into out. False when the piece does not fit the operation.
bool encode(const OpFrame& f, const void* payload, std::vector<uint8_t>* out);
// Checks and splits a received frame; false, with why, for anything malformed: short, wrong
// magic or version, unknown kind, a piece that does not match the length or lies outside total,
// a total above kMaxTotal, a read request with payload.
bool decode(const uint8_t* buf, size_t len, OpFrame* f, const uint8_t** payload, std::string* why);

// Puts operations back together from their pieces, per (sender, op id). Duplicated pieces are
// ignored; a piece that disagrees with the first one of its operation (another total or kind)
// is refused; the bytes held in unfinished operations are bounded (`limit`), beyond which a new
// operation is refused (its sender retries it, as a receiver-not-ready).
class Reassembly {
 public:
  explicit Reassembly(uint64_t limit) : limit_(limit) {}
  enum class Add { kMore, kDone, kDuplicate, kRefused };
  // Adds one piece of f (payload: f.piece bytes). kDone: *whole is the operation's bytes (and the
  // operation is forgotten).
  Add add(uint64_t sender, const OpFrame& f, const uint8_t* payload, std::vector<uint8_t>* whole);
  uint64_t held() const { return held_; }
  size_t pending() const { return parts_.size(); }
  // Forgets every unfinished operation of a sender (it is gone).
  void drop(uint64_t sender);

 private:
  struct Part {
    Kind kind;
    uint64_t total = 0, got = 0;
    std::vector<uint8_t> bytes;
    std::map<uint64_t, uint32_t> pieces;  // offset -> length
  };
  uint64_t limit_;
  uint64_t held_ = 0;
  std::map<std::pair<uint64_t, uint64_t>, Part> parts_;
};

}  // namespace opwire
}  // namespace mockefa

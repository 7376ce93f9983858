// Mock operations between processes: frames and reassembly (mock_opwire.h).
#include "mock_opwire.h"

#include <cstring>
#include <iterator>

namespace mockefa {
namespace opwire {

bool encode(const OpFrame& f, const void* payload, std::vector<uint8_t>* out) {
  if (f.total > kMaxTotal || f.offset > f.total || f.piece > f.total - f.offset) return false;
  out->resize(sizeof(OpFrame) + f.piece);
  std::memcpy(out->data(), &f, sizeof(OpFrame));
  if (f.piece) std::memcpy(out->data() + sizeof(OpFrame), payload, f.piece);
  return true;
}

bool decode(const uint8_t* buf, size_t len, OpFrame* f, const uint8_t** payload, std::string* why) {
  if (len < sizeof(OpFrame)) {
    *why = "a frame of " + std::to_string(len) + " bytes, shorter than its header";
    return false;
  }
  std::memcpy(f, buf, sizeof(OpFrame));
  if (f->magic != kMagic || f->version != kVersion) {
    *why = "wrong magic or version " + std::to_string(f->version);
    return false;
  }
  const uint8_t k = static_cast<uint8_t>(f->kind);
  if (k < static_cast<uint8_t>(Kind::kSend) || k > static_cast<uint8_t>(Kind::kResult)) {
    *why = "unknown kind " + std::to_string(k);
    return false;
  }
  if (sizeof(OpFrame) + static_cast<uint64_t>(f->piece) != len) {
    *why = "a piece of " + std::to_string(f->piece) + " bytes in a frame of " + std::to_string(len);
    return false;
  }
  if (f->total > kMaxTotal) {
    *why = "an operation of " + std::to_string(f->total) + " bytes";
    return false;
  }
  if (f->offset > f->total || f->piece > f->total - f->offset) {
    *why = "a piece outside its operation";
    return false;
  }
  if (f->kind == Kind::kRead && f->piece != 0) {
    *why = "a read request with payload";
    return false;
  }
  *payload = buf + sizeof(OpFrame);
  return true;
}

Reassembly::Add Reassembly::add(uint64_t sender, const OpFrame& f, const uint8_t* payload,
                                std::vector<uint8_t>* whole) {
  // An operation in one piece (the common case) needs no bookkeeping.
  const auto key = std::make_pair(sender, f.op_id);
  auto it = parts_.find(key);
  if (it == parts_.end()) {
    if (f.offset == 0 && f.piece == f.total) {
      whole->assign(payload, payload + f.piece);
      return Add::kDone;
    }
    if (held_ + f.total > limit_) return Add::kRefused;
    Part p;
    p.kind = f.kind;
    p.total = f.total;
    p.bytes.resize(f.total);
    held_ += f.total;
    it = parts_.emplace(key, std::move(p)).first;
  }
  Part& p = it->second;
  if (p.kind != f.kind || p.total != f.total) return Add::kRefused;
  auto at = p.pieces.find(f.offset);
  if (at != p.pieces.end()) return at->second == f.piece ? Add::kDuplicate : Add::kRefused;
  // No overlap with the pieces around it.
  auto next = p.pieces.lower_bound(f.offset);
  if (next != p.pieces.end() && f.offset + f.piece > next->first) return Add::kRefused;
  if (next != p.pieces.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second > f.offset) return Add::kRefused;
  }
  p.pieces.emplace(f.offset, f.piece);
  if (f.piece) std::memcpy(p.bytes.data() + f.offset, payload, f.piece);
  p.got += f.piece;
  if (p.got < p.total) return Add::kMore;
  *whole = std::move(p.bytes);
  held_ -= p.total;
  parts_.erase(it);
  return Add::kDone;
}

void Reassembly::drop(uint64_t sender) {
  for (auto it = parts_.begin(); it != parts_.end();) {
    if (it->first.first == sender) {
      held_ -= it->second.total;
      it = parts_.erase(it);
    } else {
      ++it;
    }
  }
}

}  // namespace opwire
}  // namespace mockefa

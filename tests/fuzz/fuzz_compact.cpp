// decode_compact: a compact eager message (wire version 7) as the receiver takes it. The input is
// the 8 bytes of remote CQ data (little-endian; a shorter input is zero-padded), then the message
// as received: the receiving comm's cookie and NCCL's payload.
#include <string>

#include "fuzz.h"
#include "wire/wire.h"

using namespace nf;

namespace {

void round_trip(nf_fuzz::Reader& r) {
  const uint32_t dst = static_cast<uint32_t>(r.range(1, kMaxCommId));
  const int32_t tag = static_cast<int32_t>(r.range(0, kCompactTagMax));
  const uint32_t index = r.u32();
  const uint32_t cookie = r.u32();
  uint8_t b[kCompactPrefix + 64 + 1];
  r.fill(b, sizeof(b));
  memcpy(b + 1, &cookie, sizeof(cookie));  // at an odd offset: no alignment assumed
  const size_t len = r.range(kCompactPrefix, sizeof(b) - 1);
  const uint64_t data = compact_eager_data(dst, tag, index);
  CtrlHdr h;
  std::string why;
  NF_FUZZ_CHECK(decode_compact(data, b + 1, len, &h, &why));
  NF_FUZZ_CHECK(ctrl_kind(h) == kCtrlEager && ctrl_dst(h) == dst && ctrl_cookie(h) == cookie);
  NF_FUZZ_CHECK(h.tag == tag && h.index == (index & 0xffffu));
  // Shorter than the cookie, without the mark, or for comm 0: refused.
  NF_FUZZ_CHECK(!decode_compact(data, b + 1, r.range(0, kCompactPrefix - 1), &h, &why));
  NF_FUZZ_CHECK(!decode_compact(data & ~(0xfull << 60), b + 1, len, &h, &why));
  NF_FUZZ_CHECK(!decode_compact(data & ~(uint64_t{kMaxCommId} << 32), b + 1, len, &h, &why));
  NF_FUZZ_CHECK(!why.empty());
}

}  // namespace

NF_FUZZ_TARGET(compact) {
  uint8_t d8[8] = {0};
  memcpy(d8, data, size < 8 ? size : 8);
  uint64_t cq;
  memcpy(&cq, d8, sizeof(cq));
  const uint8_t* msg = size > 8 ? data + 8 : data;
  const size_t len = size > 8 ? size - 8 : 0;
  CtrlHdr h;
  memset(&h, 0xa5, sizeof(h));
  std::string why;
  if (decode_compact(cq, msg, len, &h, &why)) {
    NF_FUZZ_CHECK((cq >> 60) == 0xe && len >= kCompactPrefix);
    NF_FUZZ_CHECK(ctrl_kind(h) == kCtrlEager);
    NF_FUZZ_CHECK(ctrl_dst(h) != 0 && ctrl_dst(h) == ((cq >> 32) & kMaxCommId));
    NF_FUZZ_CHECK(memcmp(&h.src, msg, kCompactPrefix) == 0);
    NF_FUZZ_CHECK(h.tag >= 0 && h.tag <= kCompactTagMax && h.index <= 0xffffu);
    // What the sender would have written: the same CQ data, bits 0..59 of it.
    NF_FUZZ_CHECK(compact_eager_data(ctrl_dst(h), h.tag, h.index) == cq);
    CtrlHdr d;
    NF_FUZZ_CHECK(decode_ctrl_hdr(&h, sizeof(h), &d, &why));  // a valid eager header
  } else {
    NF_FUZZ_CHECK(!why.empty());
  }
  nf_fuzz::Reader r(data, size);
  round_trip(r);
  return 0;
}

// decode_ctrl_hdr: the 16-byte header of every control message, as the endpoint receives it. The
// input is the whole message (header and payload), passed as it is.
#include <string>

#include "fuzz.h"
#include "wire/wire.h"

using namespace nf;

namespace {

bool indexed(uint8_t kind) { return kind == kCtrlEager || kind == kCtrlNotice; }

void check_accepted(const CtrlHdr& h, const uint8_t* data, size_t len) {
  NF_FUZZ_CHECK(len >= kCtrlHdrSize);
  const uint8_t kind = ctrl_kind(h);
  NF_FUZZ_CHECK(kind >= 1 && kind <= kCtrlKindMax);
  // The connection's kinds carry a 32-bit cookie (any value: the comm checks it), the others the
  // sending comm's id and the version.
  const bool conn = kind == kCtrlCts || kind == kCtrlEager || kind == kCtrlNotice;
  NF_FUZZ_CHECK(ctrl_conn_kind(kind) == conn);
  if (!conn) NF_FUZZ_CHECK((h.src >> 28) == kCtrlVersion);
  NF_FUZZ_CHECK((kind == kCtrlProbe) == (ctrl_dst(h) == 0));
  if (!indexed(kind)) NF_FUZZ_CHECK(h.tag == 0 && h.index == 0);
  // Every bit of the header is a field: built again it is the same 16 bytes.
  const CtrlHdr g =
      ctrl_hdr(kind, ctrl_dst(h), conn ? ctrl_cookie(h) : ctrl_src(h), h.tag, h.index);
  NF_FUZZ_CHECK(memcmp(&g, data, kCtrlHdrSize) == 0);
}

void round_trip(nf_fuzz::Reader& r) {
  const uint8_t kind = static_cast<uint8_t>(r.range(1, kCtrlKindMax));
  const uint32_t dst = kind == kCtrlProbe ? 0 : static_cast<uint32_t>(r.range(1, kMaxCommId));
  // The sending comm's id, or (the connection's kinds) the receiving comm's cookie.
  const uint32_t src =
      ctrl_conn_kind(kind) ? r.u32() : static_cast<uint32_t>(r.range(0, kMaxCommId));
  const int32_t tag = indexed(kind) ? static_cast<int32_t>(r.u32()) : 0;
  const uint32_t index = indexed(kind) ? r.u32() : 0;
  uint8_t b[kCtrlHdrSize + 64];
  r.fill(b, sizeof(b));
  const CtrlHdr h = ctrl_hdr(kind, dst, src, tag, index);
  memcpy(b, &h, sizeof(h));
  const size_t len = r.range(kCtrlHdrSize, sizeof(b));  // any payload after it
  CtrlHdr d;
  std::string why;
  NF_FUZZ_CHECK(decode_ctrl_hdr(b, len, &d, &why));
  NF_FUZZ_CHECK(ctrl_kind(d) == kind && ctrl_dst(d) == dst);
  NF_FUZZ_CHECK(ctrl_conn_kind(kind) ? ctrl_cookie(d) == src : ctrl_src(d) == src);
  NF_FUZZ_CHECK(d.tag == tag && d.index == index);
  NF_FUZZ_CHECK(!decode_ctrl_hdr(b, r.range(0, kCtrlHdrSize - 1), &d, &why));
  NF_FUZZ_CHECK(!why.empty());
}

}  // namespace

NF_FUZZ_TARGET(ctrl_hdr) {
  CtrlHdr h;
  std::string why;
  if (decode_ctrl_hdr(data, size, &h, &why)) {
    check_accepted(h, data, size);
  } else {
    NF_FUZZ_CHECK(!why.empty());
  }
  nf_fuzz::Reader r(data, size);
  round_trip(r);
  return 0;
}

// decode_notice: a notice (rts, too large) as a receiver takes it from an eager control message:
// the payload, passed as it is.
#include <string>

#include "fuzz.h"
#include "wire/wire.h"

using namespace nf;

namespace {

void round_trip(nf_fuzz::Reader& r) {
  NoticeMsg m;
  m.magic = kNoticeMagic;
  m.kind = r.flag() ? kNoticeRts : kNoticeTooLarge;
  m.size = r.u64();
  uint8_t b[sizeof(m) + 1];
  memcpy(b + 1, &m, sizeof(m));  // at an odd offset: no alignment assumed
  NoticeMsg d;
  std::string why;
  NF_FUZZ_CHECK(decode_notice(b + 1, sizeof(m), &d, &why));
  NF_FUZZ_CHECK(d.magic == m.magic && d.kind == m.kind && d.size == m.size);
  const size_t other = r.range(0, sizeof(m));
  if (other != sizeof(m)) NF_FUZZ_CHECK(!decode_notice(b + 1, other, &d, &why));
}

}  // namespace

NF_FUZZ_TARGET(notice) {
  NoticeMsg m;
  memset(&m, 0xa5, sizeof(m));
  std::string why;
  if (decode_notice(data, size, &m, &why)) {
    NF_FUZZ_CHECK(size == sizeof(m));
    NF_FUZZ_CHECK(m.magic == kNoticeMagic);
    NF_FUZZ_CHECK(m.kind == kNoticeRts || m.kind == kNoticeTooLarge);
    // Every byte is a field: the same message again.
    NF_FUZZ_CHECK(memcmp(&m, data, sizeof(m)) == 0);
  } else {
    NF_FUZZ_CHECK(!why.empty());
    NF_FUZZ_CHECK(m.magic == 0xa5a5a5a5u && m.kind == 0xa5a5a5a5u && m.size == ~0ull / 255 * 0xa5);
  }
  nf_fuzz::Reader r(data, size);
  round_trip(r);
  return 0;
}

// decode_cts: a clear-to-send as a sender receives it. The input is the message itself, passed as
// it is (the sanitizers see any read past its end).
#include <string>

#include "fuzz.h"
#include "wire/wire.h"

using namespace nf;

namespace {

void check_accepted(const CtsMsg& m, const uint8_t* data, size_t len) {
  const CtsHeader& h = m.h;
  NF_FUZZ_CHECK(h.magic == kCtsMagic && h.version == kWireVersion);
  NF_FUZZ_CHECK(h.n >= 1 && h.n <= kMaxCtsEntries);
  NF_FUZZ_CHECK(h.nrails >= 1 && h.nrails <= kMaxRails);
  NF_FUZZ_CHECK(len == cts_size(h.n, h.nrails));
  NF_FUZZ_CHECK(h.gen <= kMaxGen && h.reserved == 0);
  for (int i = 0; i < h.n; ++i) {
    const CtsEntry& e = m.e[i];
    NF_FUZZ_CHECK(e.addr + e.size >= e.addr);
    for (int k = h.nrails; k < kMaxRails; ++k) NF_FUZZ_CHECK(e.key[k] == 0);
  }
  // Every byte of a CTS is a field: encoded again it is the same message.
  CtsWire w;
  NF_FUZZ_CHECK(encode_cts(m, w.b) == len);
  NF_FUZZ_CHECK(memcmp(w.b, data, len) == 0);
}

void round_trip(nf_fuzz::Reader& r) {
  CtsMsg m;
  memset(&m, 0, sizeof(m));
  m.h.magic = kCtsMagic;
  m.h.version = kWireVersion;
  m.h.n = static_cast<uint8_t>(r.range(1, kMaxCtsEntries));
  m.h.nrails = static_cast<uint8_t>(r.range(1, kMaxRails));
  m.h.gen = static_cast<uint32_t>(r.range(0, kMaxGen));
  m.h.slot = r.u16();
  for (int i = 0; i < m.h.n; ++i) {
    CtsEntry& e = m.e[i];
    e.tag = static_cast<int32_t>(r.u32());
    e.index = r.u32();
    e.size = r.u64();
    e.addr = r.range(0, ~0ull - e.size);  // any buffer that does not wrap
    for (int k = 0; k < m.h.nrails; ++k) e.key[k] = r.u64();
  }
  CtsWire w;
  const size_t len = encode_cts(m, w.b + 1);  // at an odd offset: no alignment assumed
  NF_FUZZ_CHECK(len == cts_size(m.h.n, m.h.nrails));
  CtsMsg d;
  memset(&d, 0xa5, sizeof(d));
  std::string why;
  NF_FUZZ_CHECK(decode_cts(w.b + 1, len, &d, &why));
  NF_FUZZ_CHECK(memcmp(&d.h, &m.h, sizeof(m.h)) == 0);
  for (int i = 0; i < m.h.n; ++i) NF_FUZZ_CHECK(memcmp(&d.e[i], &m.e[i], sizeof(m.e[i])) == 0);
  // Any other length is refused and leaves *out alone.
  const size_t other = r.range(0, sizeof(w.b) - 1);
  if (other != len) {
    CtsMsg u;
    memset(&u, 0xa5, sizeof(u));
    NF_FUZZ_CHECK(!decode_cts(w.b + 1, other, &u, &why));
    for (size_t i = 0; i < sizeof(u); ++i) NF_FUZZ_CHECK(reinterpret_cast<uint8_t*>(&u)[i] == 0xa5);
  }
}

}  // namespace

NF_FUZZ_TARGET(cts) {
  CtsMsg m;
  memset(&m, 0xa5, sizeof(m));
  std::string why;
  if (decode_cts(data, size, &m, &why)) {
    check_accepted(m, data, size);
    // Only the header and the first n entries are written.
    for (size_t i = sizeof(CtsHeader) + m.h.n * sizeof(CtsEntry); i < sizeof(m); ++i)
      NF_FUZZ_CHECK(reinterpret_cast<const uint8_t*>(&m)[i] == 0xa5);
  } else {
    NF_FUZZ_CHECK(!why.empty());
    for (size_t i = 0; i < sizeof(m); ++i)
      NF_FUZZ_CHECK(reinterpret_cast<const uint8_t*>(&m)[i] == 0xa5);
  }
  nf_fuzz::Reader r(data, size);
  round_trip(r);
  return 0;
}

// decode_proto: the protocol block of a connect or an ack. The input is the main address's length
// (2 bytes, little-endian: what the enclosing message names), then the block as received; a short
// block is zero-padded, a longer input cut.
#include <string>

#include "fuzz.h"
#include "wire/wire.h"

using namespace nf;

namespace {

void check_accepted(const ProtoInfo& p, size_t main_len) {
  NF_FUZZ_CHECK(p.magic == kProtoMagic);
  NF_FUZZ_CHECK(p.checksum == wire_checksum(&p, offsetof(ProtoInfo, checksum)));
  NF_FUZZ_CHECK(p.protocols != 0 && (p.protocols & ~(kProtoSendRecv | kProtoRdma)) == 0);
  NF_FUZZ_CHECK(p.nrails >= 1 && p.nrails <= kMaxRails);
  NF_FUZZ_CHECK(p.addr_len == main_len);
  // Rail addresses are copied with this length: it must fit their arrays, whatever the caller
  // passed as the main address's length.
  NF_FUZZ_CHECK(p.addr_len >= 1 && p.addr_len <= kMaxAddrLen);
  NF_FUZZ_CHECK(p.eager_max <= kMaxEagerMax);
  NF_FUZZ_CHECK(p.cookie != 0);
  ProtoInfo g;
  encode_proto(p.protocols, p.nrails, p.eager_max, p.addr_len, p.rail_addr, p.cookie, &g);
  g.flags = p.flags;  // encode_proto leaves it 0
  g.checksum = wire_checksum(&g, offsetof(ProtoInfo, checksum));
  std::string why;
  NF_FUZZ_CHECK(decode_proto(g, main_len, &why));
  NF_FUZZ_CHECK(memcmp(&g, &p, offsetof(ProtoInfo, rail_addr)) == 0);
  for (int r = 1; r < p.nrails; ++r)
    NF_FUZZ_CHECK(memcmp(g.rail_addr[r - 1], p.rail_addr[r - 1], p.addr_len) == 0);
}

void round_trip(nf_fuzz::Reader& r) {
  const uint8_t protocols = static_cast<uint8_t>(r.range(1, kProtoSendRecv | kProtoRdma));
  const uint8_t nrails = static_cast<uint8_t>(r.range(1, kMaxRails));
  const uint32_t eager_max = static_cast<uint32_t>(r.range(0, kMaxEagerMax));
  const size_t addr_len = r.range(1, kMaxAddrLen);
  uint8_t rails[kMaxRails - 1][kMaxAddrLen];
  r.fill(rails, sizeof(rails));
  const uint32_t cookie = static_cast<uint32_t>(r.range(1, 0xffffffffu));
  ProtoInfo p;
  encode_proto(protocols, nrails, eager_max, addr_len, rails, cookie, &p);
  ProtoInfo q = p;
  std::string why;
  NF_FUZZ_CHECK(decode_proto(p, addr_len, &why));
  NF_FUZZ_CHECK(p.protocols == protocols && p.nrails == nrails && p.eager_max == eager_max);
  NF_FUZZ_CHECK(p.cookie == cookie);
  NF_FUZZ_CHECK(p.addr_len == addr_len);
  for (int i = 1; i < kMaxRails; ++i) {
    for (size_t k = 0; k < kMaxAddrLen; ++k)
      NF_FUZZ_CHECK(p.rail_addr[i - 1][k] == (i < nrails && k < addr_len ? rails[i - 1][k] : 0));
  }
  // Another main address length, or any one byte changed, is refused.
  const size_t other = r.range(0, 0xffff);
  if (other != addr_len) NF_FUZZ_CHECK(!decode_proto(p, other, &why));
  uint8_t* b = reinterpret_cast<uint8_t*>(&q);
  b[r.range(0, sizeof(q) - 1)] ^= static_cast<uint8_t>(r.range(1, 255));
  NF_FUZZ_CHECK(!decode_proto(q, addr_len, &why));
  NF_FUZZ_CHECK(!why.empty());
}

void decode(const ProtoInfo& p, size_t main_len) {
  std::string why;
  if (decode_proto(p, main_len, &why)) {
    check_accepted(p, main_len);
  } else {
    NF_FUZZ_CHECK(!why.empty());
  }
}

}  // namespace

NF_FUZZ_TARGET(proto) {
  size_t main_len = 0;
  if (size >= 1) main_len = data[0];
  if (size >= 2) main_len |= static_cast<size_t>(data[1]) << 8;
  ProtoInfo p;
  memset(&p, 0, sizeof(p));
  if (size > 2) memcpy(&p, data + 2, size - 2 < sizeof(p) ? size - 2 : sizeof(p));
  decode(p, main_len);
  // A hostile peer computes checksums too: the same bytes with a good one reach every other check.
  p.checksum = wire_checksum(&p, offsetof(ProtoInfo, checksum));
  decode(p, main_len);
  nf_fuzz::Reader r(data, size);
  round_trip(r);
  return 0;
}

// decode_connect: a connect message as a listener receives it (the control message's payload).
// The input is the payload: copied into a zero-padded ConnectMsg, its length the received length,
// so short and long messages both come.
#include <string>

#include "fuzz.h"
#include "wire/wire.h"

using namespace nf;

namespace {

// Encodes fields as the connector does: encode_connect, then the protocol block.
void encode(uint64_t token, uint32_t hash, uint32_t sender_id, uint64_t nonce, const uint8_t* addr,
            size_t addr_len, uint8_t protocols, uint8_t nrails, uint32_t eager_max,
            const uint8_t (*rails)[kMaxAddrLen], ConnectMsg* out) {
  WireHandle h;
  memset(&h, 0, sizeof(h));
  h.token = token;
  h.provider_hash = hash;
  encode_connect(h, sender_id, nonce, addr, addr_len, out);
  encode_proto(protocols, nrails, eager_max, addr_len, rails, static_cast<uint32_t>(nonce) | 1u,
               &out->proto);
}

void check_accepted(const ConnectMsg& m, size_t len) {
  NF_FUZZ_CHECK(len == sizeof(ConnectMsg));
  NF_FUZZ_CHECK(m.magic == kConnectMagic && m.version == kWireVersion);
  NF_FUZZ_CHECK(m.checksum == wire_checksum(&m, offsetof(ConnectMsg, checksum)));
  NF_FUZZ_CHECK(m.addr_len >= 1 && m.addr_len <= kMaxAddrLen);
  NF_FUZZ_CHECK(m.sender_id >= 1 && m.sender_id <= kMaxCommId);
  const ProtoInfo& p = m.proto;
  NF_FUZZ_CHECK(p.magic == kProtoMagic);
  NF_FUZZ_CHECK(p.checksum == wire_checksum(&p, offsetof(ProtoInfo, checksum)));
  NF_FUZZ_CHECK(p.protocols != 0 && (p.protocols & ~(kProtoSendRecv | kProtoRdma)) == 0);
  NF_FUZZ_CHECK(p.nrails >= 1 && p.nrails <= kMaxRails);
  NF_FUZZ_CHECK(p.addr_len == m.addr_len);
  NF_FUZZ_CHECK(p.eager_max <= kMaxEagerMax);
  NF_FUZZ_CHECK(p.cookie != 0);
  ConnectMsg g;
  encode(m.token, m.provider_hash, m.sender_id, m.nonce, m.addr, m.addr_len, p.protocols, p.nrails,
         p.eager_max, p.rail_addr, &g);
  g.proto.flags = p.flags;  // encode_proto leaves it 0
  g.proto.checksum = wire_checksum(&g.proto, offsetof(ProtoInfo, checksum));
  std::string why;
  bool bad_version = true;
  NF_FUZZ_CHECK(decode_connect(g, sizeof(g), &why, &bad_version) && !bad_version);
  // The fields, byte for byte (reserved words and unused address bytes are only checksummed).
  NF_FUZZ_CHECK(memcmp(&g, &m, offsetof(ConnectMsg, addr) + m.addr_len) == 0);
  NF_FUZZ_CHECK(memcmp(&g.proto, &p, offsetof(ProtoInfo, rail_addr)) == 0);
  for (int r = 1; r < p.nrails; ++r)
    NF_FUZZ_CHECK(memcmp(g.proto.rail_addr[r - 1], p.rail_addr[r - 1], p.addr_len) == 0);
}

void round_trip(nf_fuzz::Reader& r) {
  const uint64_t token = r.u64();
  const uint32_t hash = r.u32();
  const uint32_t sender_id = static_cast<uint32_t>(r.range(1, kMaxCommId));
  const uint64_t nonce = r.u64();
  const size_t addr_len = r.range(1, kMaxAddrLen);
  uint8_t addr[kMaxAddrLen];
  r.fill(addr, addr_len);
  const uint8_t protocols = static_cast<uint8_t>(r.range(1, kProtoSendRecv | kProtoRdma));
  const uint8_t nrails = static_cast<uint8_t>(r.range(1, kMaxRails));
  const uint32_t eager_max = static_cast<uint32_t>(r.range(0, kMaxEagerMax));
  uint8_t rails[kMaxRails - 1][kMaxAddrLen];
  r.fill(rails, sizeof(rails));
  ConnectMsg m;
  encode(token, hash, sender_id, nonce, addr, addr_len, protocols, nrails, eager_max, rails, &m);
  std::string why;
  bool bad_version = true;
  NF_FUZZ_CHECK(decode_connect(m, sizeof(m), &why, &bad_version) && !bad_version);
  NF_FUZZ_CHECK(m.token == token && m.provider_hash == hash && m.sender_id == sender_id);
  NF_FUZZ_CHECK(m.nonce == nonce && m.addr_len == addr_len);
  NF_FUZZ_CHECK(memcmp(m.addr, addr, addr_len) == 0);
  NF_FUZZ_CHECK(m.proto.protocols == protocols && m.proto.nrails == nrails);
  NF_FUZZ_CHECK(m.proto.eager_max == eager_max && m.proto.addr_len == addr_len);
  for (int i = 1; i < nrails; ++i)
    NF_FUZZ_CHECK(memcmp(m.proto.rail_addr[i - 1], rails[i - 1], addr_len) == 0);
  // Any other length is refused; so is any one byte changed (two checksums cover them all).
  const size_t len = r.range(0, sizeof(m) + 64);
  if (len != sizeof(m)) NF_FUZZ_CHECK(!decode_connect(m, len, &why, &bad_version));
  ConnectMsg bad = m;
  reinterpret_cast<uint8_t*>(&bad)[r.range(0, sizeof(bad) - 1)] ^=
      static_cast<uint8_t>(r.range(1, 255));
  NF_FUZZ_CHECK(!decode_connect(bad, sizeof(bad), &why, &bad_version));
  NF_FUZZ_CHECK(!why.empty());
}

void decode(const ConnectMsg& m, size_t size) {
  std::string why;
  bool bad_version = true;
  if (decode_connect(m, size, &why, &bad_version)) {
    NF_FUZZ_CHECK(!bad_version);
    check_accepted(m, size);
  } else {
    NF_FUZZ_CHECK(!why.empty());
    // "Another version" is said only of a connect message (so the listener answers it).
    if (bad_version)
      NF_FUZZ_CHECK(size >= 8 && m.magic == kConnectMagic && m.version != kWireVersion);
  }
}

}  // namespace

NF_FUZZ_TARGET(connect) {
  ConnectMsg m;
  memset(&m, 0, sizeof(m));
  memcpy(&m, data, size < sizeof(m) ? size : sizeof(m));
  decode(m, size);
  // A hostile peer computes checksums too: the same bytes with good ones reach every other check.
  m.checksum = wire_checksum(&m, offsetof(ConnectMsg, checksum));
  m.proto.checksum = wire_checksum(&m.proto, offsetof(ProtoInfo, checksum));
  decode(m, size);
  nf_fuzz::Reader r(data, size);
  round_trip(r);
  return 0;
}

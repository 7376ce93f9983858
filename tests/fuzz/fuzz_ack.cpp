// decode_ack: the listener's reply as a connector receives it (the control message's payload).
// The input is the payload: copied into a zero-padded AckMsg, its length the received length.
#include <string>

#include "fuzz.h"
#include "wire/wire.h"

using namespace nf;

namespace {

// Encodes as the listener does: encode_ack from the connect's token and nonce, then (accepted
// only) the protocol block.
void encode(uint64_t token, uint64_t nonce, AckStatus status, AckMsg* out) {
  ConnectMsg c;
  memset(&c, 0, sizeof(c));
  c.token = token;
  c.nonce = nonce;
  encode_ack(c, status, out);
}

void check_accepted(const AckMsg& m, size_t len) {
  NF_FUZZ_CHECK(len == sizeof(AckMsg));
  NF_FUZZ_CHECK(m.magic == kAckMagic && m.version == kWireVersion);
  NF_FUZZ_CHECK(m.status == static_cast<uint16_t>(AckStatus::kOk));
  NF_FUZZ_CHECK(m.recv_id >= 1 && m.recv_id <= kMaxCommId);
  NF_FUZZ_CHECK(m.checksum == wire_checksum(&m, offsetof(AckMsg, checksum)));
  const ProtoInfo& p = m.proto;
  NF_FUZZ_CHECK(p.magic == kProtoMagic);
  NF_FUZZ_CHECK(p.checksum == wire_checksum(&p, offsetof(ProtoInfo, checksum)));
  NF_FUZZ_CHECK(p.protocols == kProtoSendRecv || p.protocols == kProtoRdma);
  NF_FUZZ_CHECK(p.nrails >= 1 && p.nrails <= kMaxRails);
  NF_FUZZ_CHECK(p.addr_len >= 1 && p.addr_len <= kMaxAddrLen);
  NF_FUZZ_CHECK(p.eager_max <= kMaxEagerMax);
  NF_FUZZ_CHECK(p.cookie != 0);
  AckMsg g;
  encode(m.token, m.nonce, AckStatus::kOk, &g);
  set_ack_recv_id(&g, m.recv_id);
  encode_proto(p.protocols, p.nrails, p.eager_max, p.addr_len, p.rail_addr, p.cookie, &g.proto);
  g.proto.flags = p.flags;  // what the listener grants: encode_proto leaves it 0
  g.proto.checksum = wire_checksum(&g.proto, offsetof(ProtoInfo, checksum));
  std::string why;
  NF_FUZZ_CHECK(decode_ack(g, sizeof(g), &why));
  NF_FUZZ_CHECK(memcmp(&g, &m, sizeof(AckMsg) - sizeof(ProtoInfo)) == 0);
  NF_FUZZ_CHECK(memcmp(&g.proto, &p, offsetof(ProtoInfo, rail_addr)) == 0);
  for (int r = 1; r < p.nrails; ++r)
    NF_FUZZ_CHECK(memcmp(g.proto.rail_addr[r - 1], p.rail_addr[r - 1], p.addr_len) == 0);
}

void round_trip(nf_fuzz::Reader& r) {
  const uint64_t token = r.u64();
  const uint64_t nonce = r.u64();
  const uint8_t protocols = r.flag() ? kProtoRdma : kProtoSendRecv;
  const uint8_t nrails = static_cast<uint8_t>(r.range(1, kMaxRails));
  const uint32_t eager_max = static_cast<uint32_t>(r.range(0, kMaxEagerMax));
  const size_t addr_len = r.range(1, kMaxAddrLen);
  uint8_t rails[kMaxRails - 1][kMaxAddrLen];
  r.fill(rails, sizeof(rails));
  const uint32_t recv_id = static_cast<uint32_t>(r.range(1, kMaxCommId));
  AckMsg m;
  encode(token, nonce, AckStatus::kOk, &m);
  set_ack_recv_id(&m, recv_id);
  const uint32_t cookie = static_cast<uint32_t>(r.range(1, 0xffffffffu));
  encode_proto(protocols, nrails, eager_max, addr_len, rails, cookie, &m.proto);
  NF_FUZZ_CHECK(ack_size(AckStatus::kOk) == sizeof(m));
  std::string why;
  NF_FUZZ_CHECK(decode_ack(m, sizeof(m), &why));
  NF_FUZZ_CHECK(m.token == token && m.nonce == nonce && m.recv_id == recv_id);
  NF_FUZZ_CHECK(m.proto.protocols == protocols && m.proto.nrails == nrails);
  NF_FUZZ_CHECK(m.proto.eager_max == eager_max && m.proto.addr_len == addr_len);
  NF_FUZZ_CHECK(m.proto.cookie == cookie);
  for (int i = 1; i < nrails; ++i)
    NF_FUZZ_CHECK(memcmp(m.proto.rail_addr[i - 1], rails[i - 1], addr_len) == 0);
  // Any other length, or any one byte changed, is refused.
  const size_t len = r.range(0, sizeof(m) + 64);
  if (len != sizeof(m)) NF_FUZZ_CHECK(!decode_ack(m, len, &why));
  AckMsg bad = m;
  reinterpret_cast<uint8_t*>(&bad)[r.range(0, sizeof(bad) - 1)] ^=
      static_cast<uint8_t>(r.range(1, 255));
  NF_FUZZ_CHECK(!decode_ack(bad, sizeof(bad), &why));
  NF_FUZZ_CHECK(!why.empty());
  // A refusal (the first 32 bytes alone) is refused, saying why, whatever its status.
  const uint16_t status = static_cast<uint16_t>(r.range(1, 0xffff));
  encode(token, nonce, static_cast<AckStatus>(status), &m);
  NF_FUZZ_CHECK(ack_size(static_cast<AckStatus>(status)) == kAckRefusalSize);
  NF_FUZZ_CHECK(!decode_ack(m, kAckRefusalSize, &why));
  NF_FUZZ_CHECK(why.find(ack_status_text(static_cast<AckStatus>(status))) != std::string::npos);
}

void decode(const AckMsg& m, size_t size) {
  std::string why;
  if (decode_ack(m, size, &why)) {
    check_accepted(m, size);
  } else {
    NF_FUZZ_CHECK(!why.empty());
    // A refusal says which (its first 8 bytes keep their layout in every version).
    if (size >= 8 && m.magic == kAckMagic && m.status != static_cast<uint16_t>(AckStatus::kOk))
      NF_FUZZ_CHECK(why.find(ack_status_text(static_cast<AckStatus>(m.status))) !=
                    std::string::npos);
  }
}

}  // namespace

NF_FUZZ_TARGET(ack) {
  AckMsg m;
  memset(&m, 0, sizeof(m));
  memcpy(&m, data, size < sizeof(m) ? size : sizeof(m));
  decode(m, size);
  // A hostile peer computes checksums too: the same bytes with good ones reach every other check.
  m.checksum = wire_checksum(&m, offsetof(AckMsg, checksum));
  m.proto.checksum = wire_checksum(&m.proto, offsetof(ProtoInfo, checksum));
  decode(m, size);
  nf_fuzz::Reader r(data, size);
  round_trip(r);
  return 0;
}

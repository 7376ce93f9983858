// decode_handle: NCCL's 128-byte handle, as it comes from the peer through NCCL's bootstrap.
#include <string>

#include "fuzz.h"
#include "wire/wire.h"

using namespace nf;

namespace {

// What an accepted handle promises, and that its fields encode back to the same handle.
void check_accepted(const WireHandle& h) {
  NF_FUZZ_CHECK(h.magic == kHandleMagic);
  NF_FUZZ_CHECK(h.version == kWireVersion);
  NF_FUZZ_CHECK(h.checksum == wire_checksum(&h, offsetof(WireHandle, checksum)));
  NF_FUZZ_CHECK(h.addr_len >= 1 && h.addr_len <= kMaxAddrLen);
  NF_FUZZ_CHECK(h.listen_id >= 1 && h.listen_id <= kMaxCommId);
  uint8_t again[kHandleSize];
  encode_handle(h.token, h.provider_hash, h.listen_id, h.addr, h.addr_len, again);
  WireHandle g;
  std::string why;
  NF_FUZZ_CHECK(decode_handle(again, &g, &why));
  // Every field up to the address's end (the reserved word and the address's unused tail are
  // covered by the checksum, not checked apart).
  NF_FUZZ_CHECK(memcmp(&g, &h, offsetof(WireHandle, addr) + h.addr_len) == 0);
}

// Fields from the input, encoded, decoded: the same fields; then any one byte changed is refused.
void round_trip(nf_fuzz::Reader& r) {
  const uint64_t token = r.u64();
  const uint32_t hash = r.u32();
  const uint32_t listen_id = static_cast<uint32_t>(r.range(1, kMaxCommId));
  const size_t addr_len = r.range(1, kMaxAddrLen);
  uint8_t addr[kMaxAddrLen];
  r.fill(addr, addr_len);
  uint8_t b[kHandleSize];
  encode_handle(token, hash, listen_id, addr, addr_len, b);
  WireHandle h;
  std::string why;
  NF_FUZZ_CHECK(decode_handle(b, &h, &why));
  NF_FUZZ_CHECK(h.token == token && h.provider_hash == hash && h.listen_id == listen_id);
  NF_FUZZ_CHECK(h.addr_len == addr_len && memcmp(h.addr, addr, addr_len) == 0);
  NF_FUZZ_CHECK(h.reserved == 0);
  for (size_t i = addr_len; i < kMaxAddrLen; ++i) NF_FUZZ_CHECK(h.addr[i] == 0);
  // FNV-1a tells every one-byte change apart, and the checksum covers every byte before it.
  b[r.range(0, kHandleSize - 1)] ^= static_cast<uint8_t>(r.range(1, 255));
  NF_FUZZ_CHECK(!decode_handle(b, &h, &why));
  NF_FUZZ_CHECK(!why.empty());
}

void decode(const uint8_t* b) {
  WireHandle h;
  std::string why;
  if (decode_handle(b, &h, &why)) {
    check_accepted(h);
  } else {
    NF_FUZZ_CHECK(!why.empty());
  }
}

}  // namespace

NF_FUZZ_TARGET(handle) {
  // The handle is always 128 bytes: a shorter input is zero-padded, a longer one cut.
  WireHandle h;
  memset(&h, 0, sizeof(h));
  memcpy(&h, data, size < sizeof(h) ? size : sizeof(h));
  decode(reinterpret_cast<const uint8_t*>(&h));
  // A hostile peer computes checksums too: the same bytes with a good one reach every other check.
  h.checksum = wire_checksum(&h, offsetof(WireHandle, checksum));
  decode(reinterpret_cast<const uint8_t*>(&h));
  nf_fuzz::Reader r(data, size);
  round_trip(r);
  return 0;
}

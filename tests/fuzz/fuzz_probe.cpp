// decode_probe: a liveness probe (ping or pong) as the endpoint receives it: the control
// message's payload, passed as it is.
#include <string>

#include "fuzz.h"
#include "wire/wire.h"

using namespace nf;

namespace {

// Builds a probe as src/core/liveness.cpp does; returns the length it is sent with.
size_t encode(uint8_t kind, uint32_t token, uint64_t seq, const uint8_t* addr, size_t addr_len,
              ProbeMsg* m) {
  memset(m, 0, sizeof(*m));
  m->magic = kProbeMagic;
  m->version = kWireVersion;
  m->kind = kind;
  m->token = token;
  m->seq = seq;
  if (kind != kProbePing) return kProbeFixed;
  m->addr_len = static_cast<uint8_t>(addr_len);
  memcpy(m->addr, addr, addr_len);
  return kProbeFixed + addr_len;
}

void check_accepted(const ProbeMsg& m, const uint8_t* data, size_t len) {
  NF_FUZZ_CHECK(m.magic == kProbeMagic && m.version == kWireVersion);
  NF_FUZZ_CHECK(m.kind == kProbePing || m.kind == kProbePong);
  if (m.kind == kProbePing) {
    NF_FUZZ_CHECK(m.addr_len >= 1 && m.addr_len <= kMaxAddrLen);
    NF_FUZZ_CHECK(len == kProbeFixed + m.addr_len);
  } else {
    // wire.h: "a pong is this long", addr_len 0.
    NF_FUZZ_CHECK(len == kProbeFixed && m.addr_len == 0);
  }
  for (size_t i = len; i < sizeof(m); ++i)
    NF_FUZZ_CHECK(reinterpret_cast<const uint8_t*>(&m)[i] == 0);
  ProbeMsg g;
  NF_FUZZ_CHECK(encode(m.kind, m.token, m.seq, m.addr, m.addr_len, &g) == len);
  // Every byte but the reserved word (not checked) is a field.
  NF_FUZZ_CHECK(memcmp(&g, data, offsetof(ProbeMsg, reserved)) == 0);
  NF_FUZZ_CHECK(memcmp(&g.seq, data + offsetof(ProbeMsg, seq), len - offsetof(ProbeMsg, seq)) == 0);
}

void round_trip(nf_fuzz::Reader& r) {
  const uint8_t kind = r.flag() ? kProbePing : kProbePong;
  const uint32_t token = r.u32();
  const uint64_t seq = r.u64();
  const size_t addr_len = r.range(1, kMaxAddrLen);
  uint8_t addr[kMaxAddrLen];
  r.fill(addr, addr_len);
  ProbeMsg m;
  const size_t len = encode(kind, token, seq, addr, addr_len, &m);
  ProbeMsg d;
  std::string why;
  NF_FUZZ_CHECK(decode_probe(&m, len, &d, &why));
  NF_FUZZ_CHECK(d.kind == kind && d.token == token && d.seq == seq);
  if (kind == kProbePing) {
    NF_FUZZ_CHECK(d.addr_len == addr_len && memcmp(d.addr, addr, addr_len) == 0);
  } else {
    NF_FUZZ_CHECK(d.addr_len == 0);
  }
  const size_t other = r.range(0, sizeof(m));
  if (other != len) NF_FUZZ_CHECK(!decode_probe(&m, other, &d, &why));
}

}  // namespace

NF_FUZZ_TARGET(probe) {
  ProbeMsg m;
  std::string why;
  if (decode_probe(data, size, &m, &why)) {
    check_accepted(m, data, size);
  } else {
    NF_FUZZ_CHECK(!why.empty());
  }
  nf_fuzz::Reader r(data, size);
  round_trip(r);
  return 0;
}

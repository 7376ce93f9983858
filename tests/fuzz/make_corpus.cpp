// Writes the seed corpus of tests/fuzz/ (README.md there): real messages, made by our encoders, one
// file each, into DIR/<target>/. tests/fuzz/run.sh --corpus rebuilds tests/fuzz/corpus/ with it.
//
//   make_corpus DIR
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "wire/wire.h"

using namespace nf;

namespace {

namespace fs = std::filesystem;

struct Addr {
  const char* name;
  std::vector<uint8_t> b;
};

// Addresses as the providers give them.
std::vector<Addr> addresses() {
  // EFA: the device GID (16 bytes), QP number, QKey, and padding: 32 bytes.
  std::vector<uint8_t> efa = {0xfe, 0x80, 0,    0,    0,    0,    0, 0, 0x04, 0x5e, 0x1b, 0xff,
                              0xfe, 0x2a, 0x31, 0x07, 0x2c, 0x01, 0, 0, 0xd5, 0x6f, 0x11, 0x24};
  efa.resize(32, 0);
  // tcp;ofi_rxm: a sockaddr_in (16 bytes), 10.0.1.17:42011.
  const std::vector<uint8_t> tcp = {2, 0, 0xa4, 0x1b, 10, 0, 1, 17, 0, 0, 0, 0, 0, 0, 0, 0};
  // A sockaddr_in6 (28 bytes), [fd00::11]:42011.
  std::vector<uint8_t> tcp6 = {10, 0, 0xa4, 0x1b, 0, 0, 0, 0, 0xfd, 0};
  tcp6.resize(22, 0);
  tcp6.insert(tcp6.end(), {0, 0x11, 0, 0, 0, 0});
  // shm: a name.
  const char* shm = "fi_shm://4242:7";
  std::vector<uint8_t> max(kMaxAddrLen);
  for (size_t i = 0; i < max.size(); ++i) max[i] = static_cast<uint8_t>(0x40 + i);
  return {{"efa32", efa},
          {"tcp16", tcp},
          {"tcp6-28", tcp6},
          {"shm", std::vector<uint8_t>(shm, shm + strlen(shm) + 1)},
          {"max96", max}};
}

int failures = 0;

void save(const fs::path& dir, const std::string& target, const std::string& name, const void* data,
          size_t len) {
  std::error_code ec;
  fs::create_directories(dir / target, ec);
  const fs::path p = dir / target / name;
  FILE* f = fopen(p.c_str(), "wb");
  if (f == nullptr || fwrite(data, 1, len, f) != len || fclose(f) != 0) {
    fprintf(stderr, "make_corpus: cannot write %s\n", p.c_str());
    ++failures;
  }
}

// Rail addresses 1..3: the main address with its last byte changed, as EFA's rails differ.
void rail_addrs(const Addr& a, uint8_t (*out)[kMaxAddrLen]) {
  memset(out, 0, (kMaxRails - 1) * kMaxAddrLen);
  for (int r = 1; r < kMaxRails; ++r) {
    memcpy(out[r - 1], a.b.data(), a.b.size());
    out[r - 1][a.b.size() - 1] = static_cast<uint8_t>(out[r - 1][a.b.size() - 1] + r);
  }
}

void handles(const fs::path& dir, const std::vector<Addr>& addrs) {
  uint32_t id = 1;
  for (const Addr& a : addrs) {
    uint8_t b[kHandleSize];
    encode_handle(0x5eed0000c0ffee00ull + id, provider_hash(a.name[0] == 'e' ? "efa" : "tcp"), id,
                  a.b.data(), a.b.size(), b);
    save(dir, "handle", a.name, b, sizeof(b));
    id *= 37;
  }
  uint8_t b[kHandleSize];
  encode_handle(~0ull, provider_hash("efa"), kMaxCommId, addrs[0].b.data(), addrs[0].b.size(), b);
  save(dir, "handle", "max-listen-id", b, sizeof(b));
}

ConnectMsg connect_msg(const Addr& a, uint8_t protocols, int nrails, uint32_t sender_id) {
  uint8_t hb[kHandleSize];
  encode_handle(0x0123456789abcdefull, provider_hash("efa"), 3, a.b.data(), a.b.size(), hb);
  WireHandle h;
  std::string why;
  decode_handle(hb, &h, &why);
  ConnectMsg m;
  encode_connect(h, sender_id, 0xfeedface00000000ull + sender_id, a.b.data(), a.b.size(), &m);
  uint8_t rails[kMaxRails - 1][kMaxAddrLen];
  rail_addrs(a, rails);
  encode_proto(protocols, static_cast<uint8_t>(nrails), 0, a.b.size(), rails,
               0x600dc0deu + sender_id, &m.proto);
  return m;
}

AckMsg ack_msg(const ConnectMsg& c, uint8_t protocol, int nrails, uint32_t eager_max,
               const Addr& a) {
  AckMsg m;
  encode_ack(c, AckStatus::kOk, &m);
  set_ack_recv_id(&m, c.sender_id + 1);
  uint8_t rails[kMaxRails - 1][kMaxAddrLen];
  rail_addrs(a, rails);
  encode_proto(protocol, static_cast<uint8_t>(nrails), eager_max, a.b.size(), rails,
               0xc00c1e00u + c.sender_id, &m.proto);
  return m;
}

void connects_acks_protos(const fs::path& dir, const std::vector<Addr>& addrs) {
  const Addr& efa = addrs[0];
  const Addr& tcp = addrs[1];
  const Addr& tcp6 = addrs[2];
  for (int nrails = 1; nrails <= kMaxRails; ++nrails) {
    const std::string rails = std::to_string(nrails) + "rail";
    const ConnectMsg c = connect_msg(efa, kProtoSendRecv | kProtoRdma, nrails, 10u + nrails);
    save(dir, "connect", "efa32-" + rails, &c, sizeof(c));
    const AckMsg a = ack_msg(c, kProtoRdma, nrails, 8192, efa);
    save(dir, "ack", "rdma-efa32-" + rails, &a, sizeof(a));
  }
  const ConnectMsg ct = connect_msg(tcp, kProtoSendRecv, 1, kMaxCommId);
  save(dir, "connect", "tcp16-sendrecv", &ct, sizeof(ct));
  const ConnectMsg c6 = connect_msg(tcp6, kProtoRdma, 2, 77);
  save(dir, "connect", "tcp6-28-rdma-2rail", &c6, sizeof(c6));
  const AckMsg at = ack_msg(ct, kProtoSendRecv, 1, 0, tcp);
  save(dir, "ack", "sendrecv-tcp16", &at, sizeof(at));
  const AckMsg a6 = ack_msg(c6, kProtoRdma, 2, kMaxEagerMax, tcp6);
  save(dir, "ack", "rdma-tcp6-28-eager-max", &a6, sizeof(a6));
  const AckStatus refusals[] = {AckStatus::kBadToken, AckStatus::kBadVersion,
                                AckStatus::kProviderMismatch, AckStatus::kMalformed,
                                AckStatus::kNoCommonProtocol};
  for (AckStatus s : refusals) {
    AckMsg r;
    encode_ack(ct, s, &r);
    save(dir, "ack", "refusal-" + std::to_string(static_cast<int>(s)), &r, ack_size(s));
  }

  // The protocol block: the main address's length (2 bytes), then the block.
  auto proto = [&](const char* name, const ProtoInfo& p, size_t main_len) {
    uint8_t b[2 + sizeof(ProtoInfo)];
    b[0] = static_cast<uint8_t>(main_len);
    b[1] = static_cast<uint8_t>(main_len >> 8);
    memcpy(b + 2, &p, sizeof(p));
    save(dir, "proto", name, b, sizeof(b));
  };
  const ConnectMsg c4 = connect_msg(efa, kProtoSendRecv | kProtoRdma, 4, 9);
  proto("offer-efa32-4rail", c4.proto, efa.b.size());
  proto("choice-rdma-efa32-2rail", ack_msg(c4, kProtoRdma, 2, 4096, efa).proto, efa.b.size());
  proto("offer-tcp16-sendrecv", ct.proto, tcp.b.size());
  proto("choice-rdma-tcp6-28", a6.proto, tcp6.b.size());
}

void cts(const fs::path& dir) {
  auto one = [&](int n, int nrails) {
    CtsMsg m;
    memset(&m, 0, sizeof(m));
    m.h.magic = kCtsMagic;
    m.h.version = kWireVersion;
    m.h.n = static_cast<uint8_t>(n);
    m.h.nrails = static_cast<uint8_t>(nrails);
    m.h.gen = static_cast<uint32_t>(n * 61 + nrails) & kMaxGen;
    m.h.slot = static_cast<uint16_t>(100 * n + nrails);
    for (int i = 0; i < n; ++i) {
      m.e[i].tag = i == 0 ? -1 : i;
      m.e[i].index = static_cast<uint32_t>(7 * i);
      m.e[i].size = (1ull << (10 + 2 * i)) + static_cast<uint64_t>(i);
      m.e[i].addr = 0x7f3a00000000ull + (0x10000000ull * static_cast<uint64_t>(i));
      for (int k = 0; k < nrails; ++k)
        m.e[i].key[k] = 0x1000000000000000ull * static_cast<uint64_t>(k + 1) + 0x100u * i + 1;
    }
    CtsWire w;
    const size_t len = encode_cts(m, w.b);
    save(dir, "cts", "n" + std::to_string(n) + "-rails" + std::to_string(nrails), w.b, len);
  };
  for (int n = 1; n <= kMaxCtsEntries; ++n) one(n, (n - 1) % kMaxRails + 1);
  one(1, 4);
  one(8, 1);
  one(8, 4);
  one(2, 1);
}

ProbeMsg probe(uint8_t kind, const Addr* a, size_t* len) {
  ProbeMsg m;
  memset(&m, 0, sizeof(m));
  m.magic = kProbeMagic;
  m.version = kWireVersion;
  m.kind = kind;
  m.token = 3;
  m.seq = 1234;
  *len = kProbeFixed;
  if (a != nullptr) {
    m.addr_len = static_cast<uint8_t>(a->b.size());
    memcpy(m.addr, a->b.data(), a->b.size());
    *len += a->b.size();
  }
  return m;
}

void probes(const fs::path& dir, const std::vector<Addr>& addrs) {
  for (size_t i = 0; i < addrs.size(); ++i) {
    if (i == 3) continue;  // shm has no probes (one host)
    size_t len;
    const ProbeMsg m = probe(kProbePing, &addrs[i], &len);
    save(dir, "probe", std::string("ping-") + addrs[i].name, &m, len);
  }
  size_t len;
  const ProbeMsg m = probe(kProbePong, nullptr, &len);
  save(dir, "probe", "pong", &m, len);
}

NoticeMsg notice(uint32_t kind, uint64_t size) {
  NoticeMsg m;
  m.magic = kNoticeMagic;
  m.kind = kind;
  m.size = size;
  return m;
}

void notices(const fs::path& dir) {
  NoticeMsg m = notice(kNoticeRts, 1u << 20);
  save(dir, "notice", "rts", &m, sizeof(m));
  m = notice(kNoticeTooLarge, (1ull << 30) + 1);
  save(dir, "notice", "too-large", &m, sizeof(m));
  m = notice(kNoticeRts, 0);
  save(dir, "notice", "rts-empty", &m, sizeof(m));
}

// Whole control messages: the header, then its payload.
void ctrl(const fs::path& dir, const std::vector<Addr>& addrs) {
  auto msg = [&](const char* name, const CtrlHdr& h, const void* payload, size_t len) {
    std::vector<uint8_t> b(kCtrlHdrSize + len);
    memcpy(b.data(), &h, kCtrlHdrSize);
    if (len > 0) memcpy(b.data() + kCtrlHdrSize, payload, len);
    save(dir, "ctrl_hdr", name, b.data(), b.size());
  };
  const ConnectMsg c = connect_msg(addrs[0], kProtoSendRecv | kProtoRdma, 2, 12);
  msg("connect", ctrl_hdr(kCtrlConnect, 3, 12), &c, sizeof(c));
  const AckMsg a = ack_msg(c, kProtoRdma, 2, 8192, addrs[0]);
  msg("ack", ctrl_hdr(kCtrlAck, 12, 3), &a, sizeof(a));
  AckMsg r;
  encode_ack(c, AckStatus::kBadToken, &r);
  msg("ack-refusal", ctrl_hdr(kCtrlAck, 12, 0), &r, kAckRefusalSize);
  CtsMsg m;
  memset(&m, 0, sizeof(m));
  m.h = {kCtsMagic, kWireVersion, 1, 1, 5, 17, 0};
  m.e[0] = {4, 0, 65536, 0x7f3a00001000ull, {0x42, 0, 0, 0}};
  CtsWire w;
  msg("cts", ctrl_hdr(kCtrlCts, 12, 0x600dc0deu + 12), w.b, encode_cts(m, w.b));
  size_t len;
  const ProbeMsg ping = probe(kProbePing, &addrs[0], &len);
  msg("probe-ping", ctrl_hdr(kCtrlProbe, 0, 0), &ping, len);
  const ProbeMsg pong = probe(kProbePong, nullptr, &len);
  msg("probe-pong", ctrl_hdr(kCtrlProbe, 0, 0), &pong, len);
  uint8_t payload[64];
  for (size_t i = 0; i < sizeof(payload); ++i) payload[i] = static_cast<uint8_t>(i);
  msg("eager", ctrl_hdr(kCtrlEager, 3, 0xc00c1e0cu, 7, 41), payload, sizeof(payload));
  msg("eager-empty", ctrl_hdr(kCtrlEager, kMaxCommId, 0xffffffffu, -1, 0xffffffffu), nullptr, 0);
  const NoticeMsg n = notice(kNoticeRts, 1u << 20);
  msg("notice", ctrl_hdr(kCtrlNotice, 3, 0xc00c1e0cu, 7, 42), &n, sizeof(n));
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: %s DIR (writes DIR/<target>/<seed>)\n", argv[0]);
    return 2;
  }
  const fs::path dir = argv[1];
  const std::vector<Addr> addrs = addresses();
  handles(dir, addrs);
  connects_acks_protos(dir, addrs);
  cts(dir);
  probes(dir, addrs);
  notices(dir);
  ctrl(dir, addrs);
  return failures == 0 ? 0 : 1;
}

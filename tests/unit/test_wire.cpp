#include <catch2/catch.hpp>

#include <cstring>

#include "wire/wire.h"

using namespace nf;

namespace {
const uint8_t kAddr[16] = {2, 0, 0x1f, 0x90, 127, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0};
}

TEST_CASE("a handle round-trips and every corruption is caught", "[wire]") {
  unsigned char buf[kHandleSize];
  encode_handle(0x1122334455667788ull, 0xabcdef01u, 0x0abcdef, kAddr, sizeof(kAddr), buf);
  WireHandle h;
  std::string why;
  REQUIRE(decode_handle(buf, &h, &why));
  CHECK(h.token == 0x1122334455667788ull);
  CHECK(h.provider_hash == 0xabcdef01u);
  CHECK(h.listen_id == 0x0abcdefu);
  CHECK(h.addr_len == sizeof(kAddr));
  CHECK(memcmp(h.addr, kAddr, sizeof(kAddr)) == 0);

  // Any single flipped bit anywhere in the handle is refused.
  for (size_t byte = 0; byte < kHandleSize; ++byte) {
    for (int bit = 0; bit < 8; bit += 3) {
      unsigned char bad[kHandleSize];
      memcpy(bad, buf, sizeof(bad));
      bad[byte] ^= static_cast<unsigned char>(1u << bit);
      INFO("byte " << byte << " bit " << bit);
      CHECK_FALSE(decode_handle(bad, &h, &why));
    }
  }
  unsigned char zero[kHandleSize] = {};
  CHECK_FALSE(decode_handle(zero, &h, &why));
  CHECK(why.find("not an nccl-fabric handle") != std::string::npos);
}

TEST_CASE("another wire version is named in the refusal", "[wire]") {
  unsigned char buf[kHandleSize];
  encode_handle(1, 2, 3, kAddr, sizeof(kAddr), buf);
  WireHandle h;
  memcpy(&h, buf, sizeof(h));
  h.version = kWireVersion + 1;
  h.checksum = wire_checksum(&h, offsetof(WireHandle, checksum));
  memcpy(buf, &h, sizeof(h));
  std::string why;
  CHECK_FALSE(decode_handle(buf, &h, &why));
  CHECK(why.find("version " + std::to_string(kWireVersion + 1)) != std::string::npos);
}

TEST_CASE("connect and ack messages are checked before use", "[wire]") {
  unsigned char hb[kHandleSize];
  encode_handle(42, 9, 5, kAddr, sizeof(kAddr), hb);
  WireHandle h;
  std::string why;
  REQUIRE(decode_handle(hb, &h, &why));
  ConnectMsg m;
  encode_connect(h, 6, 77, kAddr, sizeof(kAddr), &m);
  bool bad_version = true;
  // Version 2: without its protocol block the message is refused.
  CHECK_FALSE(decode_connect(m, sizeof(m), &why, &bad_version));
  const uint8_t rails[kMaxRails - 1][kMaxAddrLen] = {};
  encode_proto(kProtoSendRecv | kProtoRdma, 1, 0, sizeof(kAddr), rails, 0xc0ffee01u, &m.proto);
  CHECK(decode_connect(m, sizeof(m), &why, &bad_version));
  CHECK_FALSE(bad_version);
  CHECK(m.token == 42);
  CHECK(m.sender_id == 6);
  CHECK_FALSE(decode_connect(m, sizeof(m) - 1, &why, &bad_version));  // truncated
  CHECK_FALSE(decode_connect(m, sizeof(m) + 8, &why, &bad_version));  // longer than ours
  ConnectMsg v = m;
  v.version = 1;
  CHECK_FALSE(decode_connect(v, sizeof(v), &why, &bad_version));
  CHECK(bad_version);
  ConnectMsg a = m;
  a.addr_len = 200;
  a.checksum = wire_checksum(&a, offsetof(ConnectMsg, checksum));
  CHECK_FALSE(decode_connect(a, sizeof(a), &why, &bad_version));
  for (uint32_t id : {0u, kMaxCommId + 1}) {  // comm ids fit tag bits 32..59
    ConnectMsg s = m;
    s.sender_id = id;
    s.checksum = wire_checksum(&s, offsetof(ConnectMsg, checksum));
    CHECK_FALSE(decode_connect(s, sizeof(s), &why, &bad_version));
    CHECK(why.find("sender id") != std::string::npos);
  }

  ConnectMsg pr = m;  // a protocol block with an impossible rail count
  encode_proto(kProtoRdma, kMaxRails + 1, 0, sizeof(kAddr), rails, 0xc0ffee01u, &pr.proto);
  CHECK_FALSE(decode_connect(pr, sizeof(pr), &why, &bad_version));
  CHECK(why.find("rail count") != std::string::npos);
  pr.proto.protocols = 0x80;  // corrupted after the checksum
  CHECK_FALSE(decode_connect(pr, sizeof(pr), &why, &bad_version));

  AckMsg ack;
  encode_ack(m, AckStatus::kOk, &ack);
  encode_proto(kProtoRdma, 1, 8192, sizeof(kAddr), rails, 0xc0ffee01u, &ack.proto);
  CHECK_FALSE(decode_ack(ack, sizeof(ack), &why));  // an acceptance names its recv comm (v6)
  CHECK(why.find("no receiving comm") != std::string::npos);
  set_ack_recv_id(&ack, kMaxCommId + 1);
  CHECK_FALSE(decode_ack(ack, sizeof(ack), &why));
  set_ack_recv_id(&ack, 12);
  CHECK(decode_ack(ack, sizeof(ack), &why));
  CHECK(ack.recv_id == 12);
  CHECK_FALSE(decode_ack(ack, kAckRefusalSize, &why));  // an acceptance needs its block
  encode_proto(kProtoRdma | kProtoSendRecv, 1, 8192, sizeof(kAddr), rails, 0xc0ffee01u, &ack.proto);
  CHECK_FALSE(decode_ack(ack, sizeof(ack), &why));  // the listener must choose one
  CHECK(ack_size(AckStatus::kBadToken) == kAckRefusalSize);
  CHECK(ack.nonce == 77);
  encode_ack(m, AckStatus::kBadToken, &ack);
  CHECK_FALSE(decode_ack(ack, sizeof(ack), &why));
  CHECK(why.find("wrong token") != std::string::npos);
  encode_ack(m, AckStatus::kOk, &ack);
  ack.token ^= 1;
  CHECK_FALSE(decode_ack(ack, sizeof(ack), &why));
}

TEST_CASE("a handle's listen id must fit the tag bits", "[wire]") {
  for (uint32_t id : {0u, kMaxCommId + 1, 0xffffffffu}) {
    unsigned char buf[kHandleSize];
    encode_handle(1, 2, id, kAddr, sizeof(kAddr), buf);
    WireHandle h;
    std::string why;
    CHECK_FALSE(decode_handle(buf, &h, &why));
    CHECK(why.find("listen id") != std::string::npos);
  }
  unsigned char buf[kHandleSize];
  encode_handle(1, 2, kMaxCommId, kAddr, sizeof(kAddr), buf);
  WireHandle h;
  std::string why;
  CHECK(decode_handle(buf, &h, &why));
}

TEST_CASE("data tags of different comms never collide", "[wire]") {
  CHECK(data_tag(1, 7) != data_tag(2, 7));
  CHECK(data_tag(1, -1) == ((1ull << 32) | 0xffffffffull));
  CHECK(data_tag(0xfedcba98u, 5) == 0xfedcba9800000005ull);  // the whole cookie, version 7
}

TEST_CASE("a protocol block without a cookie is refused", "[wire]") {
  uint8_t rails[kMaxRails - 1][kMaxAddrLen] = {};
  ProtoInfo p;
  std::string why;
  encode_proto(kProtoRdma, 1, 0, 16, rails, 0x12345678u, &p);
  REQUIRE(decode_proto(p, 16, &why));
  CHECK(p.cookie == 0x12345678u);
  encode_proto(kProtoRdma, 1, 0, 16, rails, 0, &p);
  CHECK_FALSE(decode_proto(p, 16, &why));
  CHECK(why.find("cookie") != std::string::npos);
}

TEST_CASE("control header: the connection's kinds carry the cookie, not the version", "[wire]") {
  for (uint8_t kind : {kCtrlCts, kCtrlEager, kCtrlNotice}) {
    const bool indexed = kind != kCtrlCts;
    const CtrlHdr h = ctrl_hdr(kind, 77, 0xfedcba98u, indexed ? 3 : 0, indexed ? 9 : 0);
    uint32_t w[4];
    memcpy(w, &h, sizeof(w));
    CHECK(w[0] == (77u | (static_cast<uint32_t>(kind) << 28)));
    CHECK(w[1] == 0xfedcba98u);  // all 32 bits, whatever the top 4 say
    CtrlHdr out;
    std::string why;
    REQUIRE(decode_ctrl_hdr(&h, sizeof(h), &out, &why));
    CHECK(ctrl_cookie(out) == 0xfedcba98u);
  }
  // The handshake's kinds and probes keep the version, checked.
  for (uint8_t kind : {kCtrlConnect, kCtrlAck, kCtrlProbe}) {
    CtrlHdr h = ctrl_hdr(kind, kind == kCtrlProbe ? 0 : 5, kind == kCtrlProbe ? 0 : 6);
    CHECK((h.src >> 28) == kCtrlVersion);
    CtrlHdr out;
    std::string why;
    CHECK(decode_ctrl_hdr(&h, sizeof(h), &out, &why));
    h.src = (h.src & kMaxCommId) | (6u << 28);  // a version-6 peer
    CHECK_FALSE(decode_ctrl_hdr(&h, sizeof(h), &out, &why));
    CHECK(why.find("version 6") != std::string::npos);
  }
}

TEST_CASE("control header: layout, and every malformed one refused", "[wire]") {
  const CtrlHdr h = ctrl_hdr(kCtrlConnect, 12345, kMaxCommId);
  uint8_t b[kCtrlHdrSize];
  memcpy(b, &h, sizeof(h));
  uint32_t w[4];
  memcpy(w, b, sizeof(w));
  CHECK(w[0] == (12345u | (1u << 28)));
  CHECK(w[1] == (kMaxCommId | (kCtrlVersion << 28)));
  CHECK(w[2] == 0);
  CHECK(w[3] == 0);
  CtrlHdr out;
  std::string why;
  REQUIRE(decode_ctrl_hdr(b, sizeof(b), &out, &why));
  CHECK(ctrl_kind(out) == kCtrlConnect);
  CHECK(ctrl_dst(out) == 12345u);
  CHECK(ctrl_src(out) == kMaxCommId);
  const CtrlHdr e = ctrl_hdr(kCtrlEager, 12345, 0xabcdef01u, -7, 0xfffffffeu);
  REQUIRE(decode_ctrl_hdr(&e, sizeof(e), &out, &why));
  CHECK(out.tag == -7);
  CHECK(out.index == 0xfffffffeu);
  // Shorter than a header.
  CHECK_FALSE(decode_ctrl_hdr(b, kCtrlHdrSize - 1, &out, &why));
  CHECK(why.find("shorter") != std::string::npos);
  // Another wire version (an older peer never sends one, but a later one might).
  uint32_t v = w[1];
  w[1] = (v & kMaxCommId) | ((kCtrlVersion + 1) << 28);
  memcpy(b, w, sizeof(w));
  CHECK_FALSE(decode_ctrl_hdr(b, sizeof(b), &out, &why));
  CHECK(why.find("version " + std::to_string(kCtrlVersion + 1)) != std::string::npos);
  w[1] = v;
  // Unknown kinds.
  for (uint32_t kind : {0u, 7u, 15u}) {
    uint32_t x[4] = {12345u | (kind << 28), w[1], 0, 0};
    memcpy(b, x, sizeof(x));
    CHECK_FALSE(decode_ctrl_hdr(b, sizeof(b), &out, &why));
  }
  // A probe names no comm; everything else names one.
  CtrlHdr p = ctrl_hdr(kCtrlProbe, 0, 0);
  CHECK(decode_ctrl_hdr(&p, sizeof(p), &out, &why));
  p = ctrl_hdr(kCtrlProbe, 3, 0);
  CHECK_FALSE(decode_ctrl_hdr(&p, sizeof(p), &out, &why));
  p = ctrl_hdr(kCtrlCts, 0, 4);
  CHECK_FALSE(decode_ctrl_hdr(&p, sizeof(p), &out, &why));
  // Tag and index belong to eager messages and notices only.
  p = ctrl_hdr(kCtrlCts, 3, 4, 1, 0);
  CHECK_FALSE(decode_ctrl_hdr(&p, sizeof(p), &out, &why));
  p = ctrl_hdr(kCtrlNotice, 3, 4, 1, 9);
  CHECK(decode_ctrl_hdr(&p, sizeof(p), &out, &why));
}

namespace {
CtsMsg sample_cts(int n, int nrails) {
  CtsMsg m;
  memset(&m, 0, sizeof(m));
  m.h.magic = kCtsMagic;
  m.h.version = kWireVersion;
  m.h.n = static_cast<uint8_t>(n);
  m.h.nrails = static_cast<uint8_t>(nrails);
  m.h.slot = static_cast<uint16_t>(1000 + n);
  m.h.gen = kMaxGen - static_cast<uint32_t>(nrails);
  for (int i = 0; i < n; ++i) {
    m.e[i].tag = -1 - i;
    m.e[i].index = 0xfffffff0u + static_cast<uint32_t>(i);  // wraps: any value is valid
    m.e[i].size = (1ull << 20) * (i + 1) + 3;
    m.e[i].addr = 0x7f0000001000ull + 0x100000ull * i;
    for (int k = 0; k < nrails; ++k) m.e[i].key[k] = 0x1111111111111111ull * (k + 1) + i;
  }
  return m;
}
}  // namespace

TEST_CASE("a clear-to-send carries keys only for the rails in use", "[wire][cts]") {
  CHECK(cts_size(1, 1) == 48);  // fits tcp;ofi_rxm's 64-byte inject
  CHECK(cts_size(1, 4) == 72);
  CHECK(cts_size(8, 4) == kCtsMaxSize);
  for (int nrails = 1; nrails <= kMaxRails; ++nrails) {
    for (int n = 1; n <= kMaxCtsEntries; ++n) {
      INFO("nrails " << nrails << " n " << n);
      const CtsMsg m = sample_cts(n, nrails);
      // Written at an odd offset: the decoder must not rely on alignment.
      CtsWire w;
      memset(&w, 0xee, sizeof(w));
      const size_t len = encode_cts(m, w.b + 1);
      REQUIRE(len == 16 + static_cast<size_t>(n) * (24 + 8 * static_cast<size_t>(nrails)));
      REQUIRE(len == cts_size(n, nrails));
      CHECK(w.b[1 + len] == 0xee);  // nothing written past the end
      // The layout, byte by byte where it matters: last entry's tag and last key.
      const uint8_t* last = w.b + 1 + 16 + (n - 1) * cts_entry_size(nrails);
      int32_t tag;
      uint64_t key;
      memcpy(&tag, last, 4);
      memcpy(&key, last + 24 + 8 * (nrails - 1), 8);
      CHECK(tag == m.e[n - 1].tag);
      CHECK(key == m.e[n - 1].key[nrails - 1]);

      CtsMsg d;
      memset(&d, 0xcc, sizeof(d));
      std::string why;
      REQUIRE(decode_cts(w.b + 1, len, &d, &why));
      CHECK(d.h.n == n);
      CHECK(d.h.nrails == nrails);
      CHECK(d.h.slot == m.h.slot);
      CHECK(d.h.gen == m.h.gen);
      for (int i = 0; i < n; ++i) {
        CHECK(d.e[i].tag == m.e[i].tag);
        CHECK(d.e[i].index == m.e[i].index);
        CHECK(d.e[i].size == m.e[i].size);
        CHECK(d.e[i].addr == m.e[i].addr);
        for (int k = 0; k < kMaxRails; ++k)
          CHECK(d.e[i].key[k] == (k < nrails ? m.e[i].key[k] : 0));
      }

      // Any other length is refused: truncated, padded, or the length of another rail count.
      for (size_t bad : {len - 1, len + 1, len + 8, len - 8, static_cast<size_t>(15)}) {
        CHECK_FALSE(decode_cts(w.b + 1, bad, &d, &why));
      }
      for (int other = 1; other <= kMaxRails; ++other) {
        if (other != nrails) CHECK_FALSE(decode_cts(w.b + 1, cts_size(n, other), &d, &why));
      }
      CHECK_FALSE(decode_cts(w.b + 1, cts_size(n, nrails) + 8, &d, &why));
      CHECK(why.find("expected " + std::to_string(len)) != std::string::npos);
    }
  }
}

TEST_CASE("a malformed clear-to-send is refused", "[wire][cts]") {
  const CtsMsg good = sample_cts(2, 2);
  std::string why;
  CtsMsg d;
  auto refused = [&](CtsMsg m, const char* expect) {
    CtsWire w;
    size_t len = encode_cts(m, w.b);
    INFO(expect);
    bool okay = decode_cts(w.b, len, &d, &why);
    CHECK_FALSE(okay);
    CHECK(why.find(expect) != std::string::npos);
  };
  {
    CtsWire w;
    REQUIRE(decode_cts(w.b, encode_cts(good, w.b), &d, &why));
  }
  CtsMsg m = good;
  m.h.magic ^= 1;
  refused(m, "not a clear-to-send");
  m = good;
  m.h.version = kWireVersion + 1;
  refused(m, "not a clear-to-send");
  m = good;
  m.h.gen = kMaxGen + 1;
  refused(m, "generation");
  m = good;
  m.h.reserved = 1;
  refused(m, "reserved");
  m = good;
  m.e[0].addr = ~0ull - 10;  // addr + size wraps
  refused(m, "buffer 0");

  // Counts out of range, patched into a good encoding (encode_cts takes only valid counts).
  CtsWire w;
  const size_t len = encode_cts(good, w.b);
  for (uint8_t n : {0, kMaxCtsEntries + 1, 255}) {
    CtsWire x = w;
    x.b[offsetof(CtsHeader, n)] = n;
    CHECK_FALSE(decode_cts(x.b, len, &d, &why));
    CHECK(why.find("buffers") != std::string::npos);
  }
  for (uint8_t r : {0, kMaxRails + 1}) {
    CtsWire x = w;
    x.b[offsetof(CtsHeader, nrails)] = r;
    CHECK_FALSE(decode_cts(x.b, len, &d, &why));
    CHECK(why.find("rails") != std::string::npos);
  }
  CHECK_FALSE(decode_cts(w.b, 0, &d, &why));
  CHECK_FALSE(decode_cts(w.b, sizeof(CtsHeader) - 1, &d, &why));
}

TEST_CASE("a write's immediate data carries slot, buffer, pieces and a 9-bit generation",
          "[wire][imm]") {
  for (uint32_t slot : {0u, 1u, 4097u, kMaxSlots - 1}) {
    for (uint32_t entry = 0; entry < 8; ++entry) {
      for (uint32_t n : {1u, 7u, static_cast<uint32_t>(kMaxChunks)}) {
        for (uint32_t gen : {0u, 63u, 64u, 300u, kMaxGen}) {
          const Imm i = imm_decode(imm_encode(slot, entry, n, gen));
          CHECK(i.slot == slot);
          CHECK(i.entry == entry);
          CHECK(i.nchunks == n);
          CHECK(i.gen == gen);
        }
      }
    }
  }
  // The upper 32 bits (the length where CQ data has 8 bytes) never disturb the fields.
  const Imm i = imm_decode((uint64_t{12345} << 32) | imm_encode(7, 3, 2, 500));
  CHECK((i.slot == 7 && i.entry == 3 && i.nchunks == 2 && i.gen == 500));
}

TEST_CASE("a handshake announcing an eager size above the bound is refused", "[wire]") {
  uint8_t rails[kMaxRails - 1][kMaxAddrLen] = {};
  ProtoInfo p;
  std::string why;
  encode_proto(kProtoRdma, 1, kMaxEagerMax, 16, rails, 0xc0ffee01u, &p);
  CHECK(decode_proto(p, 16, &why));
  encode_proto(kProtoRdma, 1, kMaxEagerMax + 1, 16, rails, 0xc0ffee01u, &p);
  CHECK_FALSE(decode_proto(p, 16, &why));
  CHECK(why.find("eager") != std::string::npos);
  encode_proto(kProtoRdma, 1, 0xffffffffu, 16, rails, 0xc0ffee01u, &p);
  CHECK_FALSE(decode_proto(p, 16, &why));
}

TEST_CASE("a protocol block's address length fits the rail addresses", "[wire]") {
  uint8_t rails[kMaxRails - 1][kMaxAddrLen] = {};
  ProtoInfo p;
  std::string why;
  encode_proto(kProtoRdma, 2, 0, kMaxAddrLen, rails, 0xc0ffee01u, &p);
  CHECK(decode_proto(p, kMaxAddrLen, &why));
  // An ack's block names its own length (decode_ack has no other): out of range is refused even
  // where it matches what the caller passed (tests/fuzz/regress/ack/, regress/proto/).
  for (uint16_t len : {uint16_t{0}, uint16_t{kMaxAddrLen + 1}, uint16_t{284}, uint16_t{0xffff}}) {
    INFO("addr_len " << len);
    p.addr_len = len;
    p.checksum = wire_checksum(&p, offsetof(ProtoInfo, checksum));
    CHECK_FALSE(decode_proto(p, len, &why));
    CHECK(why.find("rail address length") != std::string::npos);
    unsigned char hb[kHandleSize];
    encode_handle(42, 9, 5, kAddr, sizeof(kAddr), hb);
    WireHandle h;
    REQUIRE(decode_handle(hb, &h, &why));
    ConnectMsg c;
    encode_connect(h, 6, 77, kAddr, sizeof(kAddr), &c);
    AckMsg ack;
    encode_ack(c, AckStatus::kOk, &ack);
    set_ack_recv_id(&ack, 3);
    ack.proto = p;
    CHECK_FALSE(decode_ack(ack, sizeof(ack), &why));
  }
}

TEST_CASE("a notice is checked before use: length, magic and kind", "[wire][notice]") {
  for (uint32_t kind :
       {static_cast<uint32_t>(kNoticeRts), static_cast<uint32_t>(kNoticeTooLarge)}) {
    const NoticeMsg m = {kNoticeMagic, kind, 0xfedcba9876543210ull};
    uint8_t b[sizeof(NoticeMsg) + 8] = {};
    memcpy(b + 1, &m, sizeof(m));  // at an odd offset: the decoder must not rely on alignment
    NoticeMsg d;
    std::string why;
    REQUIRE(decode_notice(b + 1, sizeof(m), &d, &why));
    CHECK(d.magic == kNoticeMagic);
    CHECK(d.kind == kind);
    CHECK(d.size == m.size);
    // Any other length is refused, and *out is left alone.
    for (size_t len : {size_t{0}, size_t{4}, sizeof(m) - 1, sizeof(m) + 1, sizeof(m) + 7}) {
      INFO("length " << len);
      NoticeMsg u;
      memset(&u, 0xa5, sizeof(u));
      CHECK_FALSE(decode_notice(b + 1, len, &u, &why));
      CHECK(why.find("a notice of " + std::to_string(len) + " bytes") != std::string::npos);
      CHECK((u.magic == 0xa5a5a5a5u && u.kind == 0xa5a5a5a5u));
    }
  }
  std::string why;
  NoticeMsg d;
  NoticeMsg bad = {kNoticeMagic ^ 1u, kNoticeRts, 1};
  CHECK_FALSE(decode_notice(&bad, sizeof(bad), &d, &why));
  CHECK(why.find("malformed notice") != std::string::npos);
  for (uint32_t kind : {0u, 3u, 0x80000001u}) {
    bad = {kNoticeMagic, kind, 1};
    CHECK_FALSE(decode_notice(&bad, sizeof(bad), &d, &why));
    CHECK(why.find("kind " + std::to_string(kind)) != std::string::npos);
  }
}

TEST_CASE("a probe's length agrees with its kind and address", "[wire][probe]") {
  ProbeMsg m;
  memset(&m, 0, sizeof(m));
  m.magic = kProbeMagic;
  m.version = kWireVersion;
  m.kind = kProbePing;
  m.addr_len = 32;
  m.token = 3;
  m.seq = 9;
  ProbeMsg d;
  std::string why;
  CHECK(decode_probe(&m, kProbeFixed + 32, &d, &why));
  CHECK_FALSE(decode_probe(&m, kProbeFixed + 31, &d, &why));
  CHECK_FALSE(decode_probe(&m, kProbeFixed + 33, &d, &why));
  m.kind = kProbePong;
  m.addr_len = 0;
  CHECK(decode_probe(&m, kProbeFixed, &d, &why));
  CHECK((d.token == 3 && d.seq == 9));
  // A pong names no address and has no tail (tests/fuzz/regress/probe/).
  CHECK_FALSE(decode_probe(&m, kProbeFixed + 4, &d, &why));
  CHECK(why.find("pong") != std::string::npos);
  m.addr_len = 4;
  CHECK_FALSE(decode_probe(&m, kProbeFixed, &d, &why));
  m.kind = 3;
  m.addr_len = 0;
  CHECK_FALSE(decode_probe(&m, kProbeFixed, &d, &why));
}

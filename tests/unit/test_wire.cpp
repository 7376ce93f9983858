#include <catch2/catch.hpp>

#include <cstring>

#include "proto/wire.h"

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
  h.version = 7;
  h.checksum = wire_checksum(&h, offsetof(WireHandle, checksum));
  memcpy(buf, &h, sizeof(h));
  std::string why;
  CHECK_FALSE(decode_handle(buf, &h, &why));
  CHECK(why.find("version 7") != std::string::npos);
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
  encode_proto(kProtoSendRecv | kProtoRdma, 1, 0, sizeof(kAddr), rails, &m.proto);
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
  encode_proto(kProtoRdma, kMaxRails + 1, 0, sizeof(kAddr), rails, &pr.proto);
  CHECK_FALSE(decode_connect(pr, sizeof(pr), &why, &bad_version));
  CHECK(why.find("rail count") != std::string::npos);
  pr.proto.protocols = 0x80;  // corrupted after the checksum
  CHECK_FALSE(decode_connect(pr, sizeof(pr), &why, &bad_version));

  AckMsg ack;
  encode_ack(m, AckStatus::kOk, &ack);
  encode_proto(kProtoRdma, 1, 8192, sizeof(kAddr), rails, &ack.proto);
  CHECK(decode_ack(ack, sizeof(ack), &why));
  CHECK_FALSE(decode_ack(ack, kAckRefusalSize, &why));  // an acceptance needs its block
  encode_proto(kProtoRdma | kProtoSendRecv, 1, 8192, sizeof(kAddr), rails, &ack.proto);
  CHECK_FALSE(decode_ack(ack, sizeof(ack), &why));      // the listener must choose one
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

TEST_CASE("data and control tags of different comms never collide", "[wire]") {
  CHECK(data_tag(1, 7) != data_tag(2, 7));
  CHECK(data_tag(1, -1) == ((1ull << 32) | 0xffffffffull));
  CHECK((data_tag(kMaxCommId, -1) & kTagCtrlBit) == 0);
  CHECK(ctrl_tag(3, kCtrlConnect) == (kTagCtrlBit | (3ull << 32) | 1));
  CHECK(ctrl_tag(3, kCtrlAck) != ctrl_tag(4, kCtrlAck));
  CHECK(ctrl_tag(3, kCtrlConnect) != data_tag(3, 1));
}

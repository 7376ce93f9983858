// Runtime checks of the NCCL net ABI declarations: the headers' static asserts pin the layout,
// these exercise it the way NCCL does (raw byte offsets, memcpy, NULL optional members).
#include <catch2/catch.hpp>

#include <cstddef>
#include <cstring>

#include "nccl/net.h"

namespace {
ncclResult_t fakeDevices(int* ndev) {
  *ndev = 3;
  return ncclSuccess;
}
ncclResult_t fakeFinalize(void*) { return ncclRemoteError; }
}  // namespace

TEST_CASE("designated-initialised ncclNet_v11_t leaves unset members NULL", "[abi]") {
  // g++ 12's -Wextra flags omitted members even when designated; omitting them is the point.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"
  const ncclNet_v11_t net = {.name = "probe", .devices = fakeDevices, .finalize = fakeFinalize};
#pragma GCC diagnostic pop
  // NCCL treats a NULL optional member as "not supported", so omission must mean NULL.
  CHECK(net.init == nullptr);
  CHECK(net.getDeviceMr == nullptr);
  CHECK(net.irecvConsumed == nullptr);
  CHECK(net.makeVDevice == nullptr);
  CHECK(net.setNetAttr == nullptr);
  int ndev = 0;
  REQUIRE(net.devices(&ndev) == ncclSuccess);
  CHECK(ndev == 3);
  CHECK(std::strcmp(net.name, "probe") == 0);
}

TEST_CASE("ncclNet_v11_t finalize sits at byte 160 of a real object", "[abi]") {
  ncclNet_v11_t net{};
  net.finalize = fakeFinalize;
  const char* base = reinterpret_cast<const char*>(&net);
  CHECK(reinterpret_cast<const char*>(&net.finalize) - base == 160);
  CHECK(offsetof(ncclNet_v11_t, finalize) == 160);
  // Read the slot as raw bytes, as a v11-aware NCCL would after dlsym().
  ncclResult_t (*slot)(void*) = nullptr;
  std::memcpy(&slot, base + 160, sizeof slot);
  REQUIRE(slot == fakeFinalize);
  CHECK(slot(nullptr) == ncclRemoteError);
}

TEST_CASE("ncclNetProperties_v11_t survives a memcpy round-trip", "[abi]") {
  char name[] = "nf0";
  ncclNetProperties_v11_t in{};
  in.name = name;
  in.guid = 0x1122334455667788ull;
  in.ptrSupport = NCCL_PTR_HOST | NCCL_PTR_CUDA;
  in.latency = 1.5f;
  in.netDeviceType = NCCL_NET_DEVICE_UNPACK;
  in.vProps.ndevs = 2;
  in.vProps.devs[NCCL_NET_MAX_DEVS_PER_NIC - 1] = 7;
  in.maxP2pBytes = NCCL_MAX_NET_SIZE_BYTES;
  in.maxMultiRequestSize = 1;
  unsigned char wire[112];
  REQUIRE(sizeof wire == sizeof in);
  std::memcpy(wire, &in, sizeof in);
  size_t p2p = 0;
  std::memcpy(&p2p, wire + 88, sizeof p2p);
  CHECK(p2p == (size_t{1} << 40));
  ncclNetProperties_v11_t out;
  std::memcpy(&out, wire, sizeof out);
  CHECK(out.name == name);
  CHECK(out.guid == in.guid);
  CHECK(out.ptrSupport == 0x3);
  CHECK(out.latency == 1.5f);
  CHECK(out.netDeviceType == 1);
  CHECK(out.vProps.ndevs == 2);
  CHECK(out.vProps.devs[3] == 7);
  CHECK(out.maxMultiRequestSize == 1);
}

TEST_CASE("ABI constants match the spec", "[abi]") {
  CHECK(NCCL_NET_HANDLE_MAXSIZE == 128);
  CHECK(NCCL_NET_MAX_REQUESTS == 32);
  CHECK(ncclInProgress == 7);
  CHECK(ncclNumResults == 8);
  CHECK(static_cast<unsigned>(NCCL_ALL) == ~0u);
}

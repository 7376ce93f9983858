// The compact eager encoding of the control path (core/ctrl.h, docs/protocol.md "Compact eager
// messages"): the CQ data's fields, and the per-tag index completed from its low 16 bits.
#include <catch2/catch.hpp>

#include <cstdint>

#include "core/ctrl.h"

using namespace nf;

TEST_CASE("compact eager: the CQ data carries the mark, the comm id, the tag and 16 index bits",
          "[unit][ctrl]") {
  const uint64_t d = compact_eager_data(kMaxCommId, 0xffff, 0x12345678u);
  CHECK(is_compact_eager(FI_REMOTE_CQ_DATA, d));
  CHECK_FALSE(is_compact_eager(0, d));  // no CQ data: a message with a header
  CHECK((d >> 32 & kMaxCommId) == kMaxCommId);
  CHECK((d >> 16 & 0xffff) == 0xffff);
  CHECK((d & 0xffff) == 0x5678);
  // An RDMA write's immediate (upper 32 bits: its length, at most 1 GiB) never looks compact.
  CHECK_FALSE(is_compact_eager(FI_REMOTE_CQ_DATA, (uint64_t{1} << 30) << 32 | 0xffffffffu));
  const uint64_t small = compact_eager_data(5, 7, 3);
  CHECK(small >> 60 == 0xe);
  CHECK((small >> 32 & kMaxCommId) == 5);
}

TEST_CASE("compact eager: the index is completed within 32767 of the next buffer posted",
          "[unit][ctrl]") {
  // Exact for every message up to 32767 ahead of or 32768 behind the receiver's next buffer,
  // across the 16-bit and the 32-bit wrap.
  const uint32_t refs[] = {0, 1, 100, 65535, 65536, 70000, 0xfffffff0u, 0xffffffffu};
  const int32_t offsets[] = {0, 1, -1, 31, -31, 4096, -4096, 32767, -32768};
  for (uint32_t ref : refs) {
    for (int32_t off : offsets) {
      const uint32_t index = ref + static_cast<uint32_t>(off);
      INFO("ref " << ref << " offset " << off);
      CHECK(compact_index(index & 0xffffu, ref) == index);
    }
  }
  // Further than that, the 16 bits name another message: the protocol never lets one get there
  // (kMaxAhead, and at most 32 receives of 8 buffers posted).
  CHECK(compact_index(32768, 0) != 32768u);
}

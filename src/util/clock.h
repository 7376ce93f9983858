// Monotonic time for timeouts (slow paths only: never read on the data path's fast branch).
#pragma once
#include <cstdint>
#include <ctime>

namespace nf {

inline uint64_t now_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec);
}

}  // namespace nf

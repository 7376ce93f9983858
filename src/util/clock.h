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

// Wall-clock milliseconds since the epoch (statistics files: comparable across nodes).
inline uint64_t wall_ms() {
  timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000ull +
         static_cast<uint64_t>(ts.tv_nsec) / 1000000ull;
}

}  // namespace nf

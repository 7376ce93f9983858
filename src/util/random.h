// Random 64-bit values for tokens, nonces and keys a peer must not guess (getrandom; the clock,
// scrambled, only where the kernel has no entropy to give).
#pragma once
#include <sys/random.h>

#include <cstdint>

#include "util/clock.h"

namespace nf {

inline uint64_t random_u64() {
  uint64_t v = 0;
  if (getrandom(&v, sizeof(v), 0) != static_cast<ssize_t>(sizeof(v)))
    v = now_ns() * 0x9e3779b97f4a7c15ull;
  return v;
}

}  // namespace nf

// What every fuzz target of tests/fuzz/ shares (README.md there): the entry point, checks that
// crash, and a reader that turns the fuzzer's bytes into field values.
//
// One source file per target, each with one NF_FUZZ_TARGET(name). Built with clang
// -fsanitize=fuzzer -DNF_FUZZ_LIBFUZZER (tests/fuzz/run.sh) it is libFuzzer's
// LLVMFuzzerTestOneInput; built without it (make check, any compiler) it is registered by name and
// replay_main.cpp runs every seed and regression input of tests/fuzz/ through it.
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>

namespace nf_fuzz {

using Target = int (*)(const uint8_t* data, size_t size);

// The input being replayed (replay_main.cpp sets it), named when a check fails.
inline const char*& current_input() {
  static const char* path = nullptr;
  return path;
}

// A failed check: the fuzzer's crash signal (libFuzzer keeps the input that caused it; the replay
// program dies and make check fails). Never abort() or exit(): a trap cannot be caught or ignored.
[[noreturn]] inline void fail(const char* file, int line, const char* what) {
  fprintf(stderr, "%s:%d: fuzz check failed: %s%s%s\n", file, line, what,
          current_input() != nullptr ? " on " : "",
          current_input() != nullptr ? current_input() : "");
  fflush(stderr);
  __builtin_trap();
}

#define NF_FUZZ_CHECK(cond) \
  ((cond) ? static_cast<void>(0) : ::nf_fuzz::fail(__FILE__, __LINE__, #cond))

// Field values from the input, front to back, like libFuzzer's FuzzedDataProvider (which g++
// builds do not have): past the end every byte reads 0, so any input gives every field a value.
class Reader {
 public:
  Reader(const uint8_t* data, size_t size) : data_(data), size_(size) {}
  uint8_t u8() { return pos_ < size_ ? data_[pos_++] : 0; }
  uint16_t u16() { return static_cast<uint16_t>(bytes(2)); }
  uint32_t u32() { return static_cast<uint32_t>(bytes(4)); }
  uint64_t u64() { return bytes(8); }
  bool flag() { return (u8() & 1) != 0; }
  // A value in lo..hi (lo <= hi), from as few bytes as the span needs.
  uint64_t range(uint64_t lo, uint64_t hi) {
    const uint64_t span = hi - lo;
    if (span == ~0ull) return u64();
    int n = 0;
    for (uint64_t s = span; s != 0; s >>= 8) ++n;
    return lo + bytes(n) % (span + 1);
  }
  // len bytes into out; zeros past the end of the input.
  void fill(void* out, size_t len) {
    const size_t have = pos_ < size_ ? size_ - pos_ : 0;
    const size_t take = have < len ? have : len;
    if (take > 0) memcpy(out, data_ + pos_, take);
    memset(static_cast<uint8_t*>(out) + take, 0, len - take);
    pos_ += take;
  }

 private:
  uint64_t bytes(int n) {
    uint64_t v = 0;
    for (int i = 0; i < n; ++i) v |= static_cast<uint64_t>(u8()) << (8 * i);
    return v;
  }
  const uint8_t* data_;
  size_t size_;
  size_t pos_ = 0;
};

// Replay mode: the table of targets (replay_main.cpp).
struct Registration {
  Registration(const char* name, Target fn);
};

}  // namespace nf_fuzz

#ifdef NF_FUZZ_LIBFUZZER
#define NF_FUZZ_TARGET(name)                                                \
  static int nf_fuzz_##name(const uint8_t* data, size_t size);              \
  extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) { \
    return nf_fuzz_##name(data, size);                                      \
  }                                                                         \
  static int nf_fuzz_##name(const uint8_t* data, size_t size)
#else
#define NF_FUZZ_TARGET(name)                                                               \
  static int nf_fuzz_##name(const uint8_t* data, size_t size);                             \
  static const ::nf_fuzz::Registration nf_fuzz_registration_##name(#name, nf_fuzz_##name); \
  static int nf_fuzz_##name(const uint8_t* data, size_t size)
#endif

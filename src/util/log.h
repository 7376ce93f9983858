// Logging through NCCL's logger (prefix NET/FABRIC), or to stderr when there is none.
#pragma once
#include <cstdarg>

namespace nf {

enum class LogLevel : int { kNone = 0, kVersion = 1, kWarn = 2, kInfo = 3, kAbort = 4, kTrace = 5 };

// NCCL's subsystem bits that we log under.
constexpr unsigned long kSubsysInit = 0x1;
constexpr unsigned long kSubsysNet = 0x10;
constexpr unsigned long kSubsysEnv = 0x80;

// Receives each formatted line (already prefixed NET/FABRIC). api/ bridges it to NCCL's variadic
// ncclDebugLogger_t, whose type this layer does not know.
using LoggerFn = void (*)(int level, unsigned long flags, const char* file, int line,
                          const char* text);

// Installs the logger (NULL returns to stderr). NCCL hands every init the same function.
void set_logger(LoggerFn fn);

// True when messages of this level would be printed: lets callers skip formatting work.
bool log_enabled(LogLevel level);

void log_message(LogLevel level, unsigned long subsys, const char* file, int line, const char* fmt,
                 ...) __attribute__((format(printf, 5, 6)));

// Captures what would be logged, for tests (NULL to stop).
using LogSink = void (*)(LogLevel level, const char* text, void* arg);
void set_log_sink(LogSink sink, void* arg);

}  // namespace nf

#define NF_WARN(...) \
  ::nf::log_message(::nf::LogLevel::kWarn, ::nf::kSubsysNet, __FILE__, __LINE__, __VA_ARGS__)
#define NF_INFO(sub, ...) \
  ::nf::log_message(::nf::LogLevel::kInfo, (sub), __func__, __LINE__, __VA_ARGS__)
#define NF_TRACE(...)                                                                 \
  do {                                                                                \
    if (::nf::log_enabled(::nf::LogLevel::kTrace))                                    \
      ::nf::log_message(::nf::LogLevel::kTrace, ::nf::kSubsysNet, __func__, __LINE__, \
                        __VA_ARGS__);                                                 \
  } while (0)

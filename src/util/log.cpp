#include "util/log.h"

#include <strings.h>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace nf {
namespace {

std::atomic<LoggerFn> g_logger{nullptr};
std::atomic<LogSink> g_sink{nullptr};
std::atomic<void*> g_sink_arg{nullptr};

// Without NCCL, follow NCCL_DEBUG ourselves so the tools and tests print what NCCL would.
LogLevel stderr_level() {
  static const LogLevel level = [] {
    const char* v = getenv("NCCL_DEBUG");
    if (v == nullptr) return LogLevel::kWarn;
    if (strcasecmp(v, "TRACE") == 0) return LogLevel::kTrace;
    if (strcasecmp(v, "INFO") == 0) return LogLevel::kInfo;
    if (strcasecmp(v, "VERSION") == 0) return LogLevel::kVersion;
    if (strcasecmp(v, "NONE") == 0) return LogLevel::kNone;
    return LogLevel::kWarn;
  }();
  return level;
}

const char* level_name(LogLevel level) {
  switch (level) {
    case LogLevel::kWarn: return "WARN";
    case LogLevel::kInfo: return "INFO";
    case LogLevel::kTrace: return "TRACE";
    default: return "";
  }
}

}  // namespace

void set_logger(LoggerFn fn) { g_logger.store(fn, std::memory_order_release); }

void set_log_sink(LogSink sink, void* arg) {
  g_sink_arg.store(arg, std::memory_order_relaxed);
  g_sink.store(sink, std::memory_order_release);
}

bool log_enabled(LogLevel level) {
  // NCCL filters by its own level; we cannot see it, so anything may be wanted.
  if (g_logger.load(std::memory_order_acquire) != nullptr) return true;
  if (g_sink.load(std::memory_order_acquire) != nullptr) return true;
  return static_cast<int>(level) <= static_cast<int>(stderr_level());
}

void log_message(LogLevel level, unsigned long subsys, const char* file, int line, const char* fmt,
                 ...) {
  char text[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(text, sizeof(text), fmt, ap);
  va_end(ap);

  if (LogSink sink = g_sink.load(std::memory_order_acquire))
    sink(level, text, g_sink_arg.load(std::memory_order_relaxed));
  if (LoggerFn fn = g_logger.load(std::memory_order_acquire)) {
    char line_text[1100];
    snprintf(line_text, sizeof(line_text), "NET/FABRIC %s", text);
    fn(static_cast<int>(level), subsys, file, line, line_text);
    return;
  }
  if (static_cast<int>(level) > static_cast<int>(stderr_level())) return;
  fprintf(stderr, "NET/FABRIC %s %s\n", level_name(level), text);
}

}  // namespace nf

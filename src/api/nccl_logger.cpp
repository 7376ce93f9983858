#include "api/nccl_logger.h"

#include <atomic>

namespace nf {
namespace {

std::atomic<ncclDebugLogger_t> g_nccl_logger{nullptr};

void bridge(int level, unsigned long flags, const char* file, int line, const char* text) {
  if (ncclDebugLogger_t fn = g_nccl_logger.load(std::memory_order_acquire))
    fn(static_cast<ncclDebugLogLevel>(level), flags, file, line, "%s", text);
}

}  // namespace

LoggerFn nccl_logger(ncclDebugLogger_t fn) {
  if (fn != nullptr) g_nccl_logger.store(fn, std::memory_order_release);
  return g_nccl_logger.load(std::memory_order_acquire) != nullptr ? bridge : nullptr;
}

}  // namespace nf

// NCCL's logger behind util/log.h: the one bridge of the net plugin and the tuner (both may live
// in one library and be handed a logger each).
#pragma once
#include "nccl/common.h"
#include "util/log.h"

namespace nf {

// Remembers `fn` and returns the function util/log.h should call, which forwards to it. A NULL
// `fn` keeps the logger the other side handed over; nullptr when there is none at all (the log
// then goes to stderr).
LoggerFn nccl_logger(ncclDebugLogger_t fn);

}  // namespace nf

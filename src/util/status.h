// Result codes of the internal API. The numbers equal NCCL's ncclResult_t so the adapters in api/
// can pass them through; api/ static_asserts that they match.
#pragma once

namespace nf {

enum class Status : int {
  kOk = 0,
  kUnhandledCudaError = 1,  // a CUDA driver call failed
  kSystemError = 2,         // the network, the provider or the OS failed
  kInternalError = 3,       // the caller broke the plugin contract (bad request, bad handle)
  kInvalidArgument = 4,
  kInvalidUsage = 5,  // user error or misconfiguration (e.g. a message larger than the receive)
  kRemoteError = 6,   // the peer failed or refused
  // The peer stopped answering (liveness probes, the handshake's deadline). NCCL >= 2.30 (net ABI
  // v12) gets ncclTimeout; older ABIs have no such value and get ncclRemoteError (api/adapter.h).
  kTimeout = 8,
};

inline bool ok(Status s) { return s == Status::kOk; }

// "remote error", "timeout", ...: for messages and the statistics file.
inline const char* status_name(Status s) {
  switch (s) {
    case Status::kOk: return "ok";
    case Status::kUnhandledCudaError: return "CUDA error";
    case Status::kSystemError: return "system error";
    case Status::kInternalError: return "internal error";
    case Status::kInvalidArgument: return "invalid argument";
    case Status::kInvalidUsage: return "invalid usage";
    case Status::kRemoteError: return "remote error";
    case Status::kTimeout: return "timeout";
  }
  return "unknown error";
}

}  // namespace nf

// Returns from the enclosing function when an internal call fails; the callee has logged why.
#define NF_CHECK(expr)                                        \
  do {                                                        \
    ::nf::Status nf_check_s_ = (expr);                        \
    if (nf_check_s_ != ::nf::Status::kOk) return nf_check_s_; \
  } while (0)

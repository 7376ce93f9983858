// A minimal raw-libfabric transport doing the same transfers the plugin does (tagged messages on
// one RDM endpoint, fi_tinject for small sends), so that tools can measure what the plugin adds.
// Single-threaded, manual progress: whoever waits for an operation must call progress().
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <rdma/fabric.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_tagged.h>

namespace nfc {

class Oob;

// "fi_tsend: Resource temporarily unavailable (-11)": rc may be negative or positive.
std::string fi_error(const char* call, long rc);

// The libfabric API version to ask for: never above what the library offers (1.17 refuses 1.18).
uint32_t raw_api_version();

struct RawConfig {
  std::string provider;    // exact provider name, e.g. "tcp;ofi_rxm" or "shm"
  std::string domain;      // domain to use; "" = the first one the provider lists
  size_t cq_size = 1024;   // completion queue entries
  bool use_inject = true;  // fi_tinject for sends up to inject_size, as the plugin does by default
};

// One operation in flight. The provider gets &ctx (fi_context2 satisfies FI_CONTEXT and
// FI_CONTEXT2) and a completion finds the RawOp from it, so ctx stays the first member and RawOp
// standard-layout. Must not move while posted.
struct RawOp {
  fi_context2 ctx;
  bool posted = false;  // handed to the provider and not completed yet
  bool done = false;    // completed (successfully unless err != 0)
  size_t len = 0;       // bytes received (receives) or sent (sends)
  int err = 0;          // positive FI_E* of an error completion; RawFabric::op_error() has text

  void reset() { *this = RawOp(); }
};

// A local registration; desc is what fi_tsend/fi_trecv take (NULL when the provider needs none).
struct RawMr {
  fid_mr* mr = nullptr;
  void* desc = nullptr;
  void* base = nullptr;
  size_t len = 0;
};

class RawFabric {
 public:
  RawFabric() = default;
  ~RawFabric();
  RawFabric(const RawFabric&) = delete;
  RawFabric& operator=(const RawFabric&) = delete;

  // fi_getinfo (RDM, tagged, FI_ORDER_SAS) for cfg.provider, then fabric, domain, CQ, AV and an
  // enabled endpoint.
  bool open(const RawConfig& cfg, std::string* err);

  // Both sides call it: sends our endpoint name over `oob`, receives the peer's and inserts it.
  bool connect_peer(Oob& oob, int timeout_ms, std::string* err);

  // Registers [buf, buf+len) for sends and receives when the provider's mr_mode has FI_MR_LOCAL;
  // otherwise returns a registration with a NULL descriptor. Owned by this object; released by
  // dereg() or the destructor (before the domain closes).
  const RawMr* reg(void* buf, size_t len, std::string* err);
  void dereg(const RawMr* mr);

  enum class Post { kPosted, kAgain, kError };
  // kAgain: the provider said -FI_EAGAIN; the CQ has been read (progress) and the caller retries
  // with the same arguments. A send of at most inject_size() bytes goes through fi_tinject when
  // use_inject is on: it is done on return and produces no completion.
  Post send(const void* buf, size_t len, const RawMr* mr, uint64_t tag, RawOp* op,
            std::string* err);
  Post recv(void* buf, size_t cap, const RawMr* mr, uint64_t tag, RawOp* op, std::string* err);

  // Reads the completion queue until it is empty, marking operations done. An error completion is
  // recorded in its operation (err, err_text); false only when the queue itself fails.
  bool progress(std::string* err);

  // Polls progress() until op is done or timeout_ms passes. False on timeout, queue failure, or
  // an error completion of op.
  bool wait(RawOp* op, int timeout_ms, std::string* err);

  // The text of the most recent error completion (what the provider said about it).
  const std::string& op_error() const { return op_error_; }

  const fi_info* info() const { return info_; }
  const std::string& provider() const { return provider_; }
  const std::string& domain_name() const { return domain_name_; }
  size_t inject_size() const { return inject_size_; }
  uint64_t mr_mode() const { return mr_mode_; }
  size_t max_msg_size() const { return max_msg_size_; }
  bool use_inject() const { return use_inject_; }

 private:
  void close_all();

  fi_info* info_ = nullptr;
  fid_fabric* fabric_ = nullptr;
  fid_domain* domain_ = nullptr;
  fid_av* av_ = nullptr;
  fid_cq* cq_ = nullptr;
  fid_ep* ep_ = nullptr;
  fi_addr_t peer_ = FI_ADDR_UNSPEC;
  std::string provider_;
  std::string domain_name_;
  size_t inject_size_ = 0;
  uint64_t mr_mode_ = 0;
  size_t max_msg_size_ = 0;
  bool use_inject_ = true;
  uint64_t next_key_ = 1;
  std::string op_error_;
  std::vector<std::unique_ptr<RawMr>> mrs_;
};

}  // namespace nfc

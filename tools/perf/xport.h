// The transports the test loops run on: any NCCL net plugin through its ABI, and raw libfabric
// doing the same transfers. The loops see only Xport, so both run the same code.
#pragma once
#include <array>
#include <memory>
#include <string>
#include <vector>

#include "client/plugin_loader.h"
#include "client/raw_fabric.h"
#include "nccl/net.h"
#include "perf/channel.h"
#include "perf/perf.h"

namespace nfp {

// An operation is n messages of len bytes, at buf, buf + len, ...: n isends, or one grouped
// irecv of n buffers (raw: n tagged receives). Slots name operations in flight.
class Xport {
 public:
  enum class Post { kPosted, kRetry };  // errors throw
  virtual ~Xport() = default;
  virtual const char* name() const = 0;
  // Registers sbuf for sends and rbuf for receives, on every comm.
  virtual void reg(char* sbuf, char* rbuf, size_t len) = 0;
  // kRetry: the transport cannot take it all now (NULL request / -FI_EAGAIN); call again with the
  // same arguments later, it goes on from where it stopped.
  virtual Post post_send(int slot, int comm, char* buf, size_t len, int n) = 0;
  virtual Post post_recv(int slot, int comm, char* buf, size_t cap, int n) = 0;
  // True once every message of the slot's operation completed; lens[i] = bytes received.
  virtual bool poll(int slot, size_t* lens) = 0;
  // Receives of one buffer carry NCCL's optional-completion hint (plugin only; a no-op for raw).
  virtual void set_optional_completion(bool on) { (void)on; }
};

// NCCL's view of a peer: per comm index c, a send comm to the peer and a recv comm from it.
class PluginXport : public Xport {
 public:
  // name: how rows and messages call it ("plugin", or "plugin:PROTO" with --protocol).
  PluginXport(nfc::NetPlugin& p, std::string name, int rank, int comms, int slots);
  ~PluginXport() override;
  const char* name() const override { return name_.c_str(); }

  // Listens comms times, trades the handles over the channel, then polls connect (to the peer's
  // handles) and accept alternately in this thread until every comm is up, as NCCL's service
  // thread does.
  void connect(int dev, Chan& chan, Watch& w);

  void reg(char* sbuf, char* rbuf, size_t len) override;
  Post post_send(int slot, int comm, char* buf, size_t len, int n) override;
  Post post_recv(int slot, int comm, char* buf, size_t cap, int n) override;
  bool poll(int slot, size_t* lens) override;
  void set_optional_completion(bool on) override { optional_ = on; }

 private:
  bool optional_ = false;
  struct Slot {
    bool send = false;
    int n = 0, parts = 0;  // messages in the operation; posted so far
    void* reqs[kMaxGroup];
    bool done[kMaxGroup];
  };

  nfc::NetPlugin& p_;
  std::string name_;
  int my_tag_, peer_tag_;  // NCCL tags a message with its sender's rank; + i in a group
  std::vector<void*> listen_, send_, recv_;
  std::vector<std::array<char, NCCL_NET_HANDLE_MAXSIZE>> peer_handles_;
  std::vector<void*> smr_, rmr_;  // per comm
  std::vector<Slot> slots_;
};

// The same transfers on raw RDM endpoints: one endpoint (fabric, domain, CQ, AV) per comm.
class RawXport : public Xport {
 public:
  RawXport(int rank, int comms, int slots, int group);
  const char* name() const override { return "raw"; }

  // Opens the endpoint; when cfg.domain (the plugin's device) is not one of the provider's
  // domains, falls back to its first one and says so in *note.
  void open(nfc::RawConfig cfg, Chan& chan, std::string* note);
  const nfc::RawFabric& fabric() const { return *fab_; }

  void reg(char* sbuf, char* rbuf, size_t len) override;
  Post post_send(int slot, int comm, char* buf, size_t len, int n) override;
  Post post_recv(int slot, int comm, char* buf, size_t cap, int n) override;
  bool poll(int slot, size_t* lens) override;

 private:
  struct Slot {
    int comm = 0, n = 0, parts = 0;
  };
  Post check(nfc::RawFabric::Post p);
  Post post(bool send, int slot, int comm, char* buf, size_t len, int n);

  // Tag bits: the sending rank (32..), the comm (8..31), the part of a group (0..7).
  uint64_t my_tag_, peer_tag_;
  int group_;
  std::unique_ptr<nfc::RawFabric> fab_;  // one endpoint for every comm, as the plugin has
  const nfc::RawMr* smr_ = nullptr;
  const nfc::RawMr* rmr_ = nullptr;
  std::vector<Slot> slots_;
  std::unique_ptr<nfc::RawOp[]> ops_;  // group per slot; must not move while posted
  std::string err_;
};

const char* result_name(ncclResult_t r);
// "WHO CALL returned ...": who is the transport's name ("plugin", "plugin:rdma").
[[noreturn]] void plugin_fail(const char* call, ncclResult_t r, const std::string& who = "plugin");

}  // namespace nfp

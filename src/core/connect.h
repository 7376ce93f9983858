// Connection setup of the SENDRECV protocol (see connect.cpp and docs/protocol.md).
#pragma once
#include <memory>
#include <string>

#include "core/comm.h"

namespace nf {

struct ConnectEnv {
  std::shared_ptr<SharedEp> sep;  // the context's endpoint on the device
  const Params* params;
  std::string provider;
  uint32_t prov_hash;
  uint8_t offered;  // protocols this side accepts on the device (kProto* bits)
  ProfHook prof;
  std::shared_ptr<NetHints> hints;
  bool early_ok = false;  // NCCL_FABRIC_EARLY_COMPLETION applies on the device
};

Status comm_listen(const ConnectEnv& env, void* handle, std::unique_ptr<Comm>* out);
// Polls; *out stays empty until a peer has connected and been answered.
Status comm_accept(Comm& listen, const Params& params, std::unique_ptr<Comm>* out);
// Checks the handle and makes the send comm; comm_connect_poll then drives the handshake.
Status comm_connect_start(const ConnectEnv& env, const void* handle, std::unique_ptr<Comm>* out);
Status comm_connect_poll(Comm& c, const Params& params, bool* done);

}  // namespace nf

// The protocols there are: the handshake's choice (wire/wire.h's kProto* bits) to its table.
#include "core/protocol.h"
#include "wire/wire.h"

namespace nf {

const Protocol& protocol_for(uint8_t proto) {
  return proto == kProtoRdma ? kRdmaProtocol : kSendRecvProtocol;
}

}  // namespace nf

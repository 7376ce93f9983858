// ncclTunerPlugin_v2..v6: thin adapters over nf::tuner::Tuner. Built into libnccl-net-fabric.so
// (NCCL 2.21+ finds a tuner in the net library) and libnccl-tuner-fabric.so
// (NCCL_TUNER_PLUGIN=fabric). Nothing throws across the ABI, and init never fails: NCCL would fail
// communicator creation over it.
#include <atomic>
#include <new>

#include "api/nccl_logger.h"
#include "nccl/tuner.h"
#include "tuner/tuner.h"
#include "util/log.h"

#define NF_TUNER_EXPORT extern "C" __attribute__((visibility("default")))

namespace nf {
namespace tuner {
namespace {

void install_logger(ncclDebugLogger_t fn) {
  if (fn == nullptr) return;  // keep whatever the net side installed
  set_logger(nccl_logger(fn));
}

ncclResult_t init_common(const InitArgs& args, ncclDebugLogger_t log, void** ctx) {
  if (ctx == nullptr) return ncclSuccess;
  *ctx = nullptr;
  install_logger(log);
  try {
    *ctx = Tuner::create(args);
  } catch (...) {
    NF_WARN("tuner: init failed (out of memory?); NCCL decides for this communicator");
    *ctx = nullptr;
  }
  return ncclSuccess;
}

ncclResult_t init_v5(void** ctx, uint64_t comm_id, size_t n_ranks, size_t n_nodes,
                     ncclDebugLogger_t log, ncclNvlDomainInfo_v5_t* nvl,
                     ncclTunerConstants_v5_t* constants) {
  InitArgs a;
  a.n_ranks = n_ranks;
  a.n_nodes = n_nodes;
  a.ranks_per_node =
      nvl != nullptr && nvl->maxRanksPerNvlDomain > 0 ? nvl->maxRanksPerNvlDomain : 0;
  a.constants = constants;
  a.comm_id = comm_id;
  return init_common(a, log, ctx);
}

ncclResult_t init_v2(size_t n_ranks, size_t n_nodes, ncclDebugLogger_t log, void** ctx) {
  InitArgs a;
  a.n_ranks = n_ranks;
  a.n_nodes = n_nodes;
  return init_common(a, log, ctx);
}

ncclResult_t get_coll_info_v4(void* ctx, ncclFunc_t coll, size_t n_bytes, int /*num_pipe_ops*/,
                              float** cost_table, int num_algo, int num_proto, int /*reg_buff*/,
                              int* n_channels) {
  // NCCL passes a contiguous float[numAlgo][numProto] behind the float** (nccl-plugin-abi.md §6.4).
  if (ctx != nullptr)
    static_cast<const Tuner*>(ctx)->get_coll_info(static_cast<int>(coll), n_bytes,
                                                  reinterpret_cast<float*>(cost_table), num_algo,
                                                  num_proto, n_channels);
  return ncclSuccess;
}

ncclResult_t get_coll_info_v3(void* ctx, ncclFunc_t coll, size_t n_bytes, int num_pipe_ops,
                              float** cost_table, int num_algo, int num_proto, int* n_channels) {
  return get_coll_info_v4(ctx, coll, n_bytes, num_pipe_ops, cost_table, num_algo, num_proto, 0,
                          n_channels);
}

ncclResult_t get_coll_info_v2(void* ctx, ncclFunc_t coll, size_t n_bytes, int collnet_support,
                              int nvls_support, int /*num_pipe_ops*/, int* algo, int* proto,
                              int* n_channels) {
  if (algo != nullptr) *algo = NCCL_ALGO_UNDEF;
  if (proto != nullptr) *proto = NCCL_PROTO_UNDEF;
  if (ctx == nullptr || algo == nullptr || proto == nullptr) return ncclSuccess;
  static_cast<const Tuner*>(ctx)->pick_v2(static_cast<int>(coll), n_bytes, collnet_support,
                                          nvls_support, algo, proto, n_channels);
  return ncclSuccess;
}

ncclResult_t get_chunk_size_v6(void* ctx, ncclFunc_t coll, size_t n_bytes, int algo, int proto,
                               int n_channels, size_t* chunk) {
  if (ctx != nullptr)
    static_cast<const Tuner*>(ctx)->get_chunk_size(static_cast<int>(coll), n_bytes, algo, proto,
                                                   n_channels, chunk);
  return ncclSuccess;
}

ncclResult_t finalize(void* ctx) {
  delete static_cast<Tuner*>(ctx);
  return ncclSuccess;
}

}  // namespace
}  // namespace tuner
}  // namespace nf

using namespace nf::tuner;

NF_TUNER_EXPORT const ncclTuner_v6_t ncclTunerPlugin_v6 = {"fabric", init_v5, get_coll_info_v4,
                                                           finalize, get_chunk_size_v6};
NF_TUNER_EXPORT const ncclTuner_v5_t ncclTunerPlugin_v5 = {"fabric", init_v5, get_coll_info_v4,
                                                           finalize};
NF_TUNER_EXPORT const ncclTuner_v4_t ncclTunerPlugin_v4 = {"fabric", init_v2, get_coll_info_v4,
                                                           finalize};
NF_TUNER_EXPORT const ncclTuner_v3_t ncclTunerPlugin_v3 = {"fabric", init_v2, get_coll_info_v3,
                                                           finalize};
NF_TUNER_EXPORT const ncclTuner_v2_t ncclTunerPlugin_v2 = {"fabric", init_v2, get_coll_info_v2,
                                                           finalize};

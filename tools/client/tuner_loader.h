// Loads a tuner plugin through its ABI, exactly as NCCL does (dlopen, the ncclTunerPlugin_vX
// symbol), and calls any version through one interface. Shared by nccl-fabric-tune and the tests.
#pragma once
#include <dlfcn.h>

#include <cstdlib>
#include <string>

#include "nccl/tuner.h"

namespace nfc {

inline void quiet_logger(ncclDebugLogLevel, unsigned long, const char*, int, const char*, ...) {}

struct TunerLib {
  void* handle = nullptr;
  int version = 0;
  const void* sym = nullptr;

  // The net library (NF_PLUGIN_LIB) or, with tuner_only, libnccl-tuner-fabric.so beside it.
  static std::string path(bool tuner_only) {
    const char* p = std::getenv("NF_PLUGIN_LIB");
    std::string lib = p != nullptr ? p : "libnccl-net-fabric.so";
    if (tuner_only) {
      const std::string net = "libnccl-net-fabric.so";
      const size_t at = lib.rfind(net);
      if (at != std::string::npos) lib.replace(at, net.size(), "libnccl-tuner-fabric.so");
    }
    return lib;
  }

  bool load(const std::string& lib, int v, std::string* err) {
    handle = dlopen(lib.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (handle == nullptr) {
      *err = dlerror();
      return false;
    }
    const std::string name = "ncclTunerPlugin_v" + std::to_string(v);
    sym = dlsym(handle, name.c_str());
    if (sym == nullptr) {
      *err = name + " not found in " + lib;
      return false;
    }
    version = v;
    return true;
  }
  // Never dlclose, as plugin_loader: the library keeps process-lifetime tables (the platform
  // table, the device list) that are meant to live until exit.

  const char* name() const { return *static_cast<const char* const*>(sym); }

  ncclResult_t init(void** ctx, size_t n_ranks, size_t n_nodes, int rpn, ncclTunerConstants_v5_t* c,
                    ncclDebugLogger_t log = quiet_logger) const {
    ncclNvlDomainInfo_v5_t nvl = {static_cast<int>(n_nodes), rpn, rpn};
    switch (version) {
      case 6:
        return static_cast<const ncclTuner_v6_t*>(sym)->init(ctx, 42, n_ranks, n_nodes, log, &nvl,
                                                             c);
      case 5:
        return static_cast<const ncclTuner_v5_t*>(sym)->init(ctx, 42, n_ranks, n_nodes, log, &nvl,
                                                             c);
      case 4: return static_cast<const ncclTuner_v4_t*>(sym)->init(n_ranks, n_nodes, log, ctx);
      case 3: return static_cast<const ncclTuner_v3_t*>(sym)->init(n_ranks, n_nodes, log, ctx);
      default: return static_cast<const ncclTuner_v2_t*>(sym)->init(n_ranks, n_nodes, log, ctx);
    }
  }

  // v3+: the table as NCCL hands it. v2: NCCL's own shim (nccl-plugin-abi.md §6.4, "v2 compat"):
  // support flags from the table, then the returned pair's cell set to 0 if it is available.
  ncclResult_t coll_info(void* ctx, int coll, size_t bytes, float* table, int num_algo,
                         int num_proto, int* nch) const {
    float** t = reinterpret_cast<float**>(table);
    const ncclFunc_t f = static_cast<ncclFunc_t>(coll);
    switch (version) {
      case 6:
        return static_cast<const ncclTuner_v6_t*>(sym)->getCollInfo(ctx, f, bytes, 1, t, num_algo,
                                                                    num_proto, 0, nch);
      case 5:
        return static_cast<const ncclTuner_v5_t*>(sym)->getCollInfo(ctx, f, bytes, 1, t, num_algo,
                                                                    num_proto, 0, nch);
      case 4:
        return static_cast<const ncclTuner_v4_t*>(sym)->getCollInfo(ctx, f, bytes, 1, t, num_algo,
                                                                    num_proto, 0, nch);
      case 3:
        return static_cast<const ncclTuner_v3_t*>(sym)->getCollInfo(ctx, f, bytes, 1, t, num_algo,
                                                                    num_proto, nch);
      default: {
        auto cell = [&](int a, int p) -> float& { return table[a * num_proto + p]; };
        const bool collnet =
            cell(NCCL_ALGO_COLLNET_CHAIN, NCCL_PROTO_SIMPLE) != NCCL_ALGO_PROTO_IGNORE;
        const bool nvls = cell(NCCL_ALGO_NVLS, NCCL_PROTO_SIMPLE) != NCCL_ALGO_PROTO_IGNORE ||
                          cell(NCCL_ALGO_NVLS_TREE, NCCL_PROTO_SIMPLE) != NCCL_ALGO_PROTO_IGNORE;
        int algo = NCCL_ALGO_UNDEF, proto = NCCL_PROTO_UNDEF;
        const ncclResult_t r = static_cast<const ncclTuner_v2_t*>(sym)->getCollInfo(
            ctx, f, bytes, collnet, nvls, 1, &algo, &proto, nch);
        if (algo >= 0 && algo < num_algo && proto >= 0 && proto < num_proto &&
            cell(algo, proto) != NCCL_ALGO_PROTO_IGNORE)
          cell(algo, proto) = 0.0f;
        return r;
      }
    }
  }

  // v6 only; false elsewhere.
  bool chunk_size(void* ctx, int coll, size_t bytes, int algo, int proto, size_t* chunk,
                  int n_channels = 8) const {
    if (version != 6) return false;
    const auto* t = static_cast<const ncclTuner_v6_t*>(sym);
    return t->getChunkSize != nullptr &&
           t->getChunkSize(ctx, static_cast<ncclFunc_t>(coll), bytes, algo, proto, n_channels,
                           chunk) == ncclSuccess;
  }

  ncclResult_t finalize(void* ctx) const {
    switch (version) {
      case 6: return static_cast<const ncclTuner_v6_t*>(sym)->finalize(ctx);
      case 5: return static_cast<const ncclTuner_v5_t*>(sym)->finalize(ctx);
      case 4: return static_cast<const ncclTuner_v4_t*>(sym)->destroy(ctx);
      case 3: return static_cast<const ncclTuner_v3_t*>(sym)->destroy(ctx);
      default: return static_cast<const ncclTuner_v2_t*>(sym)->destroy(ctx);
    }
  }
};

}  // namespace nfc

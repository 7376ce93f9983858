/* Written from the NCCL plugin ABI spec (nccl-plugin-abi.md §6 and Appendix B), not NCCL's
 * headers: the tuner ABI v2 to v5 (NCCL 2.28.9, native v5) and v6 (NCCL 2.30, adds
 * getChunkSize). */
#ifndef NCCL_FABRIC_NCCL_TUNER_H
#define NCCL_FABRIC_NCCL_TUNER_H

#include "common.h"

/* §6.3 */
#define NCCL_ALGO_UNDEF -1
#define NCCL_ALGO_TREE 0
#define NCCL_ALGO_RING 1
#define NCCL_ALGO_COLLNET_DIRECT 2
#define NCCL_ALGO_COLLNET_CHAIN 3
#define NCCL_ALGO_NVLS 4
#define NCCL_ALGO_NVLS_TREE 5
#define NCCL_ALGO_PAT 6
#define NCCL_NUM_ALGORITHMS 7

#define NCCL_PROTO_UNDEF -1
#define NCCL_PROTO_LL 0
#define NCCL_PROTO_LL128 1
#define NCCL_PROTO_SIMPLE 2
#define NCCL_NUM_PROTOCOLS 3

/* A double literal; the cost table holds floats. */
#define NCCL_ALGO_PROTO_IGNORE -1.0

#define NCCL_HW_NVLINK 0
#define NCCL_HW_PCI 1
#define NCCL_HW_NET 2
#define NCCL_NUM_HW_LINKS 3

#define NCCL_VOLTA_COMPCAP_IDX 0
#define NCCL_AMPERE_COMPCAP_IDX 1
#define NCCL_HOPPER_COMPCAP_IDX 2
#define NCCL_BLACKWELL_COMPCAP_IDX 3
#define NCCL_NUM_COMPCAPS 4

#define NCCL_TUNING_SCALE_1NODE 0
#define NCCL_TUNING_SCALE_2NODES 1
#define NCCL_TUNING_SCALE_4NODES 2
#define NCCL_NUM_TUNING_SCALES 3

#define NCCL_NUM_ALGORITHMS_V5 7
#define NCCL_NUM_PROTOCOLS_V5 3
#define NCCL_NUM_HW_LINKS_V5 3
#define NCCL_NUM_COMPCAPS_V5 4
#define NCCL_NUM_TUNING_SCALES_V5 3

/* §6.1: nvlDomainInfo = {nNodes, minLocalRanks, maxLocalRanks} in 2.28.9. */
typedef struct {
  int nNvlDomains;
  int minRanksPerNvlDomain;
  int maxRanksPerNvlDomain;
} ncclNvlDomainInfo_v5_t;

/* NCCL's default tuning constants, copied per communicator; the tuner may edit them in init. */
typedef struct {
  double baseLatencies[NCCL_NUM_ALGORITHMS_V5][NCCL_NUM_PROTOCOLS_V5];
  double hwLatencies[NCCL_NUM_HW_LINKS_V5][NCCL_NUM_ALGORITHMS_V5][NCCL_NUM_PROTOCOLS_V5];
  double llMaxBws[NCCL_NUM_COMPCAPS_V5][NCCL_NUM_TUNING_SCALES_V5];
  double perChMaxRingLL128Bws[NCCL_NUM_COMPCAPS_V5][NCCL_NUM_TUNING_SCALES_V5];
  double perChMaxTreeLL128Bws[NCCL_NUM_COMPCAPS_V5][NCCL_NUM_TUNING_SCALES_V5];
  double perChMaxTreeBws[NCCL_NUM_COMPCAPS_V5][NCCL_NUM_TUNING_SCALES_V5];
  double perChMaxNVLSTreeBws[NCCL_NUM_COMPCAPS_V5][NCCL_NUM_TUNING_SCALES_V5];
} ncclTunerConstants_v5_t;

/* v6 reuses the v5 types (typedefs in NCCL 2.30). */
typedef ncclNvlDomainInfo_v5_t ncclNvlDomainInfo_v6_t;
typedef ncclTunerConstants_v5_t ncclTunerConstants_v6_t;

typedef struct {
  const char* name;
  ncclResult_t (*init)(void** ctx, uint64_t commId, size_t nRanks, size_t nNodes,
                       ncclDebugLogger_t logFunction, ncclNvlDomainInfo_v6_t* nvlDomainInfo,
                       ncclTunerConstants_v6_t* constants);
  ncclResult_t (*getCollInfo)(void* context, ncclFunc_t collType, size_t nBytes, int numPipeOps,
                              float** collCostTable, int numAlgo, int numProto, int regBuff,
                              int* nChannels);
  ncclResult_t (*finalize)(void* context);
  /* Optional (may be NULL). *chunkSize is in/out: NCCL's default comes in. */
  ncclResult_t (*getChunkSize)(void* context, ncclFunc_t collType, size_t nBytes, int algo,
                               int proto, int nChannels, size_t* chunkSize);
} ncclTuner_v6_t;

typedef struct {
  const char* name;
  ncclResult_t (*init)(void** ctx, uint64_t commId, size_t nRanks, size_t nNodes,
                       ncclDebugLogger_t logFunction, ncclNvlDomainInfo_v5_t* nvlDomainInfo,
                       ncclTunerConstants_v5_t* constants);
  ncclResult_t (*getCollInfo)(void* context, ncclFunc_t collType, size_t nBytes, int numPipeOps,
                              float** collCostTable, int numAlgo, int numProto, int regBuff,
                              int* nChannels);
  ncclResult_t (*finalize)(void* context);
} ncclTuner_v5_t;

typedef struct {
  const char* name;
  ncclResult_t (*init)(size_t nRanks, size_t nNodes, ncclDebugLogger_t logFunction, void** context);
  ncclResult_t (*getCollInfo)(void* context, ncclFunc_t collType, size_t nBytes, int numPipeOps,
                              float** collCostTable, int numAlgo, int numProto, int regBuff,
                              int* nChannels);
  ncclResult_t (*destroy)(void* context);
} ncclTuner_v4_t;

typedef struct {
  const char* name;
  ncclResult_t (*init)(size_t nRanks, size_t nNodes, ncclDebugLogger_t logFunction, void** context);
  ncclResult_t (*getCollInfo)(void* context, ncclFunc_t collType, size_t nBytes, int numPipeOps,
                              float** collCostTable, int numAlgo, int numProto, int* nChannels);
  ncclResult_t (*destroy)(void* context);
} ncclTuner_v3_t;

typedef struct {
  const char* name;
  ncclResult_t (*init)(size_t nRanks, size_t nNodes, ncclDebugLogger_t logFunction, void** context);
  ncclResult_t (*getCollInfo)(void* context, ncclFunc_t collType, size_t nBytes, int collNetSupport,
                              int nvlsSupport, int numPipeOps, int* algorithm, int* protocol,
                              int* nChannels);
  ncclResult_t (*destroy)(void* context);
} ncclTuner_v2_t;

NF_ABI_SIZE(ncclNvlDomainInfo_v5_t, 12);
NF_ABI_ALIGN(ncclNvlDomainInfo_v5_t, 4);
NF_ABI_OFFSET(ncclNvlDomainInfo_v5_t, maxRanksPerNvlDomain, 8);

NF_ABI_SIZE(ncclTunerConstants_v5_t, 1152);
NF_ABI_ALIGN(ncclTunerConstants_v5_t, 8);
NF_ABI_OFFSET(ncclTunerConstants_v5_t, baseLatencies, 0);
NF_ABI_OFFSET(ncclTunerConstants_v5_t, hwLatencies, 168);
NF_ABI_OFFSET(ncclTunerConstants_v5_t, llMaxBws, 672);
NF_ABI_OFFSET(ncclTunerConstants_v5_t, perChMaxRingLL128Bws, 768);
NF_ABI_OFFSET(ncclTunerConstants_v5_t, perChMaxTreeLL128Bws, 864);
NF_ABI_OFFSET(ncclTunerConstants_v5_t, perChMaxTreeBws, 960);
NF_ABI_OFFSET(ncclTunerConstants_v5_t, perChMaxNVLSTreeBws, 1056);

NF_ABI_SIZE(ncclTuner_v6_t, 40);
NF_ABI_ALIGN(ncclTuner_v6_t, 8);
NF_ABI_OFFSET(ncclTuner_v6_t, getCollInfo, 16);
NF_ABI_OFFSET(ncclTuner_v6_t, finalize, 24);
NF_ABI_OFFSET(ncclTuner_v6_t, getChunkSize, 32);
NF_ABI_SIZE(ncclTuner_v5_t, 32);
NF_ABI_ALIGN(ncclTuner_v5_t, 8);
NF_ABI_OFFSET(ncclTuner_v5_t, finalize, 24);
NF_ABI_SIZE(ncclTuner_v4_t, 32);
NF_ABI_OFFSET(ncclTuner_v4_t, destroy, 24);
NF_ABI_SIZE(ncclTuner_v3_t, 32);
NF_ABI_OFFSET(ncclTuner_v3_t, destroy, 24);
NF_ABI_SIZE(ncclTuner_v2_t, 32);
NF_ABI_OFFSET(ncclTuner_v2_t, getCollInfo, 16);

#endif /* NCCL_FABRIC_NCCL_TUNER_H */

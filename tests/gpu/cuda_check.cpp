// The plugin's CUDA layer (src/mem) against a real driver, or the fake one in CI:
//   nccl-fabric-cudacheck [--cuda-lib PATH]
// Loads the driver as the plugin does, classifies device, managed and host memory, checks that a
// freed allocation's address never carries its old buffer id, exports a DMA-BUF, and runs the
// plugin's GPUDirect probe on the mock EFA provider (FI_PROVIDER_PATH must reach it), which
// registers a real device allocation with FI_HMEM_CUDA. Exit 0 pass, 1 fail, 77 no GPU.
#include <dlfcn.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "fabric/fabric.h"
#include "mem/cuda.h"
#include "mem/gdr.h"
#include "util/params.h"

namespace {

int failures = 0;

void check(bool ok, const char* what) {
  printf("%s: %s\n", ok ? "ok  " : "FAIL", what);
  if (!ok) ++failures;
}

}  // namespace

int main(int argc, char** argv) {
  std::string lib = "libcuda.so.1";
  for (int i = 1; i < argc; ++i) {
    if (strcmp(argv[i], "--cuda-lib") == 0 && i + 1 < argc)
      lib = argv[++i];
    else {
      fprintf(stderr, "usage: %s [--cuda-lib PATH]\n", argv[0]);
      return 2;
    }
  }
  // NCCL makes a context current before it calls the plugin: do the same.
  void* h = dlopen(lib.c_str(), RTLD_NOW);
  if (h == nullptr) {
    printf("SKIP: no CUDA driver (%s)\n", dlerror());
    return 77;
  }
  using namespace nf;
  auto init = reinterpret_cast<cu::InitFn>(dlsym(h, "cuInit"));
  auto retain =
      reinterpret_cast<cu::DevicePrimaryCtxRetainFn>(dlsym(h, "cuDevicePrimaryCtxRetain"));
  auto set_current = reinterpret_cast<cu::CtxSetCurrentFn>(dlsym(h, "cuCtxSetCurrent"));
  auto managed = reinterpret_cast<cu::Result (*)(cu::DevicePtr*, size_t, unsigned)>(
      dlsym(h, "cuMemAllocManaged"));
  cu::Context ctx = nullptr;
  if (!init || !retain || !set_current || init(0) != cu::kSuccess ||
      retain(&ctx, 0) != cu::kSuccess || set_current(ctx) != cu::kSuccess) {
    printf("SKIP: no usable CUDA device through %s\n", lib.c_str());
    return 77;
  }

  Cuda& cuda = Cuda::get(lib);
  printf("# %s\n", cuda.why().c_str());
  check(cuda.available(), "the plugin loads the driver");
  if (!cuda.available()) return 1;
  check(cuda.has_current_context(), "a context is current");

  const size_t kBytes = 8u << 20;
  uintptr_t a = 0;
  std::string why;
  check(ok(cuda.alloc(kBytes, &a, &why)), ("cuMemAlloc through the plugin " + why).c_str());
  PtrInfo pi;
  check(ok(cuda.classify(reinterpret_cast<void*>(a + 100), &pi)), "classify a device pointer");
  check(pi.kind == MemKind::kCudaDevice, "... is CUDA device memory");
  check(pi.device == 0, "... of device 0");
  check(pi.buffer_id != 0, "... with a buffer id");
  check(pi.alloc_base <= a && a + kBytes <= pi.alloc_base + pi.alloc_size,
        "... and its allocation's range");
  std::vector<char> host(4096);
  PtrInfo hi;
  check(ok(cuda.classify(host.data(), &hi)) && hi.kind == MemKind::kHost, "malloc memory is host");
  if (managed != nullptr) {
    cu::DevicePtr m = 0;
    if (managed(&m, 1 << 20, 1) == cu::kSuccess) {
      PtrInfo mi;
      check(ok(cuda.classify(reinterpret_cast<void*>(m), &mi)) && mi.kind == MemKind::kCudaManaged,
            "cuMemAllocManaged memory is managed");
      cuda.free(static_cast<uintptr_t>(m));
    }
  }
  // Round trip through the device, so the memory is real.
  std::vector<unsigned char> in(4096), out(4096);
  for (size_t i = 0; i < in.size(); ++i) in[i] = static_cast<unsigned char>(i * 7 + 1);
  check(ok(cuda.copy_to_device(a, in.data(), in.size())) &&
            ok(cuda.copy_to_host(out.data(), a, out.size())) && in == out,
        "host -> device -> host copy");
  // Freed and allocated again: the same address must not keep the old id.
  const uint64_t old_id = pi.buffer_id;
  cuda.free(a);
  uintptr_t b = 0;
  check(ok(cuda.alloc(kBytes, &b, &why)), "allocate again");
  PtrInfo pb;
  cuda.classify(reinterpret_cast<void*>(b), &pb);
  printf("# reallocation at %s address; buffer id %llu -> %llu\n", b == a ? "the same" : "another",
         static_cast<unsigned long long>(old_id), static_cast<unsigned long long>(pb.buffer_id));
  check(pb.buffer_id != old_id, "a new allocation has a new buffer id");
  int fd = -1;
  const int dmabuf_attr = cuda.device_attribute(pb.device, cu::kDevAttrDmaBufSupported);
  printf("# CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED = %d\n", dmabuf_attr);
  if (dmabuf_attr == 1) {
    const bool got = ok(cuda.dmabuf_fd(b, kBytes, &fd, &why));
    check(got && fd >= 0, ("export a DMA-BUF fd " + why).c_str());
    if (fd >= 0) close(fd);
  }
  cuda.free(b);

  // The GPUDirect probe, on the mock EFA provider, with real device memory.
  std::vector<Nic> nics;
  std::string report;
  if (ok(discover_nics("mockefa", "", true, &nics, &report)) && !nics.empty()) {
    // As NCCL_FABRIC_TEST_ASSUME_DMABUF makes the plugin do: the mock, like EFA, takes
    // FI_MR_DMABUF only on a fabric opened at API 1.20 or later.
    if (nics[0].api_version < FI_VERSION(1, 20)) {
      nics[0].api_version = FI_VERSION(1, 20);
      nics[0].info->fabric_attr->api_version = FI_VERSION(1, 20);
    }
    std::shared_ptr<Domain> dom;
    check(ok(Domain::open(nics[0], &dom)), "open the mock domain");
    Params p;
    p.set(ParamId::kCudaLibrary, lib.c_str());
    p.set(ParamId::kTestAssumeDmabuf, "1");
    GdrReport r = probe_gdr(nics[0], *dom, p);
    printf("# probe: cuda=%d (%s)\n# probe: dmabuf=%d (%s)\n", r.cuda, r.cuda_reason.c_str(),
           r.dmabuf, r.dmabuf_reason.c_str());
    check(r.cuda, "the GPUDirect probe registers real GPU memory (mock provider)");
    if (dmabuf_attr == 1) check(r.dmabuf, "... and through a DMA-BUF");
  } else {
    printf("# mock provider not found (%s): probe skipped\n", report.c_str());
  }
  printf("%s\n", failures == 0 ? "PASS" : "FAIL");
  return failures == 0 ? 0 : 1;
}

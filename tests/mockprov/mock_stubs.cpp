// Ops tables the mock does not implement (atomics, collectives). libfabric's inline wrappers
// jump through these without checking, so every slot holds a correctly typed -FI_ENOSYS stub.
#include "mock_internal.h"

namespace mockefa {

fi_ops_atomic g_atomic_ops;
fi_ops_collective g_collective_ops;

namespace {

template <typename F>
struct Stub;
template <typename R, typename... A>
struct Stub<R (*)(A...)> {
  static R fn(A...) { return static_cast<R>(-FI_ENOSYS); }
};

template <typename F>
void stub(F* slot) {
  *slot = &Stub<F>::fn;
}

}  // namespace

void init_stub_ops() {
  fi_ops_atomic& a = g_atomic_ops;
  a.size = sizeof(fi_ops_atomic);
  stub(&a.write);
  stub(&a.writev);
  stub(&a.writemsg);
  stub(&a.inject);
  stub(&a.readwrite);
  stub(&a.readwritev);
  stub(&a.readwritemsg);
  stub(&a.compwrite);
  stub(&a.compwritev);
  stub(&a.compwritemsg);
  stub(&a.writevalid);
  stub(&a.readwritevalid);
  stub(&a.compwritevalid);
  fi_ops_collective& c = g_collective_ops;
  c.size = sizeof(fi_ops_collective);
  stub(&c.barrier);
  stub(&c.broadcast);
  stub(&c.alltoall);
  stub(&c.allreduce);
  stub(&c.allgather);
  stub(&c.reduce_scatter);
  stub(&c.reduce);
  stub(&c.scatter);
  stub(&c.gather);
  stub(&c.msg);
  stub(&c.barrier2);
}

}  // namespace mockefa

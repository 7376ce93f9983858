// nccl-fabric-tune: placeholder until the subcommands land (issue 9).
#include <cstdio>
int main() {
  std::fprintf(stderr, "nccl-fabric-tune: not built yet\n");
  return 2;
}

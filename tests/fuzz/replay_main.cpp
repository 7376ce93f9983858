// The fuzz targets without libFuzzer (make check, tests/fuzz/README.md): every file of
// corpus/<name>/ and regress/<name>/ runs through target <name>, so the seeds and every input that
// once crashed a decoder are checked by each build, the sanitizer builds included.
//
//   fuzz_replay                  every target over NF_FUZZ_DIR (or the directory built in)
//   fuzz_replay -d DIR           the same over DIR (holding corpus/ and regress/)
//   fuzz_replay NAME FILE...     the given files through target NAME (to debug one input)
//
// Fails when a target has no corpus or regression directory, or an empty one, or a directory
// names no target.
#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "fuzz.h"

#ifndef NF_FUZZ_DIR
#define NF_FUZZ_DIR "tests/fuzz"
#endif

namespace fs = std::filesystem;

namespace {

struct Entry {
  std::string name;
  nf_fuzz::Target fn;
};

std::vector<Entry>& registry() {
  static std::vector<Entry> targets;
  return targets;
}

const Entry* find_target(const std::string& name) {
  for (const Entry& e : registry())
    if (e.name == name) return &e;
  return nullptr;
}

bool read_file(const std::string& path, std::vector<uint8_t>* out) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return false;
  out->assign(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
  return !f.bad();
}

// Runs one input; false when it cannot be read (a crash does not come back).
bool run_one(const Entry& t, const std::string& path) {
  std::vector<uint8_t> data;
  if (!read_file(path, &data)) {
    fprintf(stderr, "fuzz_replay: cannot read %s: %s\n", path.c_str(), strerror(errno));
    return false;
  }
  printf("run %s %s (%zu bytes)\n", t.name.c_str(), path.c_str(), data.size());
  fflush(stdout);
  nf_fuzz::current_input() = path.c_str();
  // An empty vector's data() may be null; the targets take a pointer they may copy from.
  static const uint8_t kNone = 0;
  t.fn(data.empty() ? &kNone : data.data(), data.size());
  nf_fuzz::current_input() = nullptr;
  return true;
}

// Every regular file of dir/name, sorted; false (saying why) when there is none.
bool list_inputs(const fs::path& dir, std::vector<std::string>* out) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) {
    fprintf(stderr, "fuzz_replay: %s is missing: every target needs one (README.md)\n",
            dir.c_str());
    return false;
  }
  for (const fs::directory_entry& e : fs::directory_iterator(dir, ec))
    if (e.is_regular_file()) out->push_back(e.path().string());
  if (ec) {
    fprintf(stderr, "fuzz_replay: cannot list %s: %s\n", dir.c_str(), ec.message().c_str());
    return false;
  }
  if (out->empty()) {
    fprintf(stderr, "fuzz_replay: %s is empty: every target needs at least one input\n",
            dir.c_str());
    return false;
  }
  std::sort(out->begin(), out->end());
  return true;
}

// Every subdirectory of dir names a target.
bool no_stray_dirs(const fs::path& dir) {
  bool good = true;
  std::error_code ec;
  for (const fs::directory_entry& e : fs::directory_iterator(dir, ec)) {
    if (e.is_directory() && find_target(e.path().filename().string()) == nullptr) {
      fprintf(stderr, "fuzz_replay: %s names no fuzz target\n", e.path().c_str());
      good = false;
    }
  }
  return good && !ec;
}

int replay_all(const fs::path& top) {
  int failed = 0;
  size_t total = 0;
  for (const char* kind : {"corpus", "regress"}) {
    if (!no_stray_dirs(top / kind)) ++failed;
  }
  for (const Entry& t : registry()) {
    for (const char* kind : {"corpus", "regress"}) {
      std::vector<std::string> files;
      if (!list_inputs(top / kind / t.name, &files)) {
        ++failed;
        continue;
      }
      for (const std::string& f : files) {
        if (!run_one(t, f)) ++failed;
      }
      total += files.size();
    }
  }
  printf("fuzz_replay: %zu targets, %zu inputs from %s, %d problem(s)\n", registry().size(), total,
         top.c_str(), failed);
  return failed == 0 ? 0 : 1;
}

}  // namespace

nf_fuzz::Registration::Registration(const char* name, Target fn) {
  registry().push_back({name, fn});
  std::sort(registry().begin(), registry().end(),
            [](const Entry& a, const Entry& b) { return a.name < b.name; });
}

int main(int argc, char** argv) {
  if (registry().empty()) {
    fprintf(stderr, "fuzz_replay: no target linked in\n");
    return 1;
  }
  if (argc == 1) {
    const char* env = getenv("NF_FUZZ_DIR");
    return replay_all(env != nullptr && *env != '\0' ? env : NF_FUZZ_DIR);
  }
  if (argc == 3 && strcmp(argv[1], "-d") == 0) return replay_all(argv[2]);
  const Entry* t = find_target(argv[1]);
  if (t == nullptr || argc < 3) {
    fprintf(stderr, "usage: %s [-d DIR | NAME FILE...]; targets:", argv[0]);
    for (const Entry& e : registry()) fprintf(stderr, " %s", e.name.c_str());
    fprintf(stderr, "\n");
    return 2;
  }
  for (int i = 2; i < argc; ++i) {
    if (!run_one(*t, argv[i])) return 1;
  }
  return 0;
}

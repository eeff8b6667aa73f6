#include "oobleck/executor/blas_kernels.h"

#include <dlfcn.h>
#include <unistd.h>

#include <strings.h>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <set>
#include <sstream>
#include <string>

namespace oobleck::executor {
namespace {

bool has_flags(const std::string& flags, std::initializer_list<const char*> wanted) {
  std::set<std::string> present;
  std::istringstream words(flags);
  for (std::string word; words >> word;) present.insert(word);
  for (const char* flag : wanted) {
    if (present.count(flag) == 0) return false;
  }
  return true;
}

}  // namespace

const char* best_blas_core_type() {
  std::ifstream cpuinfo("/proc/cpuinfo");
  std::string line;
  while (std::getline(cpuinfo, line)) {
    if (line.rfind("flags", 0) != 0) continue;
    const auto colon = line.find(':');
    if (colon == std::string::npos) break;
    const std::string flags = line.substr(colon + 1);
    if (has_flags(flags, {"avx512f", "avx512bw", "avx512dq", "avx512vl"})) return "SkylakeX";
    if (has_flags(flags, {"avx2", "fma"})) return "Haswell";
    break;
  }
  return "";
}

void use_best_blas_kernels(char** argv) {
  if (std::getenv("OPENBLAS_CORETYPE") != nullptr) return;
  // OpenBLAS says which kernels it loaded; another BLAS has no such call.
  using CoreName = char* (*)();
  const auto core_name = reinterpret_cast<CoreName>(dlsym(RTLD_DEFAULT, "openblas_get_corename"));
  if (core_name == nullptr) return;
  const char* best = best_blas_core_type();
  const char* loaded = core_name();
  if (*best == '\0' || loaded == nullptr || strcasecmp(loaded, best) == 0) return;
  // Only the fallbacks are replaced: a core OpenBLAS recognised is its own
  // better judgement (a newer CPU than "best" names, say).
  if (strcasecmp(loaded, "prescott") != 0 && strcasecmp(loaded, "core2") != 0 && strcasecmp(loaded, "nehalem") != 0 &&
      strcasecmp(loaded, "sandybridge") != 0) {
    return;
  }
  setenv("OPENBLAS_CORETYPE", best, 1);
  std::fflush(nullptr);
  execv("/proc/self/exe", argv);
  // Could not run again: go on with the kernels loaded (slower, not wrong),
  // and say so, since the setting is now inherited by child processes.
  unsetenv("OPENBLAS_CORETYPE");
  std::fprintf(stderr, "warning: could not restart with OPENBLAS_CORETYPE=%s; OpenBLAS stays on its %s kernels\n", best,
               loaded);
}

}  // namespace oobleck::executor

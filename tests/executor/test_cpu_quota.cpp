// A node's CPU quota (live/cpu_quota.h): the kernel's own files say what
// the group holds and allows. Root only (cgroups): skipped elsewhere.
#include <doctest/doctest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <string>

#include "live/cpu_quota.h"
#include "oobleck/common/files.h"
#include "skip.h"

extern char** environ;

namespace oobleck::executor {
namespace {

bool exists(const std::string& path) {
  struct stat s {};
  return ::stat(path.c_str(), &s) == 0;
}

// The group's folder and its quota in microseconds per period.
std::string group_folder(const std::string& name) {
  return exists("/sys/fs/cgroup/cpu/cpu.cfs_quota_us") ? "/sys/fs/cgroup/cpu/" + name : "/sys/fs/cgroup/" + name;
}
long quota_of(const std::string& folder) {
  if (exists(folder + "/cpu.cfs_quota_us")) return std::stol(read_text_file(folder + "/cpu.cfs_quota_us"));
  return std::stol(read_text_file(folder + "/cpu.max"));  // "quota period"
}

pid_t spawn_sleep() {
  const char* argv[] = {"sleep", "60", nullptr};
  pid_t pid = 0;
  REQUIRE(posix_spawnp(&pid, "sleep", nullptr, nullptr, const_cast<char* const*>(argv), environ) == 0);
  return pid;
}

void end(pid_t pid) {
  ::kill(pid, SIGKILL);
  ::waitpid(pid, nullptr, 0);
}

}  // namespace

TEST_CASE("cpu quota: the group holds this process and its children, scales, and is removed") {
  if (const auto why = CpuQuota::unavailable_reason(); !why.empty()) OOBLECK_SKIP("no CPU quota here: " << why);
  const std::string name = cpu_group_name(static_cast<int>(::getpid()), "test-node");
  const std::string folder = group_folder(name);
  pid_t child = 0;
  {
    // Generous enough not to slow the tests that follow while it holds.
    CpuQuota quota(name, 64);
    REQUIRE(exists(folder));
    CHECK(quota_of(folder) == 640000);  // 64 cores of a 10 ms period
    child = spawn_sleep();
    const std::string procs = read_text_file(folder + "/cgroup.procs");
    CHECK(procs.find(std::to_string(::getpid())) != std::string::npos);
    CHECK(procs.find(std::to_string(child)) != std::string::npos);  // inherited
    quota.scale(0.25);
    CHECK(quota_of(folder) == 160000);
    quota.scale(1);
    CHECK(quota_of(folder) == 640000);
    end(child);
  }
  CHECK_FALSE(exists(folder));
  CHECK(read_text_file("/proc/self/cgroup").find(name) == std::string::npos);
}

TEST_CASE("cpu quota: a group left by a killed owner is removed once its processes are gone") {
  if (const auto why = CpuQuota::unavailable_reason(); !why.empty()) OOBLECK_SKIP("no CPU quota here: " << why);
  // An owner pid no process has (above the kernel's pid_max of 2^22).
  const int owner = 5000000;
  const std::string folder = group_folder(cpu_group_name(owner, "left"));
  pid_t child = 0;
  {
    CpuQuota quota(cpu_group_name(owner, "left"), 64);
    child = spawn_sleep();
  }
  CHECK(exists(folder));  // the child still in it
  end(child);
  CpuQuota::remove_groups(cpu_group_prefix(owner));
  CHECK_FALSE(exists(folder));
}

}  // namespace oobleck::executor

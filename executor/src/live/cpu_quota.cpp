#include "cpu_quota.h"

#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <vector>

namespace oobleck::executor {
namespace {

constexpr long kPeriodUs = 10000;
constexpr long kLeastQuotaUs = 1000;  // the kernel's floor

struct Hierarchy {
  std::string root;  // "" when none
  bool v2 = false;
};

bool exists(const std::string& path) {
  struct stat s {};
  return ::stat(path.c_str(), &s) == 0;
}

std::string read_all(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

void write_file(const std::string& path, const std::string& text) {
  std::ofstream out(path);
  out << text;
  out.flush();
  if (!out) throw std::runtime_error("cannot write " + text + " to " + path + ": " + std::strerror(errno));
}

// cgroup v1's cpu controller where it is mounted on its own, else the
// unified (v2) hierarchy where it offers the cpu controller.
Hierarchy find_hierarchy() {
  if (exists("/sys/fs/cgroup/cpu/cpu.cfs_quota_us")) return {"/sys/fs/cgroup/cpu", false};
  const std::string controllers = read_all("/sys/fs/cgroup/cgroup.controllers");
  std::istringstream words(controllers);
  for (std::string w; words >> w;) {
    if (w == "cpu") return {"/sys/fs/cgroup", true};
  }
  return {};
}

long quota_us(double cores) { return std::max(kLeastQuotaUs, std::lround(cores * kPeriodUs)); }

void set_quota(const std::string& group, bool v2, long quota) {
  if (v2) {
    write_file(group + "/cpu.max", std::to_string(quota) + " " + std::to_string(kPeriodUs));
  } else {
    write_file(group + "/cpu.cfs_period_us", std::to_string(kPeriodUs));
    write_file(group + "/cpu.cfs_quota_us", std::to_string(quota));
  }
}

}  // namespace

std::string cpu_group_prefix(int owner_pid) { return "oobleck-" + std::to_string(owner_pid) + "-"; }
std::string cpu_group_name(int owner_pid, const std::string& node) { return cpu_group_prefix(owner_pid) + node; }

std::string CpuQuota::unavailable_reason() {
  const Hierarchy h = find_hierarchy();
  if (h.root.empty()) return "no cgroup cpu controller is mounted (/sys/fs/cgroup/cpu or cgroup v2's cpu)";
  if (::access(h.root.c_str(), W_OK) != 0) return h.root + " is not writable (run as root)";
  return "";
}

CpuQuota::CpuQuota(std::string name, double cores) : cores_(cores) {
  const Hierarchy h = find_hierarchy();
  if (h.root.empty()) throw std::runtime_error(unavailable_reason());
  v2_ = h.v2;
  if (h.v2 && read_all(h.root + "/cgroup.subtree_control").find("cpu") == std::string::npos) {
    write_file(h.root + "/cgroup.subtree_control", "+cpu");
  }
  group_ = h.root + "/" + name;
  if (::mkdir(group_.c_str(), 0755) != 0 && errno != EEXIST) {
    throw std::runtime_error("cannot create " + group_ + ": " + std::strerror(errno));
  }
  set_quota(group_, h.v2, quota_us(cores_));
  write_file(group_ + "/cgroup.procs", std::to_string(::getpid()));
}

CpuQuota::~CpuQuota() {
  const std::string root = group_.substr(0, group_.rfind('/'));
  try {
    write_file(root + "/cgroup.procs", std::to_string(::getpid()));
  } catch (const std::exception&) {
  }
  ::rmdir(group_.c_str());  // fails while workers are still in it: remove_groups() then
}

void CpuQuota::scale(double factor) {
  set_quota(group_, v2_, quota_us(cores_ * factor));
}

void CpuQuota::remove_groups(const std::string& prefix) {
  const Hierarchy h = find_hierarchy();
  if (h.root.empty()) return;
  DIR* dir = ::opendir(h.root.c_str());
  if (dir == nullptr) return;
  std::vector<std::string> names;
  while (const dirent* entry = ::readdir(dir)) {
    const std::string name = entry->d_name;
    if (name.rfind(prefix, 0) == 0) names.push_back(name);
  }
  ::closedir(dir);
  // Workers die with their agent, but not in the same instant: a group
  // stays busy until its last process is gone (waited for up to 2 s).
  for (const auto& name : names) {
    const std::string group = h.root + "/" + name;
    for (int attempt = 0; attempt < 100 && ::rmdir(group.c_str()) != 0 && errno == EBUSY; ++attempt) ::usleep(20000);
  }
}

}  // namespace oobleck::executor

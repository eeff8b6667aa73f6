// A node's share of a shared machine's CPU. Nodes emulated on one machine
// (every agent local) otherwise take CPU from each other: a node that
// slows down or leaves frees cores that its peers then use, which real
// machines cannot, and the cost model, which prices each node's own
// hardware, no longer describes the run. With a quota each node gets at
// most `cores` cores, as a machine of its own would, whatever the others do.
//
// The quota is a cgroup's (v1's cpu controller, cpu.cfs_quota_us, or v2's
// cpu.max) named oobleck-<owner>-<node>; the agent moves itself in before
// it starts its workers, which inherit it, restarted ones too. A 10 ms
// period keeps the throttling finer than a microbatch. Needs root (or a
// delegated cgroup); where neither exists, unavailable_reason() says why.
#pragma once

#include <string>

namespace oobleck::executor {

// The group of `node`'s agent started by the process `owner_pid` (the
// master), and the prefix of all of that owner's.
[[nodiscard]] std::string cpu_group_name(int owner_pid, const std::string& node);
[[nodiscard]] std::string cpu_group_prefix(int owner_pid);

class CpuQuota {
 public:
  // "" when a quota can be set on this machine, else what is missing.
  [[nodiscard]] static std::string unavailable_reason();
  // Creates (or reuses) the group `name`, gives it `cores` cores and moves
  // this process into it. Throws std::runtime_error naming the file that
  // could not be written.
  CpuQuota(std::string name, double cores);
  // Moves this process back to the root group and removes its own.
  ~CpuQuota();
  CpuQuota(const CpuQuota&) = delete;
  CpuQuota& operator=(const CpuQuota&) = delete;

  // The quota becomes factor x cores (a node slowed on purpose; 1: back).
  void scale(double factor);
  // Removes the empty groups whose names start with `prefix`: those of
  // agents killed before they could remove their own.
  static void remove_groups(const std::string& prefix);

 private:
  std::string group_;  // its folder
  double cores_;
  bool v2_ = false;  // cgroup v2's cpu.max, else v1's cpu.cfs_quota_us
};

}  // namespace oobleck::executor

// Slurm's compact host lists (SLURM_JOB_NODELIST) expanded.
#include <doctest/doctest.h>

#include "oobleck/common.h"
#include "oobleck/common/host_list.h"

namespace {

using oobleck::expand_host_list;
using Names = std::vector<std::string>;

TEST_CASE("host list: names, ranges with their widths, and groups that multiply out") {
  CHECK(expand_host_list("login", "x") == Names{"login"});
  CHECK(expand_host_list("node[0-3]", "x") == Names{"node0", "node1", "node2", "node3"});
  CHECK(expand_host_list("gpu[08-11,7],login", "x") == Names{"gpu08", "gpu09", "gpu10", "gpu11", "gpu7", "login"});
  CHECK(expand_host_list("r[1-2]n[1-2].ib", "x") == Names{"r1n1.ib", "r1n2.ib", "r2n1.ib", "r2n2.ib"});
  CHECK(expand_host_list("a[1-2],a1,b", "x") == Names{"a1", "a2", "b"});  // each once, first place kept
  CHECK(expand_host_list("n[9-11]", "x") == Names{"n9", "n10", "n11"});
}

TEST_CASE("host list: malformed lists are refused with where and what") {
  const auto refused = [](const char* list) {
    try {
      (void)expand_host_list(list, "SLURM_JOB_NODELIST", 1000);
    } catch (const oobleck::InputError& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  CHECK(refused("node[1-3").find("'[' without its ']'") != std::string::npos);
  CHECK(refused("node1-3]").find("']' without its '['") != std::string::npos);
  CHECK(refused("node[[1]]").find("brackets within brackets") != std::string::npos);
  CHECK(refused("node[3-1]").find("backwards") != std::string::npos);
  CHECK(refused("node[a-b]").find("expected a number") != std::string::npos);
  CHECK(refused("node[]").find("expected a number") != std::string::npos);
  CHECK(refused("a,,b").find("empty name") != std::string::npos);
  CHECK(refused("").find("empty name") != std::string::npos);
  CHECK(refused("n[0-999999999999]").find("more hosts than 1000") != std::string::npos);
  CHECK(refused("n[0-99]m[0-99]").find("more hosts than 1000") != std::string::npos);
  CHECK(refused("node[1-3").rfind("SLURM_JOB_NODELIST: ", 0) == 0);
  std::string long_name = "x[0-9]";
  for (int i = 0; i < 300; ++i) long_name += "[0]";
  CHECK(refused(long_name.c_str()).find("longer than 255") != std::string::npos);
  CHECK(refused(std::string(300, 'n').c_str()).find("longer than 255") != std::string::npos);
}

}  // namespace

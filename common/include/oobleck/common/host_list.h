// Slurm's compact host lists, as in SLURM_JOB_NODELIST: "gpu[01-03,7],login"
// names gpu01, gpu02, gpu03, gpu7 and login. Several bracket groups in one
// name multiply out ("r[1-2]n[1-2]": r1n1, r1n2, r2n1, r2n2), and a range's
// width is its first bound's ("[08-10]": 08, 09, 10).
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace oobleck {

// The names of `list`, in order, each once. Throws InputError naming
// `origin` for a malformed list (unbalanced or nested brackets, a range
// running backwards, an empty name, a name over 255 characters) or one of
// more than `max_hosts` names.
[[nodiscard]] std::vector<std::string> expand_host_list(std::string_view list, const std::string& origin,
                                                        std::size_t max_hosts = 1 << 20);

}  // namespace oobleck

#include "checkpoint_manifest.h"

#include <limits>

#include "oobleck/common/json_input.h"

namespace oobleck::executor {

CheckpointManifest parse_checkpoint_manifest(std::string_view text, const std::string& origin) {
  using namespace json_input;
  const json root = parse(text, origin);
  const FieldPath where(origin);
  require_format(root, "oobleck.checkpoint.v1", where);
  CheckpointManifest m;
  m.step = static_cast<int>(require_integer(root, "step", where, 0, kMaxCheckpointStep));
  m.folder = require_string(root, "folder", where);
  if (m.folder != "step-" + std::to_string(m.step)) {
    throw (where / "folder").error("expected \"step-" + std::to_string(m.step) + "\" (the step's own folder), got " +
                                   describe(root.at("folder")));
  }
  m.layers = static_cast<int>(require_integer(root, "layers", where, 1, std::numeric_limits<int>::max()));
  const json& seed = require(root, "seed", where);
  if (!seed.is_number_unsigned()) throw (where / "seed").error("expected a whole number from 0, got " + describe(seed));
  m.seed = seed.get<std::uint64_t>();
  return m;
}

}  // namespace oobleck::executor

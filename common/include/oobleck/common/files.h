// Files in and out. Outputs are written whole or not at all: to a temporary
// file beside the target, flushed to the disk, then renamed, and the folder
// synced, so a reader never sees half a file and after a crash the name holds
// the old file or the new one.
#pragma once

#include <filesystem>
#include <string>
#include <string_view>

namespace oobleck {

// The whole file; a failure's message names the path (InputError).
[[nodiscard]] std::string read_text_file(const std::filesystem::path& path);

// Atomic and durable; throws InputError naming `path` when it cannot.
// `mode`: the new file's permissions (before the umask). Through a symbolic
// link the file it points at is replaced, the link kept; a device, pipe or
// socket (/dev/null, /dev/stdout) is written in place, never replaced.
void write_file_atomically(const std::filesystem::path& path, std::string_view bytes, unsigned mode = 0644);

// Flushes a folder's entries (new names, renames) to the disk; best effort.
void sync_folder(const std::filesystem::path& folder);

// A folder and everything in it, best effort. Not std::filesystem::remove_all:
// a pip libtorch exports its own build of it, which crashes when called from
// code compiled against another libstdc++.
void remove_tree(const std::filesystem::path& folder);

// An output named by `flag` must be writable before any work starts: its
// folder exists and it is not itself a folder. Empty and "-" (stdout) pass.
void require_output_path(std::string_view flag, const std::string& path);

}  // namespace oobleck

// Atomic file writes for checkpoints and safetensors: the bytes go to
// <path>.tmp, which is flushed, fsynced and renamed over <path>, and the
// directory is fsynced; a crash mid-write leaves the previous file intact.
#pragma once

#include <cstdio>
#include <functional>
#include <string>

namespace ember::nn {

// Throws ember::Error ("<op>: <kind> path '<path>' is a directory; ...") when
// `path` is a directory, suggesting the file `example` inside it.
void check_not_directory(const char* op, const char* kind, const std::string& path,
                         const char* example);

// Writes `path` atomically: `write` puts the bytes into the open temporary file
// and returns false when a write failed (errno says why). Any failure, or an
// exception from `write`, removes the temporary file and throws ember::Error
// prefixed `op`.
void write_file_atomically(const std::string& path, const char* op,
                           const std::function<bool(std::FILE*)>& write);

}  // namespace ember::nn

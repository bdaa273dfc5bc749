// blutrain/files.h: whole-file reads and atomic writes. An atomic write goes to a temp file in the
// same directory, is flushed with fsync and renamed over the target, so a reader (or a resumed
// run) sees either the old complete file or the new complete file, never a partial one.
#pragma once

#include <string>
#include <string_view>

#include "blutensor/json.h"

namespace blu::train {

// The file's bytes; throws blu::Error naming `what` and the path when it cannot be read.
std::string read_file(const std::string& path, std::string_view what);

// Writes `bytes` to `path` atomically (temp file + fsync + rename); creates parent directories.
void write_file_atomic(const std::string& path, std::string_view bytes);

bool file_exists(const std::string& path);

// blu::json::parse with `what` (e.g. the file name) prepended to any error.
json::Value parse_json(const std::string& text, std::string_view what);
// A member of a JSON object, or a blu::Error naming `what` and the key.
const json::Value& json_member(const json::Value& object, const std::string& key, std::string_view what);

}  // namespace blu::train

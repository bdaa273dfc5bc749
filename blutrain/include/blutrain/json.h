// blutrain/json.h: a small JSON reader and string quoting for the files blutrain reads and writes
// (GPT-2's encoder.json, safetensors headers, checkpoint metadata, config files). A document is
// parsed into a tree of Values; numbers keep their text so integers round-trip exactly.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace blu::train::json {

class Value {
 public:
  enum class Kind { kNull, kBool, kNumber, kString, kArray, kObject };

  Kind kind = Kind::kNull;
  bool boolean = false;
  std::string text;  // the string's value (decoded), or the number's literal text
  std::vector<Value> items;                            // kArray
  std::vector<std::pair<std::string, Value>> members;  // kObject, in document order

  bool is_null() const { return kind == Kind::kNull; }
  bool is_object() const { return kind == Kind::kObject; }
  bool is_array() const { return kind == Kind::kArray; }
  bool is_string() const { return kind == Kind::kString; }
  bool is_number() const { return kind == Kind::kNumber; }

  // Member lookup: nullptr when absent (or when this is not an object).
  const Value* find(std::string_view key) const;
  // Typed accessors: throw blu::Error naming `what` when the kind differs.
  const Value& at(std::string_view key, std::string_view what) const;
  int64_t as_int64(std::string_view what) const;
  double as_double(std::string_view what) const;
  const std::string& as_string(std::string_view what) const;
  bool as_bool(std::string_view what) const;
};

// Parses one JSON document; throws blu::Error("<what>: ... at byte N") on malformed input.
Value parse(std::string_view document, std::string_view what);

// A JSON string literal (with quotes) for arbitrary bytes: control characters and quotes escaped;
// bytes >= 0x80 are passed through (the caller gives UTF-8).
std::string quote(std::string_view s);

}  // namespace blu::train::json

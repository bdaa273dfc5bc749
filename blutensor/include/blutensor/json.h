// blutensor/json.h: a small JSON value and a strict parser/writer (RFC 8259: objects, arrays,
// strings with escapes and \u surrogates, numbers, true/false/null), used by the safetensors header
// and by tools. Parse errors throw blu::Error with the byte offset; nesting is limited (64).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace blu::json {

class Value {
 public:
  enum class Type { kNull, kBool, kNumber, kString, kArray, kObject };
  Value() = default;
  static Value null() { return Value(); }
  static Value boolean(bool b);
  static Value number(double d);
  static Value integer(int64_t i);
  static Value string(std::string s);
  static Value array(std::vector<Value> items = {});
  static Value object(std::map<std::string, Value> members = {});

  Type type() const { return type_; }
  bool is_null() const { return type_ == Type::kNull; }
  bool is_bool() const { return type_ == Type::kBool; }
  bool is_number() const { return type_ == Type::kNumber; }
  bool is_string() const { return type_ == Type::kString; }
  bool is_array() const { return type_ == Type::kArray; }
  bool is_object() const { return type_ == Type::kObject; }
  // A number that is an exact integer (written without fraction/exponent, within int64).
  bool is_integer() const { return type_ == Type::kNumber && is_integer_; }

  bool as_bool() const;
  double as_number() const;
  int64_t as_integer() const;  // throws unless is_integer()
  const std::string& as_string() const;
  const std::vector<Value>& as_array() const;
  const std::map<std::string, Value>& as_object() const;
  std::vector<Value>& mutable_array();
  std::map<std::string, Value>& mutable_object();
  // Object member or nullptr.
  const Value* find(const std::string& key) const;

  std::string dump() const;  // compact

 private:
  Type type_ = Type::kNull;
  bool bool_ = false;
  bool is_integer_ = false;
  double number_ = 0;
  int64_t integer_ = 0;
  std::string string_;
  std::shared_ptr<std::vector<Value>> array_;
  std::shared_ptr<std::map<std::string, Value>> object_;
  friend class Parser;
};

// Parses the whole text (trailing non-space is an error). Duplicate object keys are an error.
Value parse(const std::string& text);
std::string quote(const std::string& s);  // JSON string literal
// Appends the UTF-8 encoding of one code point (<= 0x10FFFF) to `out` (used by the \u escapes
// here and by blutrain's byte-level tokenizer).
void append_utf8(std::string& out, uint32_t code_point);

}  // namespace blu::json

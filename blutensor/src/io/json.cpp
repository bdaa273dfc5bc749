// A strict, small JSON parser and writer (json.h). Recursive descent with a depth limit; every
// error names the byte offset. Numbers keep an exact int64 when written as integers.
#include "blutensor/json.h"

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "blutensor/error.h"

namespace blu::json {

Value Value::boolean(bool b) { Value v; v.type_ = Type::kBool; v.bool_ = b; return v; }
Value Value::number(double d) {
  Value v;
  v.type_ = Type::kNumber;
  v.number_ = d;
  return v;
}
Value Value::integer(int64_t i) {
  Value v;
  v.type_ = Type::kNumber;
  v.number_ = static_cast<double>(i);
  v.integer_ = i;
  v.is_integer_ = true;
  return v;
}
Value Value::string(std::string s) { Value v; v.type_ = Type::kString; v.string_ = std::move(s); return v; }
Value Value::array(std::vector<Value> items) {
  Value v;
  v.type_ = Type::kArray;
  v.array_ = std::make_shared<std::vector<Value>>(std::move(items));
  return v;
}
Value Value::object(std::map<std::string, Value> members) {
  Value v;
  v.type_ = Type::kObject;
  v.object_ = std::make_shared<std::map<std::string, Value>>(std::move(members));
  return v;
}

bool Value::as_bool() const { BLU_CHECK(is_bool(), "json: value is not a boolean"); return bool_; }
double Value::as_number() const { BLU_CHECK(is_number(), "json: value is not a number"); return number_; }
int64_t Value::as_integer() const { BLU_CHECK(is_integer(), "json: value is not an integer"); return integer_; }
const std::string& Value::as_string() const { BLU_CHECK(is_string(), "json: value is not a string"); return string_; }
const std::vector<Value>& Value::as_array() const { BLU_CHECK(is_array(), "json: value is not an array"); return *array_; }
const std::map<std::string, Value>& Value::as_object() const {
  BLU_CHECK(is_object(), "json: value is not an object");
  return *object_;
}
std::vector<Value>& Value::mutable_array() { BLU_CHECK(is_array(), "json: value is not an array"); return *array_; }
std::map<std::string, Value>& Value::mutable_object() {
  BLU_CHECK(is_object(), "json: value is not an object");
  return *object_;
}
const Value* Value::find(const std::string& key) const {
  if (!is_object()) return nullptr;
  auto it = object_->find(key);
  return it == object_->end() ? nullptr : &it->second;
}

std::string quote(const std::string& s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof(buf), "\\u%04x", c);
          out += buf;
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  out.push_back('"');
  return out;
}

std::string Value::dump() const {
  switch (type_) {
    case Type::kNull: return "null";
    case Type::kBool: return bool_ ? "true" : "false";
    case Type::kNumber: {
      if (is_integer_) return std::to_string(integer_);
      if (!std::isfinite(number_)) return "null";
      char buf[32];
      std::snprintf(buf, sizeof(buf), "%.17g", number_);
      return buf;
    }
    case Type::kString: return quote(string_);
    case Type::kArray: {
      std::string out = "[";
      for (std::size_t i = 0; i < array_->size(); ++i) {
        if (i) out.push_back(',');
        out.append((*array_)[i].dump());
      }
      out.push_back(']');
      return out;
    }
    case Type::kObject: {
      std::string out = "{";
      bool first = true;
      for (const auto& [k, v] : *object_) {
        if (!first) out.push_back(',');
        out.append(quote(k));
        out.push_back(':');
        out.append(v.dump());
        first = false;
      }
      out.push_back('}');
      return out;
    }
  }
  return "null";
}

class Parser {
 public:
  explicit Parser(const std::string& text) : s_(text) {}

  Value parse_document() {
    Value v = parse_value(0);
    skip_ws();
    if (pos_ != s_.size()) fail("trailing characters after the JSON value");
    return v;
  }

 private:
  static constexpr int kMaxDepth = 64;

  [[noreturn]] void fail(const std::string& what) const {
    BLU_THROW("json: ", what, " at byte ", pos_);
  }
  void skip_ws() {
    while (pos_ < s_.size() && (s_[pos_] == ' ' || s_[pos_] == '\t' || s_[pos_] == '\n' || s_[pos_] == '\r')) ++pos_;
  }
  char peek() {
    if (pos_ >= s_.size()) fail("unexpected end of input");
    return s_[pos_];
  }
  void expect(const char* lit) {
    for (const char* p = lit; *p; ++p) {
      if (pos_ >= s_.size() || s_[pos_] != *p) fail(std::string("expected '") + lit + "'");
      ++pos_;
    }
  }

  Value parse_value(int depth) {
    if (depth > kMaxDepth) fail("nesting deeper than 64");
    skip_ws();
    char c = peek();
    if (c == '{') return parse_object(depth);
    if (c == '[') return parse_array(depth);
    if (c == '"') return Value::string(parse_string());
    if (c == 't') { expect("true"); return Value::boolean(true); }
    if (c == 'f') { expect("false"); return Value::boolean(false); }
    if (c == 'n') { expect("null"); return Value::null(); }
    if (c == '-' || (c >= '0' && c <= '9')) return parse_number();
    fail(std::string("unexpected character '") + c + "'");
  }

  Value parse_object(int depth) {
    ++pos_;  // {
    std::map<std::string, Value> members;
    skip_ws();
    if (peek() == '}') { ++pos_; return Value::object(std::move(members)); }
    while (true) {
      skip_ws();
      if (peek() != '"') fail("expected a string key");
      std::string key = parse_string();
      skip_ws();
      if (peek() != ':') fail("expected ':'");
      ++pos_;
      Value v = parse_value(depth + 1);
      if (!members.emplace(key, std::move(v)).second) fail("duplicate key " + quote(key));
      skip_ws();
      char c = peek();
      ++pos_;
      if (c == '}') break;
      if (c != ',') fail("expected ',' or '}'");
    }
    return Value::object(std::move(members));
  }

  Value parse_array(int depth) {
    ++pos_;  // [
    std::vector<Value> items;
    skip_ws();
    if (peek() == ']') { ++pos_; return Value::array(std::move(items)); }
    while (true) {
      items.push_back(parse_value(depth + 1));
      skip_ws();
      char c = peek();
      ++pos_;
      if (c == ']') break;
      if (c != ',') fail("expected ',' or ']'");
    }
    return Value::array(std::move(items));
  }

  unsigned hex4() {
    if (pos_ + 4 > s_.size()) fail("truncated \\u escape");
    unsigned v = 0;
    for (int i = 0; i < 4; ++i) {
      char c = s_[pos_++];
      v <<= 4;
      if (c >= '0' && c <= '9') v |= static_cast<unsigned>(c - '0');
      else if (c >= 'a' && c <= 'f') v |= static_cast<unsigned>(c - 'a' + 10);
      else if (c >= 'A' && c <= 'F') v |= static_cast<unsigned>(c - 'A' + 10);
      else fail("bad hex digit in \\u escape");
    }
    return v;
  }



  std::string parse_string() {
    ++pos_;  // "
    std::string out;
    while (true) {
      if (pos_ >= s_.size()) fail("unterminated string");
      unsigned char c = static_cast<unsigned char>(s_[pos_++]);
      if (c == '"') break;
      if (c < 0x20) fail("control character in string");
      if (c != '\\') {
        out += static_cast<char>(c);
        continue;
      }
      if (pos_ >= s_.size()) fail("unterminated escape");
      char e = s_[pos_++];
      switch (e) {
        case '"': out += '"'; break;
        case '\\': out += '\\'; break;
        case '/': out += '/'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'n': out += '\n'; break;
        case 'r': out += '\r'; break;
        case 't': out += '\t'; break;
        case 'u': {
          unsigned cp = hex4();
          if (cp >= 0xD800 && cp <= 0xDBFF) {
            if (pos_ + 2 > s_.size() || s_[pos_] != '\\' || s_[pos_ + 1] != 'u') fail("unpaired surrogate");
            pos_ += 2;
            unsigned lo = hex4();
            if (lo < 0xDC00 || lo > 0xDFFF) fail("bad low surrogate");
            cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
          } else if (cp >= 0xDC00 && cp <= 0xDFFF) {
            fail("unpaired surrogate");
          }
          append_utf8(out, cp);
          break;
        }
        default: fail(std::string("bad escape '\\") + e + "'");
      }
    }
    return out;
  }

  Value parse_number() {
    std::size_t start = pos_;
    bool integral = true;
    if (s_[pos_] == '-') ++pos_;
    if (pos_ >= s_.size()) fail("truncated number");
    if (s_[pos_] == '0') {
      ++pos_;
    } else if (s_[pos_] >= '1' && s_[pos_] <= '9') {
      while (pos_ < s_.size() && s_[pos_] >= '0' && s_[pos_] <= '9') ++pos_;
    } else {
      fail("bad number");
    }
    if (pos_ < s_.size() && s_[pos_] == '.') {
      integral = false;
      ++pos_;
      if (pos_ >= s_.size() || s_[pos_] < '0' || s_[pos_] > '9') fail("bad fraction");
      while (pos_ < s_.size() && s_[pos_] >= '0' && s_[pos_] <= '9') ++pos_;
    }
    if (pos_ < s_.size() && (s_[pos_] == 'e' || s_[pos_] == 'E')) {
      integral = false;
      ++pos_;
      if (pos_ < s_.size() && (s_[pos_] == '+' || s_[pos_] == '-')) ++pos_;
      if (pos_ >= s_.size() || s_[pos_] < '0' || s_[pos_] > '9') fail("bad exponent");
      while (pos_ < s_.size() && s_[pos_] >= '0' && s_[pos_] <= '9') ++pos_;
    }
    std::string text = s_.substr(start, pos_ - start);
    if (integral) {
      errno = 0;
      char* end = nullptr;
      long long v = std::strtoll(text.c_str(), &end, 10);
      if (errno == 0 && end == text.c_str() + text.size()) return Value::integer(v);
      // Out of int64 range: keep as a double.
    }
    return Value::number(std::strtod(text.c_str(), nullptr));
  }

  const std::string& s_;
  std::size_t pos_ = 0;
};

Value parse(const std::string& text) { return Parser(text).parse_document(); }

void append_utf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

}  // namespace blu::json

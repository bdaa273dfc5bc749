// json.cpp: recursive-descent JSON parser (RFC 8259, with \uXXXX surrogate pairs decoded to
// UTF-8) and string quoting. Depth is bounded so a hostile file cannot overflow the stack.
#include "blutrain/json.h"

#include <cerrno>
#include <cstdlib>

#include "blutensor/error.h"

namespace blu::train::json {
namespace {

constexpr int kMaxDepth = 256;

class Parser {
 public:
  Parser(std::string_view doc, std::string_view what) : doc_(doc), what_(what) {}

  Value parse_document() {
    Value v = parse_value(0);
    skip_ws();
    if (pos_ != doc_.size()) fail("trailing characters after the JSON value");
    return v;
  }

 private:
  [[noreturn]] void fail(std::string_view msg) const {
    BLU_THROW(what_, ": malformed JSON: ", msg, " at byte ", pos_);
  }

  void skip_ws() {
    while (pos_ < doc_.size() &&
           (doc_[pos_] == ' ' || doc_[pos_] == '\t' || doc_[pos_] == '\n' || doc_[pos_] == '\r')) {
      ++pos_;
    }
  }

  char peek() const { return pos_ < doc_.size() ? doc_[pos_] : '\0'; }

  void expect(char c) {
    if (peek() != c) fail(std::string("expected '") + c + "'");
    ++pos_;
  }

  void expect_word(std::string_view w) {
    if (doc_.substr(pos_, w.size()) != w) fail("unknown literal");
    pos_ += w.size();
  }

  Value parse_value(int depth) {
    if (depth > kMaxDepth) fail("nesting too deep");
    skip_ws();
    Value v;
    char c = peek();
    if (c == '{') {
      v.kind = Value::Kind::kObject;
      ++pos_;
      skip_ws();
      if (peek() == '}') {
        ++pos_;
        return v;
      }
      while (true) {
        skip_ws();
        if (peek() != '"') fail("expected a member name");
        std::string key = parse_string();
        skip_ws();
        expect(':');
        v.members.emplace_back(std::move(key), parse_value(depth + 1));
        skip_ws();
        if (peek() == ',') {
          ++pos_;
          continue;
        }
        expect('}');
        return v;
      }
    }
    if (c == '[') {
      v.kind = Value::Kind::kArray;
      ++pos_;
      skip_ws();
      if (peek() == ']') {
        ++pos_;
        return v;
      }
      while (true) {
        v.items.push_back(parse_value(depth + 1));
        skip_ws();
        if (peek() == ',') {
          ++pos_;
          continue;
        }
        expect(']');
        return v;
      }
    }
    if (c == '"') {
      v.kind = Value::Kind::kString;
      v.text = parse_string();
      return v;
    }
    if (c == 't') {
      expect_word("true");
      v.kind = Value::Kind::kBool;
      v.boolean = true;
      return v;
    }
    if (c == 'f') {
      expect_word("false");
      v.kind = Value::Kind::kBool;
      return v;
    }
    if (c == 'n') {
      expect_word("null");
      return v;
    }
    if (c == '-' || (c >= '0' && c <= '9')) {
      size_t start = pos_;
      if (peek() == '-') ++pos_;
      if (!(peek() >= '0' && peek() <= '9')) fail("bad number");
      while (pos_ < doc_.size()) {
        char d = doc_[pos_];
        if ((d >= '0' && d <= '9') || d == '.' || d == 'e' || d == 'E' || d == '+' || d == '-') {
          ++pos_;
        } else {
          break;
        }
      }
      v.kind = Value::Kind::kNumber;
      v.text = std::string(doc_.substr(start, pos_ - start));
      return v;
    }
    fail(pos_ >= doc_.size() ? "unexpected end of input" : "unexpected character");
  }

  uint32_t parse_hex4() {
    if (pos_ + 4 > doc_.size()) fail("truncated \\u escape");
    uint32_t v = 0;
    for (int i = 0; i < 4; ++i) {
      char h = doc_[pos_++];
      v <<= 4;
      if (h >= '0' && h <= '9') {
        v |= static_cast<uint32_t>(h - '0');
      } else if (h >= 'a' && h <= 'f') {
        v |= static_cast<uint32_t>(h - 'a' + 10);
      } else if (h >= 'A' && h <= 'F') {
        v |= static_cast<uint32_t>(h - 'A' + 10);
      } else {
        fail("bad hex digit in \\u escape");
      }
    }
    return v;
  }

  static void append_utf8(std::string& out, uint32_t cp) {
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

  std::string parse_string() {
    expect('"');
    std::string out;
    while (true) {
      if (pos_ >= doc_.size()) fail("unterminated string");
      char c = doc_[pos_++];
      if (c == '"') return out;
      if (static_cast<unsigned char>(c) < 0x20) fail("control character in string");
      if (c != '\\') {
        out += c;
        continue;
      }
      if (pos_ >= doc_.size()) fail("unterminated escape");
      char e = doc_[pos_++];
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
          uint32_t cp = parse_hex4();
          if (cp >= 0xD800 && cp <= 0xDBFF && doc_.substr(pos_, 2) == "\\u") {
            size_t save = pos_;
            pos_ += 2;
            uint32_t lo = parse_hex4();
            if (lo >= 0xDC00 && lo <= 0xDFFF) {
              cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
            } else {
              pos_ = save;
            }
          }
          append_utf8(out, cp);
          break;
        }
        default: fail("unknown escape");
      }
    }
  }

  std::string_view doc_;
  std::string_view what_;
  size_t pos_ = 0;
};

const char* kind_name(Value::Kind k) {
  switch (k) {
    case Value::Kind::kNull: return "null";
    case Value::Kind::kBool: return "bool";
    case Value::Kind::kNumber: return "number";
    case Value::Kind::kString: return "string";
    case Value::Kind::kArray: return "array";
    case Value::Kind::kObject: return "object";
  }
  return "?";
}

}  // namespace

const Value* Value::find(std::string_view key) const {
  if (kind != Kind::kObject) return nullptr;
  for (const auto& [k, v] : members) {
    if (k == key) return &v;
  }
  return nullptr;
}

const Value& Value::at(std::string_view key, std::string_view what) const {
  const Value* v = find(key);
  BLU_CHECK(v != nullptr, what, ": missing key \"", key, "\"");
  return *v;
}

int64_t Value::as_int64(std::string_view what) const {
  BLU_CHECK(kind == Kind::kNumber, what, ": expected a number, got ", kind_name(kind));
  errno = 0;
  char* end = nullptr;
  long long v = std::strtoll(text.c_str(), &end, 10);
  BLU_CHECK(errno == 0 && end != nullptr && *end == '\0', what, ": expected an integer, got ", text);
  return static_cast<int64_t>(v);
}

double Value::as_double(std::string_view what) const {
  BLU_CHECK(kind == Kind::kNumber, what, ": expected a number, got ", kind_name(kind));
  return std::strtod(text.c_str(), nullptr);
}

const std::string& Value::as_string(std::string_view what) const {
  BLU_CHECK(kind == Kind::kString, what, ": expected a string, got ", kind_name(kind));
  return text;
}

bool Value::as_bool(std::string_view what) const {
  BLU_CHECK(kind == Kind::kBool, what, ": expected true/false, got ", kind_name(kind));
  return boolean;
}

Value parse(std::string_view document, std::string_view what) {
  return Parser(document, what).parse_document();
}

std::string quote(std::string_view s) {
  static const char* kHex = "0123456789abcdef";
  std::string out;
  out.reserve(s.size() + 2);
  out += '"';
  for (char c : s) {
    unsigned char u = static_cast<unsigned char>(c);
    if (c == '"') {
      out += "\\\"";
    } else if (c == '\\') {
      out += "\\\\";
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c == '\r') {
      out += "\\r";
    } else if (u < 0x20) {
      out += "\\u00";
      out += kHex[u >> 4];
      out += kHex[u & 15];
    } else {
      out += c;
    }
  }
  out += '"';
  return out;
}

}  // namespace blu::train::json

#include "nn/json.h"

#include <utility>

#include "core/base/error.h"

namespace ember::nn::json {

namespace {

constexpr int kMaxDepth = 64;

class Parser {
 public:
  Parser(std::string_view text, const std::string& what) : s_(text), what_(what) {}

  Value document() {
    skip_space();
    Value v = value(0);
    skip_space();
    if (pos_ != s_.size()) fail("unexpected '", printable(s_[pos_]), "' after the value");
    return v;
  }

 private:
  template <typename... Parts>
  [[noreturn]] void fail(const Parts&... parts) const {
    EMBER_FAIL(what_, ": invalid JSON at byte ", pos_, ": ", parts...);
  }
  static std::string printable(char c) {
    const auto u = static_cast<unsigned char>(c);
    if (u >= 0x20 && u < 0x7f) return std::string(1, c);
    static const char* hex = "0123456789abcdef";
    return std::string("\\x") + hex[u >> 4] + hex[u & 15];
  }
  bool at_end() const { return pos_ >= s_.size(); }
  char peek() const { return s_[pos_]; }
  void skip_space() {
    while (!at_end() && (peek() == ' ' || peek() == '\t' || peek() == '\n' || peek() == '\r'))
      ++pos_;
  }
  void expect(char c) {
    if (at_end()) fail("expected '", c, "', found the end of the text");
    if (peek() != c) fail("expected '", c, "', found '", printable(peek()), "'");
    ++pos_;
  }
  void literal(std::string_view word) {
    if (s_.substr(pos_, word.size()) != word) fail("unknown literal (expected '", word, "')");
    pos_ += word.size();
  }

  Value value(int depth) {
    if (at_end()) fail("expected a value, found the end of the text");
    Value v;
    switch (peek()) {
      case '{':
        return object(depth + 1);
      case '[':
        return array(depth + 1);
      case '"':
        v.kind = Value::Kind::String;
        v.text = string();
        return v;
      case 't':
        literal("true");
        v.kind = Value::Kind::Bool;
        v.boolean = true;
        return v;
      case 'f':
        literal("false");
        v.kind = Value::Kind::Bool;
        return v;
      case 'n':
        literal("null");
        return v;
      default:
        if (peek() == '-' || (peek() >= '0' && peek() <= '9')) return number();
        fail("unexpected '", printable(peek()), "' where a value should start");
    }
  }

  void check_depth(int depth) const {
    if (depth > kMaxDepth) fail("nested deeper than ", kMaxDepth, " levels");
  }

  Value object(int depth) {
    check_depth(depth);
    Value v;
    v.kind = Value::Kind::Object;
    expect('{');
    skip_space();
    if (!at_end() && peek() == '}') {
      ++pos_;
      return v;
    }
    for (;;) {
      skip_space();
      if (at_end() || peek() != '"') fail("expected a member name in double quotes");
      Member m;
      m.key = string();
      skip_space();
      expect(':');
      skip_space();
      m.value = value(depth);
      v.members.push_back(std::move(m));
      skip_space();
      if (at_end()) fail("unterminated object (expected ',' or '}')");
      if (peek() == '}') {
        ++pos_;
        return v;
      }
      expect(',');
    }
  }

  Value array(int depth) {
    check_depth(depth);
    Value v;
    v.kind = Value::Kind::Array;
    expect('[');
    skip_space();
    if (!at_end() && peek() == ']') {
      ++pos_;
      return v;
    }
    for (;;) {
      skip_space();
      v.items.push_back(value(depth));
      skip_space();
      if (at_end()) fail("unterminated array (expected ',' or ']')");
      if (peek() == ']') {
        ++pos_;
        return v;
      }
      expect(',');
    }
  }

  Value number() {
    const size_t start = pos_;
    auto digits = [&] {
      const size_t from = pos_;
      while (!at_end() && peek() >= '0' && peek() <= '9') ++pos_;
      return pos_ - from;
    };
    if (peek() == '-') ++pos_;
    if (at_end()) fail("a number has no digits");
    if (peek() == '0') {
      ++pos_;
      if (!at_end() && peek() >= '0' && peek() <= '9') fail("a number has a leading zero");
    } else if (digits() == 0) {
      fail("a number has no digits");
    }
    if (!at_end() && peek() == '.') {
      ++pos_;
      if (digits() == 0) fail("a number has no digits after '.'");
    }
    if (!at_end() && (peek() == 'e' || peek() == 'E')) {
      ++pos_;
      if (!at_end() && (peek() == '+' || peek() == '-')) ++pos_;
      if (digits() == 0) fail("a number has no digits in its exponent");
    }
    Value v;
    v.kind = Value::Kind::Number;
    v.text = std::string(s_.substr(start, pos_ - start));
    return v;
  }

  unsigned hex4() {
    if (s_.size() - pos_ < 4) fail("a \\u escape needs 4 hex digits");
    unsigned u = 0;
    for (int i = 0; i < 4; ++i) {
      const char c = s_[pos_++];
      u <<= 4;
      if (c >= '0' && c <= '9')
        u |= static_cast<unsigned>(c - '0');
      else if (c >= 'a' && c <= 'f')
        u |= static_cast<unsigned>(c - 'a' + 10);
      else if (c >= 'A' && c <= 'F')
        u |= static_cast<unsigned>(c - 'A' + 10);
      else
        fail("a \\u escape needs 4 hex digits");
    }
    return u;
  }

  static void put_utf8(std::string& out, unsigned cp) {
    if (cp < 0x80) {
      out += static_cast<char>(cp);
    } else if (cp < 0x800) {
      out += static_cast<char>(0xc0 | (cp >> 6));
      out += static_cast<char>(0x80 | (cp & 0x3f));
    } else if (cp < 0x10000) {
      out += static_cast<char>(0xe0 | (cp >> 12));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
      out += static_cast<char>(0x80 | (cp & 0x3f));
    } else {
      out += static_cast<char>(0xf0 | (cp >> 18));
      out += static_cast<char>(0x80 | ((cp >> 12) & 0x3f));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
      out += static_cast<char>(0x80 | (cp & 0x3f));
    }
  }

  void escape(std::string& out) {
    if (at_end()) fail("unterminated string");
    const char c = s_[pos_++];
    switch (c) {
      case '"':
      case '\\':
      case '/':
        out += c;
        return;
      case 'b':
        out += '\b';
        return;
      case 'f':
        out += '\f';
        return;
      case 'n':
        out += '\n';
        return;
      case 'r':
        out += '\r';
        return;
      case 't':
        out += '\t';
        return;
      case 'u': {
        unsigned cp = hex4();
        if (cp >= 0xdc00 && cp <= 0xdfff) fail("a lone low surrogate in a \\u escape");
        if (cp >= 0xd800 && cp <= 0xdbff) {
          if (s_.substr(pos_, 2) != "\\u") fail("a high surrogate without its low half");
          pos_ += 2;
          const unsigned low = hex4();
          if (low < 0xdc00 || low > 0xdfff) fail("a high surrogate without its low half");
          cp = 0x10000 + ((cp - 0xd800) << 10) + (low - 0xdc00);
        }
        put_utf8(out, cp);
        return;
      }
      default:
        --pos_;
        fail("unknown escape '\\", printable(c), "'");
    }
  }

  // One UTF-8 sequence starting at pos_ (its first byte >= 0x80), checked and copied.
  void utf8(std::string& out) {
    const auto b0 = static_cast<unsigned char>(s_[pos_]);
    size_t len = 0;
    unsigned cp = 0, min = 0;
    if (b0 >= 0xc2 && b0 <= 0xdf) {
      len = 2, cp = b0 & 0x1fu, min = 0x80;
    } else if (b0 >= 0xe0 && b0 <= 0xef) {
      len = 3, cp = b0 & 0x0fu, min = 0x800;
    } else if (b0 >= 0xf0 && b0 <= 0xf4) {
      len = 4, cp = b0 & 0x07u, min = 0x10000;
    } else {
      fail("invalid UTF-8 byte ", printable(s_[pos_]));
    }
    if (s_.size() - pos_ < len) fail("truncated UTF-8 sequence");
    for (size_t i = 1; i < len; ++i) {
      const auto b = static_cast<unsigned char>(s_[pos_ + i]);
      if ((b & 0xc0) != 0x80) fail("invalid UTF-8 continuation byte");
      cp = (cp << 6) | (b & 0x3fu);
    }
    if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
      fail("invalid UTF-8 sequence (overlong, a surrogate or beyond U+10FFFF)");
    out.append(s_.substr(pos_, len));
    pos_ += len;
  }

  std::string string() {
    expect('"');
    std::string out;
    for (;;) {
      if (at_end()) fail("unterminated string");
      const auto c = static_cast<unsigned char>(peek());
      if (c == '"') {
        ++pos_;
        return out;
      }
      if (c == '\\') {
        ++pos_;
        escape(out);
      } else if (c < 0x20) {
        fail("control character ", printable(peek()), " in a string (escape it)");
      } else if (c >= 0x80) {
        utf8(out);
      } else {
        out += peek();
        ++pos_;
      }
    }
  }

  std::string_view s_;
  const std::string& what_;
  size_t pos_ = 0;
};

}  // namespace

const char* kind_name(Value::Kind kind) {
  switch (kind) {
    case Value::Kind::Null:
      return "null";
    case Value::Kind::Bool:
      return "bool";
    case Value::Kind::Number:
      return "number";
    case Value::Kind::String:
      return "string";
    case Value::Kind::Array:
      return "array";
    case Value::Kind::Object:
      return "object";
  }
  return "?";
}

Value parse(std::string_view text, const std::string& what) {
  return Parser(text, what).document();
}

uint64_t to_uint64(const Value& v, const std::string& what) {
  EMBER_CHECK(v.is_number(), what, " must be a non-negative integer, got a ", kind_name(v.kind));
  uint64_t n = 0;
  for (char c : v.text) {
    EMBER_CHECK(c >= '0' && c <= '9', what, " must be a non-negative integer, got ", v.text);
    const auto d = static_cast<uint64_t>(c - '0');
    EMBER_CHECK(n <= (UINT64_MAX - d) / 10, what, " ", v.text, " does not fit 64 bits");
    n = n * 10 + d;
  }
  return n;
}

std::string quote(std::string_view s) {
  static const char* hex = "0123456789abcdef";
  std::string out = "\"";
  for (char c : s) {
    const auto u = static_cast<unsigned char>(c);
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\b':
        out += "\\b";
        break;
      case '\f':
        out += "\\f";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (u < 0x20) {
          out += "\\u00";
          out += hex[u >> 4];
          out += hex[u & 15];
        } else {
          out += c;
        }
    }
  }
  return out + "\"";
}

}  // namespace ember::nn::json

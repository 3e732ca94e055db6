// A small strict JSON (RFC 8259) reader and a string quoter, enough for the
// safetensors header (nn/safetensors.h). Strict: one value, nothing but
// whitespace after it, valid UTF-8, no comments, no trailing commas, no control
// characters in strings, numbers as the grammar spells them, nesting at most 64
// deep. Every failure throws ember::Error naming the byte offset.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace ember::nn::json {

struct Member;

// One parsed value. Objects keep their members in file order, duplicates
// included, so a caller can name a duplicate key rather than lose it.
struct Value {
  enum class Kind { Null, Bool, Number, String, Array, Object };
  Kind kind = Kind::Null;
  bool boolean = false;
  std::string text;  // a string's decoded contents, or a number as written
  std::vector<Value> items;
  std::vector<Member> members;

  bool is_object() const { return kind == Kind::Object; }
  bool is_array() const { return kind == Kind::Array; }
  bool is_string() const { return kind == Kind::String; }
  bool is_number() const { return kind == Kind::Number; }
};

// An object's member.
struct Member {
  std::string key;
  Value value;
};

// "null", "bool", "number", "string", "array" or "object".
const char* kind_name(Value::Kind kind);

// Parses `text`; errors read "<what>: invalid JSON at byte N: <reason>".
Value parse(std::string_view text, const std::string& what);

// A number that is a non-negative integer (no sign, fraction or exponent) that
// fits uint64_t, as its value; otherwise throws naming `what`.
uint64_t to_uint64(const Value& v, const std::string& what);

// `s` as a JSON string literal, quotes included: the double quote and the
// backslash escaped, control characters by their short escapes (b, f, n, r, t)
// or as u00XX, everything else (UTF-8 included) as is, as serde_json writes them.
std::string quote(std::string_view s);

}  // namespace ember::nn::json

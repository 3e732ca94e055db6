// A JSON string literal of C text, everything JSON forbids in a string escaped
// (quotes, backslashes, control characters). For the writers of JSON files below
// nn/ (the memory snapshot, the profiler's trace); nn/json.h is the full reader.
#pragma once

#include <cstdio>
#include <ostream>

namespace ember {

inline void write_json_string(std::ostream& out, const char* s) {
  out << '"';
  for (; s != nullptr && *s != '\0'; ++s) {
    const auto c = static_cast<unsigned char>(*s);
    if (c == '"' || c == '\\') {
      out << '\\' << *s;
    } else if (c < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      out << buf;
    } else {
      out << *s;
    }
  }
  out << '"';
}

}  // namespace ember

#include "core/string_object.hpp"

#include <cstdint>

#include "core/cpp_only.hpp"

namespace pg_outbox::core {

namespace {

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

class Parser {
 public:
  explicit Parser(std::string_view text) : text_(text) {}

  StringObjectResult parse() {
    StringPairs pairs;
    skip_space();
    if (!consume('{')) return fail("headers must be a JSON object");
    skip_space();
    if (!consume('}')) {
      for (;;) {
        skip_space();
        std::string name;
        if (!peek('"') || !string(name)) return fail("header names must be JSON strings");
        skip_space();
        if (!consume(':')) return fail("malformed JSON object");
        skip_space();
        std::string value;
        if (!peek('"')) return fail("header \"" + name + "\" must have a string value");
        if (!string(value)) return fail("malformed JSON string");
        store(pairs, std::move(name), std::move(value));
        skip_space();
        if (consume('}')) break;
        if (!consume(',')) return fail("malformed JSON object");
      }
    }
    skip_space();
    if (pos_ != text_.size()) return fail("unexpected text after the JSON object");
    return {std::move(pairs), {}};
  }

 private:
  static StringObjectResult fail(std::string why) { return {std::nullopt, std::move(why)}; }

  static void store(StringPairs& pairs, std::string name, std::string value) {
    for (auto& pair : pairs) {
      if (pair.first == name) {
        pair.second = std::move(value);
        return;
      }
    }
    pairs.emplace_back(std::move(name), std::move(value));
  }

  bool peek(char c) const { return pos_ < text_.size() && text_[pos_] == c; }
  bool consume(char c) {
    if (!peek(c)) return false;
    ++pos_;
    return true;
  }
  void skip_space() {
    while (pos_ < text_.size() &&
           (text_[pos_] == ' ' || text_[pos_] == '\t' || text_[pos_] == '\n' || text_[pos_] == '\r'))
      ++pos_;
  }

  bool hex4(uint32_t& out) {
    if (pos_ + 4 > text_.size()) return false;
    out = 0;
    for (int i = 0; i < 4; ++i) {
      char c = text_[pos_++];
      out <<= 4;
      if (c >= '0' && c <= '9')
        out |= static_cast<uint32_t>(c - '0');
      else if (c >= 'a' && c <= 'f')
        out |= static_cast<uint32_t>(c - 'a' + 10);
      else if (c >= 'A' && c <= 'F')
        out |= static_cast<uint32_t>(c - 'A' + 10);
      else
        return false;
    }
    return true;
  }

  // A JSON string at pos_ (which holds the opening quote), unescaped into out.
  bool string(std::string& out) {
    ++pos_;
    while (pos_ < text_.size()) {
      char c = text_[pos_++];
      if (c == '"') return true;
      if (static_cast<unsigned char>(c) < 0x20) return false;
      if (c != '\\') {
        out += c;
        continue;
      }
      if (pos_ >= text_.size()) return false;
      char e = text_[pos_++];
      switch (e) {
        case '"':
          out += '"';
          break;
        case '\\':
          out += '\\';
          break;
        case '/':
          out += '/';
          break;
        case 'b':
          out += '\b';
          break;
        case 'f':
          out += '\f';
          break;
        case 'n':
          out += '\n';
          break;
        case 'r':
          out += '\r';
          break;
        case 't':
          out += '\t';
          break;
        case 'u': {
          uint32_t cp = 0;
          if (!hex4(cp)) return false;
          if (cp >= 0xD800 && cp <= 0xDBFF) {  // a surrogate pair encodes one code point
            uint32_t low = 0;
            if (!consume('\\') || !consume('u') || !hex4(low) || low < 0xDC00 || low > 0xDFFF) return false;
            cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
          } else if (cp >= 0xDC00 && cp <= 0xDFFF) {
            return false;
          }
          append_utf8(out, cp);
          break;
        }
        default:
          return false;
      }
    }
    return false;
  }

  std::string_view text_;
  size_t pos_ = 0;
};

// Length of the valid UTF-8 sequence starting at s[i], or 0 if it is not valid.
size_t utf8_sequence_length(std::string_view s, size_t i) {
  auto byte = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  unsigned char b0 = byte(i);
  if (b0 >= 0x01 && b0 < 0x80) return 1;
  size_t len = 0;
  uint32_t min = 0;
  if ((b0 & 0xE0) == 0xC0)
    len = 2, min = 0x80;
  else if ((b0 & 0xF0) == 0xE0)
    len = 3, min = 0x800;
  else if ((b0 & 0xF8) == 0xF0)
    len = 4, min = 0x10000;
  else
    return 0;
  if (i + len > s.size()) return 0;
  uint32_t cp = b0 & (0x7F >> len);
  for (size_t k = 1; k < len; ++k) {
    if ((byte(i + k) & 0xC0) != 0x80) return 0;
    cp = (cp << 6) | (byte(i + k) & 0x3F);
  }
  if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
  return len;
}

}  // namespace

StringObjectResult parse_string_object(std::string_view json) { return Parser(json).parse(); }

std::string sanitize_utf8(std::string_view bytes, size_t max_bytes) {
  static constexpr std::string_view kReplacement = "\xEF\xBF\xBD";
  std::string out;
  out.reserve(bytes.size() < max_bytes ? bytes.size() : max_bytes);
  for (size_t i = 0; i < bytes.size();) {
    size_t len = utf8_sequence_length(bytes, i);
    std::string_view piece = len ? bytes.substr(i, len) : kReplacement;
    if (out.size() + piece.size() > max_bytes) break;
    out += piece;
    i += len ? len : 1;
  }
  return out;
}

}  // namespace pg_outbox::core

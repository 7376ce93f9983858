#include "info/json.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <set>

namespace nfi {

const JsonValue* JsonValue::find(const std::string& key) const {
  if (type_ != Type::kObject) return nullptr;
  for (size_t i = 0; i < keys_.size(); ++i)
    if (keys_[i] == key) return &items_[i];
  return nullptr;
}

// Recursive descent; the recursion is bounded by kJsonMaxDepth.
class JsonParser {
 public:
  explicit JsonParser(const std::string& t) : t_(t) {}

  bool document(JsonValue* v) {
    skip_ws();
    if (!value(v, 0)) return false;
    skip_ws();
    if (p_ < t_.size()) return fail("unexpected text after the document");
    return true;
  }
  const std::string& error() const { return err_; }

 private:
  const std::string& t_;
  size_t p_ = 0;
  int line_ = 1;
  std::string err_;

  bool fail(const std::string& what) {
    err_ = "line " + std::to_string(line_) + ": " + what;
    return false;
  }
  bool at_end() const { return p_ >= t_.size(); }
  bool truncated() { return fail("unexpected end of the file (truncated?)"); }
  bool expected(const char* what) {
    if (at_end()) return truncated();
    return fail(std::string("expected ") + what);
  }

  void skip_ws() {
    for (; p_ < t_.size(); ++p_) {
      const char c = t_[p_];
      if (c == '\n')
        ++line_;
      else if (c != ' ' && c != '\t' && c != '\r')
        break;
    }
  }

  bool literal(const char* word) {
    const std::string w = word;
    if (t_.compare(p_, w.size(), w) != 0) return expected("a value");
    p_ += w.size();
    return true;
  }

  bool value(JsonValue* v, int depth) {
    if (at_end()) return truncated();
    switch (t_[p_]) {
      case '{': return object(v, depth + 1);
      case '[': return array(v, depth + 1);
      case '"': v->type_ = JsonValue::Type::kString; return string(&v->str_);
      case 't':
        v->type_ = JsonValue::Type::kBool;
        v->bool_ = true;
        return literal("true");
      case 'f':
        v->type_ = JsonValue::Type::kBool;
        v->bool_ = false;
        return literal("false");
      case 'n': v->type_ = JsonValue::Type::kNull; return literal("null");
      default: return number(v);
    }
  }

  bool object(JsonValue* v, int depth) {
    if (depth > kJsonMaxDepth)
      return fail("nested deeper than " + std::to_string(kJsonMaxDepth) + " levels");
    v->type_ = JsonValue::Type::kObject;
    ++p_;  // '{'
    skip_ws();
    if (p_ < t_.size() && t_[p_] == '}') {
      ++p_;
      return true;
    }
    std::set<std::string> seen;
    for (;;) {
      skip_ws();
      if (at_end() || t_[p_] != '"') return expected("a string (a key)");
      std::string key;
      if (!string(&key)) return false;
      if (!seen.insert(key).second) return fail("duplicate key \"" + key + "\"");
      skip_ws();
      if (at_end() || t_[p_] != ':') return expected("':'");
      ++p_;
      skip_ws();
      v->keys_.push_back(key);
      v->items_.emplace_back();
      if (!value(&v->items_.back(), depth)) return false;
      skip_ws();
      if (at_end()) return truncated();
      if (t_[p_] == '}') {
        ++p_;
        return true;
      }
      if (t_[p_] != ',') return expected("',' or '}'");
      ++p_;
    }
  }

  bool array(JsonValue* v, int depth) {
    if (depth > kJsonMaxDepth)
      return fail("nested deeper than " + std::to_string(kJsonMaxDepth) + " levels");
    v->type_ = JsonValue::Type::kArray;
    ++p_;  // '['
    skip_ws();
    if (p_ < t_.size() && t_[p_] == ']') {
      ++p_;
      return true;
    }
    for (;;) {
      skip_ws();
      v->items_.emplace_back();
      if (!value(&v->items_.back(), depth)) return false;
      skip_ws();
      if (at_end()) return truncated();
      if (t_[p_] == ']') {
        ++p_;
        return true;
      }
      if (t_[p_] != ',') return expected("',' or ']'");
      ++p_;
    }
  }

  static int hex(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  }

  // The four hex digits after "\u" at p_.
  bool hex4(unsigned* cp) {
    if (p_ + 4 > t_.size()) return truncated();
    unsigned u = 0;
    for (int i = 0; i < 4; ++i) {
      const int h = hex(t_[p_ + i]);
      if (h < 0) return fail("bad \\u escape (four hex digits expected)");
      u = u * 16 + static_cast<unsigned>(h);
    }
    p_ += 4;
    *cp = u;
    return true;
  }

  static void utf8(unsigned cp, std::string* s) {
    if (cp < 0x80) {
      s->push_back(static_cast<char>(cp));
    } else if (cp < 0x800) {
      s->push_back(static_cast<char>(0xC0 | (cp >> 6)));
      s->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    } else if (cp < 0x10000) {
      s->push_back(static_cast<char>(0xE0 | (cp >> 12)));
      s->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
      s->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    } else {
      s->push_back(static_cast<char>(0xF0 | (cp >> 18)));
      s->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
      s->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
      s->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    }
  }

  bool string(std::string* s) {
    ++p_;  // '"'
    for (;;) {
      if (at_end()) return truncated();
      const unsigned char c = static_cast<unsigned char>(t_[p_++]);
      if (c == '"') return true;
      if (c < 0x20) {
        --p_;
        return fail(c == '\n' ? "end of line inside a string (missing '\"'?)"
                              : "control character inside a string");
      }
      if (c != '\\') {
        s->push_back(static_cast<char>(c));
        continue;
      }
      if (at_end()) return truncated();
      const char e = t_[p_++];
      switch (e) {
        case '"': s->push_back('"'); break;
        case '\\': s->push_back('\\'); break;
        case '/': s->push_back('/'); break;
        case 'b': s->push_back('\b'); break;
        case 'f': s->push_back('\f'); break;
        case 'n': s->push_back('\n'); break;
        case 'r': s->push_back('\r'); break;
        case 't': s->push_back('\t'); break;
        case 'u': {
          unsigned cp = 0;
          if (!hex4(&cp)) return false;
          if (cp >= 0xDC00 && cp <= 0xDFFF) return fail("lone low surrogate in a \\u escape");
          if (cp >= 0xD800 && cp <= 0xDBFF) {
            unsigned lo = 0;
            if (t_.compare(p_, 2, "\\u") != 0)
              return fail("high surrogate not followed by a low one in a \\u escape");
            p_ += 2;
            if (!hex4(&lo)) return false;
            if (lo < 0xDC00 || lo > 0xDFFF)
              return fail("high surrogate not followed by a low one in a \\u escape");
            cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
          }
          utf8(cp, s);
          break;
        }
        default:
          if (static_cast<unsigned char>(e) < 0x20 || static_cast<unsigned char>(e) > 0x7E)
            return fail("bad escape in a string");
          return fail(std::string("bad escape '\\") + e + "' in a string");
      }
    }
  }

  static bool digit(char c) { return c >= '0' && c <= '9'; }

  // -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)?
  bool number(JsonValue* v) {
    const size_t start = p_;
    bool integral = true;
    if (p_ < t_.size() && t_[p_] == '-') ++p_;
    if (p_ >= t_.size()) return at_end() && p_ > start ? truncated() : expected("a value");
    if (t_[p_] == '0') {
      ++p_;
    } else if (digit(t_[p_])) {
      while (p_ < t_.size() && digit(t_[p_])) ++p_;
    } else {
      return p_ > start ? fail("bad number") : expected("a value");
    }
    if (p_ < t_.size() && t_[p_] == '.') {
      integral = false;
      ++p_;
      if (p_ >= t_.size() || !digit(t_[p_])) return fail("bad number (digits expected after '.')");
      while (p_ < t_.size() && digit(t_[p_])) ++p_;
    }
    if (p_ < t_.size() && (t_[p_] == 'e' || t_[p_] == 'E')) {
      integral = false;
      ++p_;
      if (p_ < t_.size() && (t_[p_] == '+' || t_[p_] == '-')) ++p_;
      if (p_ >= t_.size() || !digit(t_[p_])) return fail("bad number (exponent expected)");
      while (p_ < t_.size() && digit(t_[p_])) ++p_;
    }
    const std::string text = t_.substr(start, p_ - start);
    v->type_ = JsonValue::Type::kNumber;
    v->num_ = strtod(text.c_str(), nullptr);
    if (std::isinf(v->num_)) return fail("number out of range: " + text);
    if (integral) {
      errno = 0;
      const long long i = strtoll(text.c_str(), nullptr, 10);
      if (errno == 0) {
        v->is_int_ = true;
        v->int_ = i;
      }
    }
    return true;
  }
};

bool json_parse(const std::string& text, JsonValue* out, std::string* err) {
  JsonParser p(text);
  *out = JsonValue();
  if (p.document(out)) return true;
  *err = p.error();
  *out = JsonValue();
  return false;
}

void json_write_string(FILE* out, const std::string& s) {
  fputc('"', out);
  for (const char ch : s) {
    const unsigned char c = static_cast<unsigned char>(ch);
    if (c == '"' || c == '\\')
      fprintf(out, "\\%c", c);
    else if (c == '\n')
      fputs("\\n", out);
    else if (c == '\t')
      fputs("\\t", out);
    else if (c < 0x20 || c == 0x7F)
      fprintf(out, "\\u%04x", c);
    else
      fputc(c, out);
  }
  fputc('"', out);
}

}  // namespace nfi

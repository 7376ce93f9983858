// A small strict JSON reader for the tools (RFC 8259): objects, arrays, strings with every escape,
// numbers, true/false/null. Errors carry the line. Nesting is limited (kMaxDepth), so hostile input
// can neither exhaust the stack while parsing nor when the tree is destroyed.
#pragma once
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

namespace nfi {

class JsonValue {
 public:
  enum class Type { kNull, kBool, kNumber, kString, kArray, kObject };

  Type type() const { return type_; }
  bool is_null() const { return type_ == Type::kNull; }
  bool is_bool() const { return type_ == Type::kBool; }
  bool is_number() const { return type_ == Type::kNumber; }
  // A number written without fraction or exponent that fits an int64_t.
  bool is_int() const { return type_ == Type::kNumber && is_int_; }
  bool is_string() const { return type_ == Type::kString; }
  bool is_array() const { return type_ == Type::kArray; }
  bool is_object() const { return type_ == Type::kObject; }

  bool boolean() const { return bool_; }
  double number() const { return num_; }
  int64_t integer() const { return int_; }
  const std::string& str() const { return str_; }
  // An array's elements, or an object's values (in the order written).
  const std::vector<JsonValue>& items() const { return items_; }
  // An object's keys, parallel to items().
  const std::vector<std::string>& keys() const { return keys_; }
  // The member named `key` of an object; nullptr when absent or when this is not an object.
  const JsonValue* find(const std::string& key) const;

 private:
  friend class JsonParser;
  Type type_ = Type::kNull;
  bool bool_ = false;
  bool is_int_ = false;
  double num_ = 0;
  int64_t int_ = 0;
  std::string str_;
  std::vector<std::string> keys_;
  std::vector<JsonValue> items_;
};

constexpr int kJsonMaxDepth = 64;

// Parses the whole of `text` (one document, whitespace around it allowed). On failure returns
// false with *err = "line N: what is wrong".
bool json_parse(const std::string& text, JsonValue* out, std::string* err);

// Writes `s` as a JSON string literal, quotes included.
void json_write_string(FILE* out, const std::string& s);

}  // namespace nfi

// A strict little JSON reader for tests (no JSON library is available to the build): parses a
// document into a tree, throwing std::runtime_error at the first syntax error.
#pragma once

#include <cctype>
#include <cstdlib>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace cerar::testing {

struct Json {
  enum Type { kNull, kBool, kNumber, kString, kArray, kObject } type = kNull;
  double number = 0;
  bool boolean = false;
  std::string text;
  std::vector<Json> items;
  std::map<std::string, Json> fields;

  const Json* field(const std::string& key) const {
    auto it = fields.find(key);
    return it == fields.end() ? nullptr : &it->second;
  }
};

class JsonParser {
 public:
  explicit JsonParser(const std::string& text) : s_(text) {}
  Json parse() {
    Json value = parseValue();
    skip();
    if (at_ != s_.size()) fail("trailing characters");
    return value;
  }

 private:
  [[noreturn]] void fail(const std::string& what) {
    throw std::runtime_error("JSON: " + what + " at offset " + std::to_string(at_));
  }
  void skip() {
    while (at_ < s_.size() && std::isspace(static_cast<unsigned char>(s_[at_]))) ++at_;
  }
  void expect(char ch) {
    skip();
    if (at_ >= s_.size() || s_[at_] != ch) fail(std::string("expected '") + ch + "'");
    ++at_;
  }
  bool peek(char ch) {
    skip();
    return at_ < s_.size() && s_[at_] == ch;
  }
  std::string parseString() {
    expect('"');
    std::string out;
    while (true) {
      if (at_ >= s_.size()) fail("unterminated string");
      char ch = s_[at_++];
      if (ch == '"') return out;
      if (static_cast<unsigned char>(ch) < 0x20) fail("control character in string");
      if (ch == '\\') {
        if (at_ >= s_.size()) fail("bad escape");
        char e = s_[at_++];
        if (e == 'u') {
          if (at_ + 4 > s_.size()) fail("bad \\u escape");
          out += static_cast<char>(std::strtol(s_.substr(at_, 4).c_str(), nullptr, 16));
          at_ += 4;
        } else if (std::string("\"\\/bfnrt").find(e) != std::string::npos) {
          out += e == 'n' ? '\n' : e == 't' ? '\t' : e;
        } else {
          fail("bad escape");
        }
      } else {
        out += ch;
      }
    }
  }
  Json parseValue() {
    skip();
    if (at_ >= s_.size()) fail("unexpected end");
    Json v;
    const char ch = s_[at_];
    if (ch == '{') {
      v.type = Json::kObject;
      ++at_;
      if (peek('}')) return ++at_, v;
      do {
        std::string key = parseString();
        expect(':');
        v.fields[key] = parseValue();
      } while (peek(',') && ++at_);
      expect('}');
    } else if (ch == '[') {
      v.type = Json::kArray;
      ++at_;
      if (peek(']')) return ++at_, v;
      do {
        v.items.push_back(parseValue());
      } while (peek(',') && ++at_);
      expect(']');
    } else if (ch == '"') {
      v.type = Json::kString;
      v.text = parseString();
    } else if (s_.compare(at_, 4, "true") == 0 || s_.compare(at_, 5, "false") == 0) {
      v.type = Json::kBool;
      v.boolean = s_[at_] == 't';
      at_ += v.boolean ? 4 : 5;
    } else if (s_.compare(at_, 4, "null") == 0) {
      at_ += 4;
    } else {
      char* end = nullptr;
      v.type = Json::kNumber;
      v.number = std::strtod(s_.c_str() + at_, &end);
      if (end == s_.c_str() + at_) fail("unexpected character");
      at_ = static_cast<size_t>(end - s_.c_str());
    }
    return v;
  }

  const std::string& s_;
  size_t at_ = 0;
};

}  // namespace cerar::testing

// A minimal stand-in for the GoogleTest subset the GPU tests use, so that they build and run
// on machines without GoogleTest (the GPU check image). main() is in minitest_main.cc.
#pragma once

#include <exception>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

namespace minitest {

struct Message {
  std::ostringstream text;
  template <typename T>
  Message& operator<<(const T& value) {
    text << value;
    return *this;
  }
};

struct State {
  int failures = 0;
  bool skipped = false;
};
inline State& state() {
  static State s;
  return s;
}

struct Test {
  const char* suite;
  const char* name;
  void (*body)();
};
inline std::vector<Test>& registry() {
  static std::vector<Test> tests;
  return tests;
}
struct Registrar {
  Registrar(const char* suite, const char* name, void (*body)()) {
    registry().push_back({suite, name, body});
  }
};

// `Failure = Message() << ...` records the failure; operator= returns void so that ASSERT_*
// can `return` it, as GoogleTest does.
struct Failure {
  const char* file;
  int line;
  std::string what;
  void operator=(const Message& message) const {
    ++state().failures;
    std::cout << file << ":" << line << ": Failure\n" << what << "\n"
              << message.text.str() << std::endl;
  }
};
struct Skip {
  const char* file;
  int line;
  void operator=(const Message& message) const {
    state().skipped = true;
    std::cout << file << ":" << line << ": Skipped\n" << message.text.str() << std::endl;
  }
};

template <typename T>
std::string show(const T& value) {
  if constexpr (requires(std::ostream& os) { os << value; }) {
    std::ostringstream out;
    out << value;
    return out.str();
  } else {
    return "<value>";
  }
}
template <typename A, typename B>
std::string describe(const char* expression, const A& a, const B& b) {
  return std::string("Expected: ") + expression + "\n  actual: " + show(a) + " vs " + show(b);
}
template <typename Exception, typename Fn>
bool throws(Fn&& fn) {
  try {
    fn();
  } catch (const Exception&) {
    return true;
  } catch (...) {
    return false;
  }
  return false;
}

}  // namespace minitest

#define MINITEST_CHECK_(ok, what, fatal)                                          \
  if (ok) {                                                                       \
  } else /* NOLINT */                                                             \
    fatal ::minitest::Failure{__FILE__, __LINE__, what} = ::minitest::Message()
#define MINITEST_CMP_(a, op, b, fatal) \
  MINITEST_CHECK_((a)op(b), ::minitest::describe(#a " " #op " " #b, (a), (b)), fatal)

#define TEST(suite, name)                                                            \
  static void suite##_##name##_body();                                               \
  static ::minitest::Registrar suite##_##name##_registrar(#suite, #name,             \
                                                          &suite##_##name##_body);   \
  static void suite##_##name##_body()

#define EXPECT_EQ(a, b) MINITEST_CMP_(a, ==, b, )
#define EXPECT_NE(a, b) MINITEST_CMP_(a, !=, b, )
#define EXPECT_LT(a, b) MINITEST_CMP_(a, <, b, )
#define EXPECT_LE(a, b) MINITEST_CMP_(a, <=, b, )
#define EXPECT_GT(a, b) MINITEST_CMP_(a, >, b, )
#define EXPECT_GE(a, b) MINITEST_CMP_(a, >=, b, )
#define EXPECT_TRUE(c) MINITEST_CHECK_(c, "Expected true: " #c, )
#define EXPECT_FALSE(c) MINITEST_CHECK_(!(c), "Expected false: " #c, )
#define ASSERT_EQ(a, b) MINITEST_CMP_(a, ==, b, return)
#define ASSERT_NE(a, b) MINITEST_CMP_(a, !=, b, return)
#define ASSERT_TRUE(c) MINITEST_CHECK_(c, "Expected true: " #c, return)
#define EXPECT_THROW(statement, type)                                                \
  MINITEST_CHECK_(::minitest::throws<type>([&] { statement; }),                      \
                  "Expected " #statement " to throw " #type, )
#define ADD_FAILURE() ::minitest::Failure{__FILE__, __LINE__, "Failure"} = ::minitest::Message()
#define GTEST_SKIP() return ::minitest::Skip{__FILE__, __LINE__} = ::minitest::Message()

// expect_error.h: test support: f() must throw, and the message must contain `part` (a clear error
// names the op, the shapes or the file). Shared by the op tests.
#pragma once

#include <gtest/gtest.h>

#include <exception>
#include <functional>
#include <string>

namespace blu::test {

inline void expect_error(const std::function<void()>& f, const std::string& part) {
  try {
    f();
    ADD_FAILURE() << "no error (expected one containing '" << part << "')";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
  }
}

}  // namespace blu::test

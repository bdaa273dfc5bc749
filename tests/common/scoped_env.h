// scoped_env.h: sets one environment variable for the lifetime of an object (the A/B and forcing
// switches that blublas and blutrain read at each call) and restores what was there before.
#pragma once

#include <cstdlib>
#include <string>

namespace blu::test {

class ScopedEnv {
 public:
  // An empty value leaves the variable as it is (a case that forces nothing).
  ScopedEnv(const char* name, const std::string& value) : name_(name) {
    if (value.empty()) return;
    const char* old = std::getenv(name);
    had_ = old != nullptr;
    if (had_) old_ = old;
    setenv(name, value.c_str(), 1);
    set_ = true;
  }
  ~ScopedEnv() {
    if (!set_) return;
    if (had_) {
      setenv(name_, old_.c_str(), 1);
    } else {
      unsetenv(name_);
    }
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  const char* name_;
  std::string old_;
  bool had_ = false, set_ = false;
};

}  // namespace blu::test

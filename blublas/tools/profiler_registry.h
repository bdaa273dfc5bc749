// profiler_registry.h: the blublas-profiler's command table. Each op family registers its
// subcommand from its own file (profile_<family>.cu) with a static BLUBLAS_PROFILER_COMMAND, so
// families are added without touching the driver (blublas_profiler.cu).
#pragma once

#include <functional>
#include <map>
#include <string>
#include <vector>

namespace blublas::profiler {

// Parsed "--key=value" and "--flag" arguments after the subcommand name.
struct Args {
  std::map<std::string, std::string> kv;
  std::string get(const std::string& k, const std::string& dflt) const {
    auto it = kv.find(k);
    return it == kv.end() ? dflt : it->second;
  }
  long long get_int(const std::string& k, long long dflt) const {
    auto it = kv.find(k);
    return it == kv.end() ? dflt : std::stoll(it->second);
  }
  double get_double(const std::string& k, double dflt) const {
    auto it = kv.find(k);
    return it == kv.end() ? dflt : std::stod(it->second);
  }
  bool has(const std::string& k) const { return kv.count(k) != 0; }
};

struct Command {
  std::string name;     // e.g. "gemm", "layernorm"
  std::string summary;  // one line for --help
  std::string usage;    // the flags it takes
  std::function<int(const Args&)> run;  // exit code
};

inline std::vector<Command>& registry() {
  static std::vector<Command> commands;
  return commands;
}

struct Registrar {
  explicit Registrar(Command c) { registry().push_back(std::move(c)); }
};

}  // namespace blublas::profiler

#define BLUBLAS_PROFILER_CONCAT2(a, b) a##b
#define BLUBLAS_PROFILER_CONCAT(a, b) BLUBLAS_PROFILER_CONCAT2(a, b)
#define BLUBLAS_PROFILER_COMMAND(...)                                                  \
  static ::blublas::profiler::Registrar BLUBLAS_PROFILER_CONCAT(blublas_profiler_reg_, \
                                                                __LINE__)(             \
      ::blublas::profiler::Command{__VA_ARGS__})

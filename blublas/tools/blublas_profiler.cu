// blublas_profiler.cu: the blublas-profiler driver (cutlass_profiler in spirit).
//
//   blublas-profiler <command> [--key=value ...] [--json]
//   blublas-profiler --help                 lists the commands
//   blublas-profiler <command> --help       prints that command's flags
//
// The commands come from the registry (profiler_registry.h): each op family registers its own from
// profile_<family>.cu, so this file never changes when a family is added. The driver only parses
// "--key=value" / "--flag" into Args (a bare "--flag" has the value "1") and dispatches; each
// command validates its own flags, prints one JSON object when --json is given, and returns the
// exit code (0 ok, 1 a blublas/CUDA error, 2 a usage error).
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <exception>
#include <stdexcept>
#include <string>

#include "profiler_registry.h"

namespace {

using blublas::profiler::Args;
using blublas::profiler::Command;
using blublas::profiler::registry;

void print_help() {
  std::printf("usage: blublas-profiler <command> [--key=value ...] [--json]\n\ncommands:\n");
  std::vector<Command> cmds = registry();
  std::sort(cmds.begin(), cmds.end(), [](const Command& a, const Command& b) { return a.name < b.name; });
  for (const Command& c : cmds) std::printf("  %-14s %s\n", c.name.c_str(), c.summary.c_str());
  std::printf("\n'blublas-profiler <command> --help' lists a command's flags.\n");
}

// One-line JSON string body: quotes and backslashes escaped, control characters dropped.
std::string json_escape(const std::string& s) {
  std::string o;
  for (char c : s) {
    if (c == '"' || c == '\\') { o += '\\'; o += c; }
    else if (static_cast<unsigned char>(c) >= 0x20) o += c;
  }
  return o;
}

int usage_error(const std::string& msg, bool json) {
  if (json) std::printf("{\"error\": \"%s\"}\n", json_escape(msg).c_str());
  std::fprintf(stderr, "blublas-profiler: %s\n", msg.c_str());
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  bool json = false;
  for (int i = 1; i < argc; ++i) json |= std::strcmp(argv[i], "--json") == 0;
  if (argc < 2 || std::strcmp(argv[1], "--help") == 0 || std::strcmp(argv[1], "-h") == 0 ||
      std::strcmp(argv[1], "help") == 0) {
    print_help();
    return argc < 2 ? 2 : 0;
  }
  const std::string name = argv[1];
  const Command* cmd = nullptr;
  for (const Command& c : registry())
    if (c.name == name) cmd = &c;
  if (cmd == nullptr) {
    std::string known;
    for (const Command& c : registry()) known += (known.empty() ? "" : ", ") + c.name;
    return usage_error("unknown command '" + name + "' (commands: " + known + "; see --help)", json);
  }
  Args args;
  for (int i = 2; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--help" || a == "-h") {
      std::printf("blublas-profiler %s: %s\nflags: %s\n", cmd->name.c_str(), cmd->summary.c_str(),
                  cmd->usage.c_str());
      return 0;
    }
    if (a.size() < 3 || a.compare(0, 2, "--") != 0)
      return usage_error(name + ": unexpected argument '" + a + "' (flags look like --key=value)", json);
    const size_t eq = a.find('=');
    const std::string key = a.substr(2, eq == std::string::npos ? std::string::npos : eq - 2);
    if (key.empty()) return usage_error(name + ": empty flag name in '" + a + "'", json);
    if (args.kv.count(key)) return usage_error(name + ": flag --" + key + " given twice", json);
    args.kv[key] = eq == std::string::npos ? "1" : a.substr(eq + 1);
  }
  try {
    return cmd->run(args);
  } catch (const std::invalid_argument&) {
    return usage_error(name + ": a numeric flag has a non-numeric value (see --help)", json);
  } catch (const std::out_of_range&) {
    return usage_error(name + ": a numeric flag is out of range", json);
  } catch (const std::exception& e) {
    if (json) std::printf("{\"command\": \"%s\", \"error\": \"%s\"}\n", name.c_str(), json_escape(e.what()).c_str());
    std::fprintf(stderr, "blublas-profiler %s: %s\n", name.c_str(), e.what());
    return 1;
  }
}

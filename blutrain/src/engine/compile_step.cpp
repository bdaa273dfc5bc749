// compile_step.cpp: blu-plan for `blutrain train --compile` (Note [blutrain --compile] in
// compile_step.h).
#include "engine/compile_step.h"

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "common/run_program.h"

namespace blu::train {
namespace fs = std::filesystem;

std::string find_blu_plan(std::string* searched) {
  std::vector<std::string> tried;
  if (const char* env = std::getenv("BLU_PLAN"); env != nullptr && *env != '\0') return env;
  tried.push_back("$BLU_PLAN (unset)");
  std::error_code ec;
  const fs::path self = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    for (const fs::path& p : {self.parent_path().parent_path() / "blucomp" / "blu-plan", self.parent_path() / "blu-plan"}) {
      if (fs::is_regular_file(p, ec) && ::access(p.c_str(), X_OK) == 0) return p.string();
      tried.push_back(p.string());
    }
  }
  for (std::string dirs = std::getenv("PATH") ? std::getenv("PATH") : ""; !dirs.empty();) {
    const std::size_t colon = dirs.find(':');
    const fs::path p = fs::path(dirs.substr(0, colon)) / "blu-plan";
    if (fs::is_regular_file(p, ec) && ::access(p.c_str(), X_OK) == 0) return p.string();
    dirs = colon == std::string::npos ? "" : dirs.substr(colon + 1);
  }
  tried.push_back("PATH");
  if (searched != nullptr) {
    std::ostringstream os;
    for (std::size_t i = 0; i < tried.size(); ++i) os << (i ? ", " : "") << tried[i];
    *searched = os.str();
  }
  return "";
}

bool compile_recorded_step(const std::string& graph_path, const std::string& out_dir, std::string* plan_json,
                           std::string* ptx_dir, std::string* why) {
  std::string searched;
  const std::string tool = find_blu_plan(&searched);
  if (tool.empty()) {
    *why = "no blu-plan (looked at " + searched +
           "; build with BLU_WITH_MLIR=ON, or set BLU_PLAN to the static one of scripts/blucomp-static.sh)";
    return false;
  }
  const std::string plan_path = (fs::path(out_dir) / "compiled_plan.json").string();
  const std::string ptx = (fs::path(out_dir) / "compiled_ptx").string();
  std::error_code ec;
  fs::remove(plan_path, ec);  // an earlier run's plan and PTX never pass for this one's
  fs::remove_all(ptx, ec);
  ec.clear();
  fs::create_directories(ptx, ec);
  if (ec) {
    *why = "cannot create " + ptx + ": " + ec.message();
    return false;
  }
  if (!run_program({tool, graph_path, "-o", plan_path, "--ptx-dir", ptx},
                   (fs::path(out_dir) / "compiled_plan.log").string(), true, "", why)) {
    return false;
  }
  std::ifstream in(plan_path);
  std::stringstream text;
  text << in.rdbuf();
  if (!in || text.str().empty()) {
    *why = tool + " wrote no plan at " + plan_path;
    return false;
  }
  *plan_json = text.str();
  *ptx_dir = ptx;
  return true;
}

}  // namespace blu::train

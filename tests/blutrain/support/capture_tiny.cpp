// capture_tiny (support/capture_tiny.h).
#include "support/capture_tiny.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "blutrain/trainer.h"

namespace fs = std::filesystem;

namespace blu::train::test {

Captured capture_tiny(const std::string& name, int64_t seq_len, const std::string& device) {
  blu::train::TrainConfig cfg;
  cfg.model = "tiny";
  cfg.device = device;
  cfg.data = "synthetic";
  cfg.batch_size = 2;
  cfg.seq_len = seq_len;
  blu::train::resolve_auto(cfg, device != "cpu");
  cfg.out_dir = (fs::temp_directory_path() / ("blu_capture_" + std::to_string(::getpid()) + name)).string();
  std::ostringstream log;
  Captured c;
  c.status = blu::train::run_capture(cfg, log);
  c.log = log.str();
  std::ifstream f(cfg.out_dir + "/step.json");
  std::stringstream text;
  text << f.rdbuf();
  c.graph = blu::capture::Graph::from_json(text.str());
  fs::remove_all(cfg.out_dir);
  return c;
}

std::string key_line(const std::string& log) {
  const size_t at = log.find("\nkey ");
  return at == std::string::npos ? "" : log.substr(at + 1, log.find('\n', at + 1) - at - 1);
}

}  // namespace blu::train::test

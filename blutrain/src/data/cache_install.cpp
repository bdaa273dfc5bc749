// cache_install.cpp: Note [Atomic data caches] (data/cache_install.h).
#include "data/cache_install.h"

#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <system_error>

namespace blu::train {

namespace fs = std::filesystem;

bool install_cache_dir(const std::string& dir, const std::function<void(const std::string& staging)>& build,
                       const std::function<bool(const std::string& dir)>& valid) {
  static std::atomic<int> serial{0};
  const fs::path final_dir(dir);
  if (final_dir.has_parent_path()) fs::create_directories(final_dir.parent_path());
  const std::string tag = std::to_string(::getpid()) + "-" + std::to_string(serial++);
  const fs::path staging = final_dir.string() + ".tmp-" + tag;
  std::error_code ec;
  fs::remove_all(staging, ec);
  fs::create_directories(staging);
  try {
    build(staging.string());
  } catch (...) {
    fs::remove_all(staging, ec);
    throw;
  }
  if (fs::exists(final_dir, ec)) {
    if (valid(dir)) {  // another process's copy arrived first: keep it
      fs::remove_all(staging, ec);
      return false;
    }
    const fs::path old = final_dir.string() + ".old-" + tag;
    fs::rename(final_dir, old, ec);  // fails only when another process moved it first: fine
    if (!ec) fs::remove_all(old, ec);
  }
  fs::rename(staging, final_dir, ec);
  if (ec) {  // another process installed its copy between the two renames
    fs::remove_all(staging, ec);
    return false;
  }
  return true;
}

}  // namespace blu::train

// checkpoint_dir.cpp: temp directory, rename into place, `latest` pointer, pruning
// (Note [Checkpoint layout] in blutrain/checkpoint_dir.h).
#include "blutrain/checkpoint_dir.h"

#include <fcntl.h>
#include <stdio.h>  // renameat2, RENAME_EXCHANGE (glibc >= 2.28)
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <vector>

#include "blutensor/error.h"
#include "blutrain/checkpoint_checksums.h"
#include "blutrain/files.h"

namespace blu::train {
namespace fs = std::filesystem;

std::string checkpoint_dir_name(int64_t step) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "step_%08lld", static_cast<long long>(step));
  return buf;
}

CheckpointStaging::CheckpointStaging(const std::string& out_dir, int64_t step)
    : CheckpointStaging(out_dir, step, std::to_string(::getpid()), true) {}

CheckpointStaging::CheckpointStaging(const std::string& out_dir, int64_t step, const std::string& tag, bool owner)
    : out_dir_(out_dir), owner_(owner) {
  const std::string name = checkpoint_dir_name(step);
  final_dir_ = (fs::path(out_dir) / name).string();
  tmp_dir_ = (fs::path(out_dir) / ("." + name + ".tmp-" + tag)).string();
  if (!owner_) return;
  std::error_code ec;
  fs::remove_all(tmp_dir_, ec);
  fs::create_directories(tmp_dir_, ec);
  BLU_CHECK(!ec, "checkpoint: cannot create '", tmp_dir_, "': ", ec.message());
}

CheckpointStaging::~CheckpointStaging() {
  if (owner_ && !committed_) {
    std::error_code ec;
    fs::remove_all(tmp_dir_, ec);
  }
}

std::string CheckpointStaging::file(const std::string& name) const {
  return (fs::path(tmp_dir_) / name).string();
}

std::string CheckpointStaging::commit(int keep) { return commit(keep, {}); }

std::string CheckpointStaging::commit(int keep, const std::map<std::string, FileChecksum>& known_sums) {
  BLU_CHECK(owner_, "checkpoint: '", tmp_dir_, "' is committed by the rank that created it");
  BLU_CHECK(!committed_, "checkpoint: '", final_dir_, "' committed twice");
  BLU_CHECK(file_exists(file("state.json")), "checkpoint: '", tmp_dir_, "' has no state.json; not committing");
  write_checksum_manifest(tmp_dir_, known_sums);  // Note [Checkpoint checksums]
  std::error_code ec;
  if (fs::exists(final_dir_) &&
      ::renameat2(AT_FDCWD, tmp_dir_.c_str(), AT_FDCWD, final_dir_.c_str(), RENAME_EXCHANGE) == 0) {
    // Same step written again (e.g. after a resume): swapped in one step, so a complete
    // step directory exists at every instant; the old one is now at tmp_dir_.
    fs::remove_all(tmp_dir_, ec);
  } else if (fs::exists(final_dir_)) {
    // A file system without RENAME_EXCHANGE: move the old one aside first (a crash between the
    // two renames leaves this step only as <name>.old-<pid>; earlier steps are untouched).
    const std::string aside = final_dir_ + ".old-" + std::to_string(::getpid());
    fs::rename(final_dir_, aside, ec);
    BLU_CHECK(!ec, "checkpoint: cannot move '", final_dir_, "' aside: ", ec.message());
    fs::rename(tmp_dir_, final_dir_, ec);
    if (ec) {
      fs::rename(aside, final_dir_);
      BLU_THROW("checkpoint: cannot rename '", tmp_dir_, "' to '", final_dir_, "': ", ec.message());
    }
    fs::remove_all(aside, ec);
  } else {
    fs::rename(tmp_dir_, final_dir_, ec);
    BLU_CHECK(!ec, "checkpoint: cannot rename '", tmp_dir_, "' to '", final_dir_, "': ", ec.message());
  }
  committed_ = true;
  write_file_atomic((fs::path(out_dir_) / "latest").string(), fs::path(final_dir_).filename().string() + "\n");
  // Prune: older complete checkpoints beyond `keep`, and stale temp directories of dead runs.
  std::vector<std::string> steps;
  for (const auto& entry : fs::directory_iterator(out_dir_, ec)) {
    const std::string n = entry.path().filename().string();
    if (entry.is_directory() && n.rfind("step_", 0) == 0 && n.find('.') == std::string::npos) {
      steps.push_back(n);
    } else if (entry.is_directory() && n.rfind(".step_", 0) == 0) {
      std::error_code ec2;
      fs::remove_all(entry.path(), ec2);
    }
  }
  std::sort(steps.begin(), steps.end());
  const std::string final_name = fs::path(final_dir_).filename().string();
  for (size_t i = 0; i + static_cast<size_t>(keep) < steps.size(); ++i) {
    if (steps[i] == final_name) continue;
    std::error_code ec2;
    fs::remove_all(fs::path(out_dir_) / steps[i], ec2);
  }
  return final_dir_;
}

std::string latest_checkpoint(const std::string& out_dir) {
  std::error_code ec;
  if (!fs::is_directory(out_dir, ec)) return "";
  const fs::path latest = fs::path(out_dir) / "latest";
  if (fs::exists(latest, ec)) {
    std::string name = read_file(latest.string(), "checkpoint pointer");
    while (!name.empty() && (name.back() == '\n' || name.back() == '\r' || name.back() == ' ')) name.pop_back();
    const fs::path dir = fs::path(out_dir) / name;
    if (!name.empty() && fs::exists(dir / "state.json", ec)) return dir.string();
  }
  std::string best;
  for (const auto& entry : fs::directory_iterator(out_dir, ec)) {
    const std::string n = entry.path().filename().string();
    if (entry.is_directory() && n.rfind("step_", 0) == 0 && n.find('.') == std::string::npos &&
        fs::exists(entry.path() / "state.json") && n > best) {
      best = n;
    }
  }
  return best.empty() ? "" : (fs::path(out_dir) / best).string();
}

}  // namespace blu::train

// files.cpp: read_file and the atomic writers (POSIX open/write/fsync/rename).
#include "blutrain/files.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "blutensor/error.h"

namespace blu::train {

std::string read_file(const std::string& path, std::string_view what) {
  std::ifstream in(path, std::ios::binary);
  BLU_CHECK(in.good(), what, ": cannot open '", path, "': ", std::strerror(errno));
  std::ostringstream ss;
  ss << in.rdbuf();
  BLU_CHECK(!in.bad(), what, ": error reading '", path, "'");
  return ss.str();
}

bool file_exists(const std::string& path) {
  std::error_code ec;
  return std::filesystem::exists(path, ec);
}

namespace {
void fsync_dir(const std::filesystem::path& dir) {
  int fd = ::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY);
  if (fd >= 0) {
    (void)::fsync(fd);
    ::close(fd);
  }
}
}  // namespace

json::Value parse_json(const std::string& text, std::string_view what) {
  try {
    return json::parse(text);
  } catch (const blu::Error& e) {
    BLU_THROW(what, ": malformed JSON: ", e.what());
  }
}

const json::Value& json_member(const json::Value& object, const std::string& key, std::string_view what) {
  const json::Value* v = object.is_object() ? object.find(key) : nullptr;
  BLU_CHECK(v != nullptr, what, ": missing key \"", key, "\"");
  return *v;
}

void write_file_atomic(const std::string& path, std::string_view bytes) {
  namespace fs = std::filesystem;
  fs::path target(path);
  fs::path dir = target.parent_path();
  if (!dir.empty()) fs::create_directories(dir);
  std::string tmp = path + ".tmp." + std::to_string(::getpid());
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  BLU_CHECK(fd >= 0, "write '", path, "': cannot create '", tmp, "': ", std::strerror(errno));
  size_t done = 0;
  while (done < bytes.size()) {
    ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      int e = errno;
      ::close(fd);
      ::unlink(tmp.c_str());
      BLU_THROW("write '", path, "': write failed: ", std::strerror(e));
    }
    done += static_cast<size_t>(n);
  }
  if (::fsync(fd) != 0 || ::close(fd) != 0) {
    int e = errno;
    ::unlink(tmp.c_str());
    BLU_THROW("write '", path, "': fsync/close failed: ", std::strerror(e));
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    int e = errno;
    ::unlink(tmp.c_str());
    BLU_THROW("write '", path, "': rename failed: ", std::strerror(e));
  }
  fsync_dir(dir);
}

}  // namespace blu::train

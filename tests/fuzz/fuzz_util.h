// fuzz_util.h: helpers shared by the fuzz targets: an in-memory file (memfd) for parsers that take
// a path, and splitting one input into several files.
//
// Note [Fuzzing parsers that read paths]
//   Several parsers take a file name (token shards are mmap'ed, the tokenizer and the config
//   reader open paths). Rather than copy their code into a bytes-in variant, a target writes the
//   input into a memfd and passes "/proc/self/fd/<n>": the real open/stat/mmap/read path runs, no
//   disk is touched, and nothing is left behind. Inputs that stand for several files are split
//   at NUL bytes (none of the text formats involved holds a NUL), which libFuzzer's mutations
//   keep or create easily.
#pragma once

#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

namespace blu_fuzz {

// One reusable in-memory file; set() replaces its contents.
class MemFile {
 public:
  explicit MemFile(const char* name) : fd_(::memfd_create(name, MFD_CLOEXEC)) {
    if (fd_ < 0) {
      std::perror("memfd_create");
      std::abort();
    }
    path_ = "/proc/self/fd/" + std::to_string(fd_);
  }
  MemFile(const MemFile&) = delete;
  MemFile& operator=(const MemFile&) = delete;
  const std::string& set(std::string_view bytes) {
    if (::ftruncate(fd_, 0) != 0 ||
        (!bytes.empty() && ::pwrite(fd_, bytes.data(), bytes.size(), 0) != static_cast<ssize_t>(bytes.size()))) {
      std::perror("memfd write");
      std::abort();
    }
    return path_;
  }
  const std::string& path() const { return path_; }

 private:
  int fd_;
  std::string path_;
};

// The input as `parts` pieces cut at the first parts-1 NUL bytes (missing pieces are empty).
inline std::vector<std::string_view> split_at_nul(const uint8_t* data, size_t size, size_t parts) {
  std::string_view rest(reinterpret_cast<const char*>(data), size);
  std::vector<std::string_view> out;
  while (out.size() + 1 < parts) {
    const size_t nul = rest.find('\0');
    if (nul == std::string_view::npos) break;
    out.push_back(rest.substr(0, nul));
    rest.remove_prefix(nul + 1);
  }
  out.push_back(rest);
  out.resize(parts);
  return out;
}

}  // namespace blu_fuzz

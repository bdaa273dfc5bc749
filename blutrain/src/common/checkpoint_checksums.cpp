// checkpoint_checksums.cpp: writing and checking checksums.crc32c (Note [Checkpoint checksums] in
// blutrain/checkpoint_checksums.h).
#include "blutrain/checkpoint_checksums.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <vector>

#include "blutensor/crc32c.h"
#include "blutensor/error.h"
#include "blutensor/safetensors.h"
#include "blutrain/files.h"

namespace blu::train {
namespace fs = std::filesystem;
namespace {

constexpr const char* kManifestHeader = "# blutrain checkpoint manifest v1: crc32c bytes name";

using FileSum = FileChecksum;

FileSum sum_of_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  BLU_CHECK(in.good(), "checkpoint: cannot read '", path, "' to checksum it");
  std::vector<char> buf(1u << 20);
  FileSum s;
  while (in) {
    in.read(buf.data(), static_cast<std::streamsize>(buf.size()));
    const auto n = static_cast<size_t>(in.gcount());
    s.crc = crc32c(buf.data(), n, s.crc);
    s.bytes += n;
  }
  BLU_CHECK(!in.bad(), "checkpoint: error reading '", path, "'");
  return s;
}

std::map<std::string, FileSum> read_manifest(const std::string& dir) {
  const std::string path = (fs::path(dir) / kChecksumManifest).string();
  std::istringstream in(read_file(path, "checkpoint manifest"));
  std::map<std::string, FileSum> out;
  std::string line;
  int line_no = 0;
  while (std::getline(in, line)) {
    ++line_no;
    if (line_no == 1) {
      BLU_CHECK(line == kManifestHeader, "checkpoint manifest '", path, "': line 1 is not '",
                kManifestHeader, "' (damaged manifest)");
      continue;
    }
    std::istringstream ls(line);
    std::string hex, name;
    uint64_t bytes = 0;
    FileSum s;
    BLU_CHECK((ls >> hex >> bytes >> name) && crc32c_from_hex(hex, s.crc) && ls.eof(),
              "checkpoint manifest '", path, "': line ", line_no, " is malformed: '", line,
              "' (damaged manifest)");
    s.bytes = bytes;
    out[name] = s;
  }
  return out;
}

}  // namespace

void write_checksum_manifest(const std::string& dir, const std::map<std::string, FileChecksum>& known) {
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(dir)) {
    const std::string n = entry.path().filename().string();
    if (entry.is_regular_file() && n != kChecksumManifest && n.find(".tmp.") == std::string::npos)
      names.push_back(n);
  }
  std::sort(names.begin(), names.end());
  std::ostringstream os;
  os << kManifestHeader << "\n";
  for (const std::string& n : names) {
    BLU_CHECK(n.find_first_of(" \t\r\n") == std::string::npos, "checkpoint: file name '", n,
              "' has whitespace");
    const auto k = known.find(n);
    const FileSum s = k != known.end() ? k->second : sum_of_file((fs::path(dir) / n).string());
    os << crc32c_hex(s.crc) << " " << s.bytes << " " << n << "\n";
  }
  for (const auto& [n, sum] : known) {
    BLU_CHECK(std::binary_search(names.begin(), names.end(), n), "checkpoint: '", (fs::path(dir) / n).string(),
              "' is missing at commit (its rank reported ", sum.bytes, " bytes written)");
  }
  write_file_atomic((fs::path(dir) / kChecksumManifest).string(), os.str());
}

bool manifest_checksum(const std::string& dir, const std::string& name, FileChecksum* out) {
  if (!has_checksum_manifest(dir)) return false;
  const auto manifest = read_manifest(dir);
  const auto it = manifest.find(name);
  BLU_CHECK(it != manifest.end(), "checkpoint file '", (fs::path(dir) / name).string(), "' is not listed in '",
            kChecksumManifest, "' (damaged manifest, or a file added after the checkpoint was written)");
  *out = it->second;
  return true;
}

bool has_checksum_manifest(const std::string& dir) {
  return file_exists((fs::path(dir) / kChecksumManifest).string());
}

std::string read_checkpoint_file(const std::string& dir, const std::string& name,
                                 std::string_view what) {
  const std::string path = (fs::path(dir) / name).string();
  std::string bytes = read_file(path, what);
  if (!has_checksum_manifest(dir)) return bytes;
  const auto manifest = read_manifest(dir);
  const auto it = manifest.find(name);
  BLU_CHECK(it != manifest.end(), "checkpoint file '", path, "' is not listed in '",
            kChecksumManifest,
            "' (damaged manifest, or a file added after the checkpoint was written)");
  const FileSum& expected = it->second;
  BLU_CHECK(bytes.size() == expected.bytes, "checkpoint file '", path, "' is ", bytes.size(),
            " bytes, the manifest says ", expected.bytes, " (truncated or damaged file)");
  const uint32_t found = crc32c(bytes.data(), bytes.size());
  if (found != expected.crc) {
    if (name.size() > 12 && name.ends_with(".safetensors")) {
      parse_safetensors(
          bytes, "'" + path + "'");  // throws naming the damaged tensor or header when it can
    }
    BLU_THROW("checkpoint file '", path, "': checksum mismatch (whole file",
              name.ends_with(".safetensors") ? ", outside the checksummed tensors and header" : "",
              "): crc32c expected ", crc32c_hex(expected.crc), ", found ", crc32c_hex(found),
              "; the file is damaged");
  }
  return bytes;
}

}  // namespace blu::train

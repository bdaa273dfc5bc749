// sharded_reader.cpp: ranged, checked reads of a sharded checkpoint (Note [Sharded checkpoints] in
// sharded_checkpoint.h): every shard file stat'ed against the manifest up front, then per file
// one header read and per slice one pread of its bytes, CRC-checked before use.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "blutensor/autograd.h"
#include "blutensor/error.h"
#include "blutrain/checkpoint_checksums.h"
#include "blutrain/files.h"
#include "train/sharded_checkpoint.h"

namespace blu::train {
namespace fs = std::filesystem;

struct ShardedCheckpointReader::OpenFile {
  std::string path;
  int fd = -1;
  uint64_t size = 0;
  SafetensorsHeader header;
  ~OpenFile() {
    if (fd >= 0) ::close(fd);
  }
};

namespace {

// Reads exactly n bytes at offset; errors name the file.
void pread_all(int fd, char* dst, uint64_t n, uint64_t offset, const std::string& path) {
  uint64_t done = 0;
  while (done < n) {
    const ssize_t got = ::pread(fd, dst + done, n - done, static_cast<off_t>(offset + done));
    if (got < 0 && errno == EINTR) continue;
    BLU_CHECK(got > 0, "checkpoint file '", path, "': read of ", n, " bytes at offset ", offset, " failed",
              got < 0 ? std::string(": ") + std::strerror(errno) : std::string(" (file ends early: truncated?)"));
    done += static_cast<uint64_t>(got);
  }
}

}  // namespace

ShardedCheckpointReader::ShardedCheckpointReader(std::string dir) : dir_(std::move(dir)) {
  const std::string index_path = (fs::path(dir_) / kShardIndexFile).string();
  index_ = ShardIndex::from_json(read_checkpoint_file(dir_, kShardIndexFile, "shard index"), index_path);
  for (int r = 0; r < index_.world_size; ++r) {
    for (const TensorSlice& s : index_.rank_slices[static_cast<std::size_t>(r)]) {
      by_tensor_[s.tensor].push_back({r, s});
      bytes_total_ += static_cast<uint64_t>(s.end - s.begin) * sizeof(float);
    }
  }
  for (auto& [name, slices] : by_tensor_) {
    std::sort(slices.begin(), slices.end(), [](const auto& a, const auto& b) { return a.second.begin < b.second.begin; });
  }
  // Every file, before a byte is read: present, and of the size the manifest recorded.
  for (int r = 0; r < index_.world_size; ++r) {
    for (const char* kind : kShardKinds) {
      const std::string name = shard_file_name(kind, r, index_.world_size);
      const std::string path = (fs::path(dir_) / name).string();
      struct stat st {};
      BLU_CHECK(::stat(path.c_str(), &st) == 0, "checkpoint '", dir_, "': shard file '", path, "' is missing (rank ",
                r, " of ", index_.world_size, "'s ", kind, " shard, listed in ", kShardIndexFile,
                "); the checkpoint is incomplete: resume from an earlier one");
      FileChecksum sum;
      if (manifest_checksum(dir_, name, &sum)) {
        BLU_CHECK(static_cast<uint64_t>(st.st_size) == sum.bytes, "checkpoint file '", path, "' is ", st.st_size,
                  " bytes, the manifest says ", sum.bytes, " (truncated or damaged file)");
      }
    }
  }
}

ShardedCheckpointReader::~ShardedCheckpointReader() = default;

ShardedCheckpointReader::OpenFile& ShardedCheckpointReader::open(int rank, const std::string& kind) {
  const std::string name = shard_file_name(kind, rank, index_.world_size);
  auto& slot = files_[name];
  if (slot) return *slot;
  auto f = std::make_unique<OpenFile>();
  f->path = (fs::path(dir_) / name).string();
  f->fd = ::open(f->path.c_str(), O_RDONLY | O_CLOEXEC);
  BLU_CHECK(f->fd >= 0, "checkpoint file '", f->path, "': cannot open: ", std::strerror(errno));
  struct stat st {};
  BLU_CHECK(::fstat(f->fd, &st) == 0, "checkpoint file '", f->path, "': cannot stat: ", std::strerror(errno));
  f->size = static_cast<uint64_t>(st.st_size);
  const std::string what = "'" + f->path + "'";
  std::string head(std::min<uint64_t>(8, f->size), '\0');
  pread_all(f->fd, head.data(), head.size(), 0, f->path);
  head.resize(safetensors_header_bytes(head, f->size, what));
  pread_all(f->fd, head.data() + 8, head.size() - 8, 8, f->path);
  f->header = parse_safetensors_header(head, f->size, what);
  const auto meta = [&](const char* key) {
    const auto it = f->header.metadata.find(key);
    return it == f->header.metadata.end() ? std::string("(none)") : it->second;
  };
  BLU_CHECK(meta("blutrain_shard_rank") == std::to_string(rank) &&
                meta("blutrain_world_size") == std::to_string(index_.world_size),
            "checkpoint file '", f->path, "' holds the shard of rank ", meta("blutrain_shard_rank"), " of ",
            meta("blutrain_world_size"), ", not rank ", rank, " of ", index_.world_size,
            " (a file copied from another checkpoint?)");
  slot = std::move(f);
  return *slot;
}

Tensor ShardedCheckpointReader::slice_values(int rank, const TensorSlice& s) {
  const ShardedTensorInfo& info = index_.tensors.at(s.tensor);
  OpenFile& f = open(rank, info.kind);
  const std::string name = slice_name(s.tensor, s.begin);
  const std::string key = f.path + "\n" + name;
  if (key == cached_key_) return cached_;
  const auto e = f.header.entries.find(name);
  BLU_CHECK(e != f.header.entries.end(), "checkpoint file '", f.path, "': no tensor '", name, "' (", kShardIndexFile,
            " lists elements [", s.begin, ", ", s.end, ") of '", s.tensor, "' there)");
  BLU_CHECK(e->second.dtype == kFloat32 && e->second.shape == Shape{s.end - s.begin}, "checkpoint file '", f.path,
            "': tensor '", name, "' is ", dtype_name(e->second.dtype), shape_str(e->second.shape), ", expected F32[",
            s.end - s.begin, "]");
  Tensor out = empty({s.end - s.begin}, kFloat32);
  const uint64_t n = e->second.end - e->second.begin;
  pread_all(f.fd, static_cast<char*>(out.data_ptr()), n, f.header.data_start + e->second.begin, f.path);
  verify_safetensors_tensor(f.header, name, out.data_ptr(), n, "'" + f.path + "'");
  bytes_read_ += n;
  cached_key_ = key;
  cached_ = out;
  return out;
}

void ShardedCheckpointReader::expect(const std::string& name, const Shape& shape) const {
  const auto t = index_.tensors.find(name);
  BLU_CHECK(t != index_.tensors.end(), "checkpoint '", dir_, "': ", kShardIndexFile, " has no tensor '", name,
            "' (a checkpoint of a different model?)");
  BLU_CHECK(t->second.shape == shape, "checkpoint '", dir_, "': tensor '", name, "' is ", shape_str(t->second.shape),
            ", this model's is ", shape_str(shape), " (a checkpoint of a different model?)");
}

Tensor ShardedCheckpointReader::read(const std::string& name, int64_t begin, int64_t end) {
  const auto t = index_.tensors.find(name);
  BLU_CHECK(t != index_.tensors.end(), "checkpoint '", dir_, "': ", kShardIndexFile, " has no tensor '", name, "'");
  BLU_CHECK(0 <= begin && begin <= end && end <= shape_numel(t->second.shape), "checkpoint '", dir_,
            "': elements [", begin, ", ", end, ") of '", name, "' are outside its ", shape_numel(t->second.shape));
  Tensor out = empty({end - begin}, kFloat32);
  NoGradGuard no_grad;
  for (const auto& [rank, s] : by_tensor_[name]) {  // sorted, tiling [0, numel) (checked by from_json)
    if (s.end <= begin) continue;
    if (s.begin >= end) break;
    const int64_t lo = std::max(begin, s.begin), hi = std::min(end, s.end);
    out.narrow(0, lo - begin, hi - lo).copy_(slice_values(rank, s).narrow(0, lo - s.begin, hi - lo));
  }
  return out;
}

Tensor ShardedCheckpointReader::read_whole(const std::string& name) {
  const auto t = index_.tensors.find(name);
  BLU_CHECK(t != index_.tensors.end(), "checkpoint '", dir_, "': ", kShardIndexFile, " has no tensor '", name, "'");
  return read(name, 0, shape_numel(t->second.shape)).view(t->second.shape);
}

void load_whole_from_shards(ShardedCheckpointReader& reader, GPT2& model, AdamW* opt) {
  NoGradGuard no_grad;
  const std::vector<NamedParam> params = model.parameters();
  for (std::size_t i = 0; i < params.size(); ++i) {
    const std::string& name = params[i].name;
    Tensor p = params[i].tensor->detach();
    reader.expect(name, p.sizes());
    p.copy_(reader.read_whole(name));
    if (opt == nullptr) continue;
    for (int which = 0; which < 2; ++which) {
      const std::string moment = (which == 0 ? "exp_avg." : "exp_avg_sq.") + name;
      Tensor& dst = which == 0 ? opt->exp_avg()[i] : opt->exp_avg_sq()[i];
      reader.expect(moment, dst.sizes());
      dst.copy_(reader.read_whole(moment));
    }
  }
}

}  // namespace blu::train

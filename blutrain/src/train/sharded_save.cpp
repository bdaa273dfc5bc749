// sharded_save.cpp: the collective write and commit of a sharded checkpoint (Note [Sharded
// checkpoints] in sharded_checkpoint.h): one staging directory for all ranks, each rank's files
// fsync'ed before the all-gather that is the barrier, rank 0's rename after it.
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <string>

#include "bludist/process_group.h"
#include "blutensor/crc32c.h"
#include "blutensor/error.h"
#include "blutensor/ops.h"
#include "blutrain/checkpoint_checksums.h"
#include "blutrain/checkpoint_dir.h"
#include "blutrain/files.h"
#include "train/data_parallel.h"
#include "train/sharded_checkpoint.h"

namespace blu::train {
namespace {

// Test hook: BLUTRAIN_TEST_DIE_IN_CHECKPOINT=RANK@STEP makes that rank write half of its optimizer
// shard of that step's checkpoint and exit at once (status 3), as a crash mid-write would.
void maybe_die_mid_write(int rank, int64_t step, const std::string& path, const std::string& bytes) {
  const char* v = std::getenv("BLUTRAIN_TEST_DIE_IN_CHECKPOINT");
  if (v == nullptr) return;
  const std::string s = v;
  const std::size_t at = s.find('@');
  if (at == std::string::npos || std::atoi(s.substr(0, at).c_str()) != rank ||
      std::atoll(s.substr(at + 1).c_str()) != step)
    return;
  FILE* f = std::fopen(path.c_str(), "wb");
  if (f != nullptr) {
    std::fwrite(bytes.data(), 1, bytes.size() / 2, f);
    std::fclose(f);
  }
  std::fprintf(stderr, "BLUTRAIN_TEST_DIE_IN_CHECKPOINT: rank %d dies writing %s\n", rank, path.c_str());
  ::_exit(3);
}

}  // namespace

std::string save_sharded_checkpoint(bludist::ProcessGroup& pg, const std::string& out_dir, int keep, int64_t step,
                                    const ShardIndex& index,
                                    const std::map<std::string, std::map<std::string, Tensor>>& mine,
                                    const std::map<std::string, std::string>& rank0_files) {
  const int rank = pg.rank(), world = pg.size();
  const bool owner = rank == 0;
  // One staging directory for the gang: rank 0's pid names it (the ranks may not share pids).
  const double pid = all_reduce_double(pg, owner ? static_cast<double>(::getpid()) : 0.0);
  const std::string tag = std::to_string(static_cast<long long>(pid)) + "-sharded";
  if (owner) std::filesystem::create_directories(out_dir);
  CheckpointStaging staging(out_dir, step, tag, owner);
  pg.barrier();  // the directory exists

  // This rank's two files, each written atomically (fsync'ed), summed from the bytes written.
  std::vector<double> report = {1.0};
  std::string error;
  try {
    for (const char* kind : kShardKinds) {
      const auto it = mine.find(kind);
      const std::string name = shard_file_name(kind, rank, world);
      const std::string bytes = serialize_safetensors(
          it != mine.end() ? it->second : std::map<std::string, Tensor>{},
          {{"format", "pt"}, {"blutrain_shard_rank", std::to_string(rank)}, {"blutrain_world_size", std::to_string(world)}},
          Checksums::kCrc32c);
      if (std::string(kind) == "optimizer") maybe_die_mid_write(rank, step, staging.file(name), bytes);
      write_file_atomic(staging.file(name), bytes);
      report.push_back(static_cast<double>(crc32c(bytes.data(), bytes.size())));
      report.push_back(static_cast<double>(bytes.size()));
    }
  } catch (const blu::Error& e) {
    error = e.what();
    report.assign(5, 0.0);
  }
  // The barrier: after it every rank's shards are durable; rank 0 learns their sums.
  Tensor all = zeros({5 * world}, TensorOptions(kFloat64).device(pg.device()));
  pg.all_gather(all, from_vector(report, {5}, TensorOptions(kFloat64)).to(pg.device()));
  const std::vector<double> sums = all.to_double_vector();
  for (int r = 0; r < world; ++r) {
    if (sums[static_cast<std::size_t>(5 * r)] != 1.0) {
      BLU_CHECK(error.empty(), "sharded checkpoint of step ", step, ": rank ", rank, " could not write its shards: ",
                error);
      BLU_THROW("sharded checkpoint of step ", step, ": rank ", r,
                " could not write its shards (its error says why); the previous checkpoint stays the latest");
    }
  }

  // Rank 0: the index and state, the manifest, the rename.
  std::string commit_error;
  if (owner) {
    try {
      std::map<std::string, FileChecksum> known;
      for (int r = 0; r < world; ++r) {
        for (int k = 0; k < 2; ++k) {
          const double* s = &sums[static_cast<std::size_t>(5 * r + 1 + 2 * k)];
          known[shard_file_name(kShardKinds[k], r, world)] = {static_cast<uint32_t>(s[0]), static_cast<uint64_t>(s[1])};
        }
      }
      write_file_atomic(staging.file(kShardIndexFile), index.to_json());
      for (const auto& [name, text] : rank0_files)
        if (name != "state.json") write_file_atomic(staging.file(name), text);
      const auto state = rank0_files.find("state.json");
      BLU_CHECK(state != rank0_files.end(), "save_sharded_checkpoint: no state.json");
      write_file_atomic(staging.file("state.json"), state->second);  // last: marks a complete checkpoint
      staging.commit(keep, known);
    } catch (const blu::Error& e) {
      commit_error = e.what();
    }
  }
  const double committed = all_reduce_double(pg, owner && commit_error.empty() ? 1.0 : 0.0);
  BLU_CHECK(commit_error.empty(), commit_error);
  BLU_CHECK(committed == 1.0, "sharded checkpoint of step ", step,
            ": rank 0 could not commit it (its error says why); the previous checkpoint stays the latest");
  return (std::filesystem::path(out_dir) / checkpoint_dir_name(step)).string();
}

}  // namespace blu::train

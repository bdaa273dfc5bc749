// bludist/env.h: the launch environment (torchrun's variables, set by blurun, torchrun or derived
// from Slurm's) and init_process_group, which turns it into the world ProcessGroup.
//
// Note [Rendezvous]
// Rank 0 hosts the TCP store on MASTER_PORT (all interfaces); every rank, rank 0 included,
// connects to MASTER_ADDR:MASTER_PORT. Keys live under "run<restart>/" so a restarted gang
// (blurun --max-restarts) never reads a previous attempt's keys. The store server belongs to
// the world group of rank 0 and lives as long as that group.
#pragma once

#include <memory>
#include <string>

#include "bludist/process_group.h"

namespace bludist {

struct DistEnv {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  int local_world_size = 1;
  int node_rank = 0;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  int restart_count = 0;  // BLURUN_RESTART_COUNT / TORCHELASTIC_RESTART_COUNT
  // RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, GROUP_RANK/NODE_RANK, MASTER_ADDR, MASTER_PORT;
  // where RANK is unset, Slurm's SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID, SLURM_NTASKS_PER_NODE,
  // SLURM_NODEID (MASTER_ADDR/PORT must still be set). Nothing set: a single process.
  // Throws blu::Error on malformed or inconsistent values.
  static DistEnv from_environment();
  std::string describe() const;
};

struct InitOptions {
  ProcessGroupOptions group;
  // NCCL: the CUDA device of this rank (-1: LOCAL_RANK). Made current for the calling thread.
  int device = -1;
};

// Builds the world group of `backend` from the environment (Note [Rendezvous]).
std::shared_ptr<ProcessGroup> init_process_group(Backend backend, const InitOptions& options = {});
std::shared_ptr<ProcessGroup> init_process_group(Backend backend, const DistEnv& env,
                                                 const InitOptions& options = {});

}  // namespace bludist

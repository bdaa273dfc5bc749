// data_parallel.cpp: --dp / --zero through bludist (Note [Data-parallel training] in
// data_parallel.h): the launch checks, DDP or ZeRO-1 around blutrain's AdamW, the per-step report.
#include "train/data_parallel.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>

#include "bludist/ddp.h"
#include "bludist/env.h"
#include "bludist/process_group.h"
#include "bludist/zero.h"
#include "blutensor/autograd.h"
#include "blutensor/error.h"
#include "blutensor/ops.h"

namespace blu::train {

LaunchInfo launch_info_from_environment() {
  const bludist::DistEnv e = bludist::DistEnv::from_environment();
  LaunchInfo l;
  l.rank = e.rank;
  l.world_size = e.world_size;
  l.local_rank = e.local_rank;
  l.launched = std::getenv("RANK") != nullptr || std::getenv("SLURM_PROCID") != nullptr;
  return l;
}

namespace {
// The model-parallel part of the mesh: --tp or --cp (config.cpp refuses both), and its flags.
int mesh_columns(const TrainConfig& cfg) { return cfg.tp > 1 ? cfg.tp : cfg.cp; }
std::string mesh_flags(const TrainConfig& cfg) {
  if (cfg.tp > 1) return blu::detail::str_cat("--dp ", cfg.dp, " --tp ", cfg.tp);
  if (cfg.cp > 1) return blu::detail::str_cat("--dp ", cfg.dp, " --cp ", cfg.cp);
  return blu::detail::str_cat("--dp ", cfg.dp);
}
}  // namespace

void check_data_parallel_launch(const TrainConfig& cfg, const LaunchInfo& launch) {
  const int ranks = cfg.dp * mesh_columns(cfg);  // config.cpp bounds the product
  if (mesh_columns(cfg) > 1) {  // a dp x tp or dp x cp mesh (Note [Tensor-parallel training] in tensor_parallel.h)
    const std::string flags = mesh_flags(cfg);
    BLU_CHECK(launch.launched, flags, " needs ", ranks,
              " processes, one per rank, but this process was not started by a launcher (WORLD_SIZE is not set): "
              "run blurun --nproc-per-node ", ranks, " -- blutrain train ", flags, " ...");
    BLU_CHECK(launch.world_size == ranks, flags, " needs WORLD_SIZE = dp x ", cfg.tp > 1 ? "tp" : "cp", " = ", ranks,
              " but the launcher started ", launch.world_size, " (blurun --nproc-per-node ", ranks, ")");
  } else if (cfg.dp > 1) {
    BLU_CHECK(launch.launched, "--dp ", cfg.dp,
              " needs one process per rank, but this process was not started by a "
              "launcher (WORLD_SIZE is not set): run blurun --nproc-per-node ",
              cfg.dp, " -- blutrain train --dp ", cfg.dp, " ...");
    BLU_CHECK(launch.world_size == cfg.dp, "--dp ", cfg.dp,
              " does not match WORLD_SIZE=", launch.world_size,
              " from the launcher: start as many processes as --dp says (blurun --nproc-per-node ",
              cfg.dp, ") or pass --dp ", launch.world_size);
  } else {
    BLU_CHECK(launch.world_size == 1, "this process is rank ", launch.rank,
              " of WORLD_SIZE=", launch.world_size, " but --dp is ", cfg.dp, ": pass --dp ",
              launch.world_size, " for data-parallel training, or --tp ", launch.world_size,
              " for tensor-parallel training (or start a single process)");
  }
  const bool on_gpu = cfg.device.rfind("cuda", 0) == 0;
  BLU_CHECK(ranks == 1 || !on_gpu || cfg.device == "cuda", "--device ", cfg.device, " with ", ranks,
            " ranks: each rank trains on cuda:LOCAL_RANK; pass --device cuda");
}

std::shared_ptr<bludist::ProcessGroup> join_world_group(const TrainConfig& cfg, int* device_index) {
  const LaunchInfo launch = launch_info_from_environment();
  check_data_parallel_launch(cfg, launch);
  *device_index = -1;
  const int ranks = cfg.dp * mesh_columns(cfg);
  if (ranks == 1) return nullptr;
  const std::string flags = mesh_flags(cfg);
  const bool on_gpu = cfg.device.rfind("cuda", 0) == 0;
  if (on_gpu) {
    BLU_CHECK(bludist::nccl_available(), flags, " on --device ", cfg.device,
              ": this build has no NCCL (bludist's GPU process groups); train on the CPU ranks "
              "(--device cpu) "
              "or rebuild with NCCL");
    *device_index = launch.local_rank;
    return bludist::init_process_group(bludist::Backend::kNccl);
  }
  BLU_CHECK(bludist::gloo_available(), flags,
            " on the CPU: this build has no Gloo (libgloo-dev), which "
            "bludist's CPU process groups need");
  return bludist::init_process_group(bludist::Backend::kGloo);
}

std::unique_ptr<DataParallel> DataParallel::create(const TrainConfig& cfg,
                                                   std::shared_ptr<bludist::ProcessGroup> group,
                                                   int device_index) {
  // Note [Context-parallel training]: under --cp the gradients are averaged over all dp x cp ranks.
  const int ranks = cfg.dp * cfg.cp;
  if (ranks == 1) return nullptr;
  BLU_CHECK(group && group->size() == ranks, "DataParallel: expected a group of ", ranks, " ranks (--dp ", cfg.dp,
            " x --cp ", cfg.cp, ")");
  std::unique_ptr<DataParallel> dp(new DataParallel());
  dp->cfg_ = &cfg;
  dp->device_index_ = device_index;
  dp->pg_ = std::move(group);
  return dp;
}

DataParallel::~DataParallel() = default;

int DataParallel::rank() const {
  return pg_->rank();
}
int DataParallel::size() const {
  return pg_->size();
}
void DataParallel::barrier() {
  pg_->barrier();
}

std::string DataParallel::describe() const {
  return blu::detail::str_cat(
      "data parallel over ", size(), " ranks (", bludist::backend_name(pg_->backend()), "), ",
      cfg_->zero == 3           ? "ZeRO-3 (weights, gradients and AdamW state sharded; each block gathered in forward "
                                  "and again in backward, where it is recomputed)"
      : cfg_->zero == 1         ? "ZeRO-1 (AdamW state sharded)"
      : cfg_->zero == 2         ? "ZeRO-2 (AdamW state and gradients sharded, reduce-scattered in backward)"
      : cfg_->engine == "fused" ? "gradient buckets all-reduced inside the fused step's backward"
                                : "DDP buckets in backward");
}

namespace {
std::vector<Tensor> tensors_of(const std::vector<NamedParam>& params) {
  std::vector<Tensor> out;
  for (const NamedParam& p : params) out.push_back(*p.tensor);
  return out;
}
// Whole moments of `opt` as one flat vector in parameter order (ZeroAdamW's layout).
Tensor flatten(const std::vector<Tensor>& parts, Device device) {
  std::vector<Tensor> flat;
  for (const Tensor& t : parts) flat.push_back(t.reshape({-1}));
  return cat(flat, 0).to(device);
}
}  // namespace

// Note [Failing together]
// A part of the resume that some ranks can fail while the others succeed (rank 0 reading the
// weights it is about to broadcast, each rank reading its own shard slices: a damaged file is seen
// by the rank that reads it) must not leave the others in their next collective: they would fail
// there with a transport error ("connection closed by peer") and the launcher, seeing that rank's
// exit first, would stop the one that knows what happened before it printed (session 15: the
// damaged-shard test lost rank 0's checksum message this way in 2 of 3 runs). So each such part
// runs on every rank, the ranks then all-gather a flag and the start of their message, and every
// rank throws the first failing rank's message (naming that rank) when any failed.
void DataParallel::fail_together(const std::function<void()>& part) {
  std::string error;
  try {
    part();
  } catch (const blu::Error& e) {
    error = e.what();
  }
  constexpr int64_t kChars = 2047;  // of each rank's message (a longer one is cut)
  const int64_t row = kChars + 1;   // flag, then one char per element
  std::vector<double> mine(static_cast<std::size_t>(row), 0.0);
  mine[0] = error.empty() ? 0.0 : 1.0;
  for (std::size_t i = 0; i < error.size() && i < static_cast<std::size_t>(kChars); ++i)
    mine[i + 1] = static_cast<double>(static_cast<unsigned char>(error[i]));
  const int n = size();
  Tensor all = zeros({n * row}, TensorOptions(kFloat64).device(pg_->device()));
  pg_->all_gather(all, from_vector(mine, {row}, TensorOptions(kFloat64)).to(pg_->device()));
  const std::vector<double> v = all.to_double_vector();
  if (!error.empty()) BLU_THROW(error);
  for (int r = 0; r < n; ++r) {
    const double* f = &v[static_cast<std::size_t>(r * row)];
    if (f[0] == 0.0) continue;
    std::string msg;
    for (int64_t i = 1; i < row && f[i] != 0.0; ++i) msg.push_back(static_cast<char>(static_cast<unsigned char>(f[i])));
    BLU_THROW(msg, " (rank ", r, " of the data-parallel group failed this; rank ", rank(), " stops with it)");
  }
}

void DataParallel::attach(GPT2& model, AdamW& opt, const AdamWConfig& acfg, bool opt_has_moments,
                          ShardedCheckpointReader* resume) {
  if (cfg_->engine == "fused") return;  // the fused step broadcasts and reduces itself
  std::vector<Tensor> params = tensors_of(opt.params());
  whole_shapes_.clear();
  for (const Tensor& p : params) whole_shapes_.push_back(p.sizes());
  BLU_CHECK(resume == nullptr || cfg_->zero >= 1, "DataParallel::attach: a sharded resume needs --zero 1, 2 or 3");
  if (cfg_->zero == 3) {  // Note [ZeRO-3 GPT-2]: rank 0's weights everywhere, then shards
    {
      NoGradGuard no_grad;
      for (Tensor& p : params) pg_->broadcast(p, 0);
    }
    model.shard_zero3(pg_);
    AdamW sharded(model.parameters(), acfg);  // zero moments of this rank's shards
    sharded.set_step_count(opt.step_count());
    if (opt_has_moments) {
      NoGradGuard no_grad;
      for (std::size_t i = 0; i < opt.params().size(); ++i) {
        sharded.exp_avg()[i].copy_(model.zero3_piece(i, opt.exp_avg()[i]));
        sharded.exp_avg_sq()[i].copy_(model.zero3_piece(i, opt.exp_avg_sq()[i]));
      }
    }
    opt = std::move(sharded);
    zero3_model_ = &model;
    if (resume != nullptr) fail_together([&] { load_sharded_pieces(*resume, opt); });  // Note [Sharded checkpoints]
    return;
  }
  if (cfg_->zero == 0) {
    ddp_ = std::make_unique<bludist::DistributedDataParallel>(params,
                                                              pg_);  // broadcasts rank 0's weights
    return;
  }
  blu::optim::AdamWOptions o;
  o.beta1 = acfg.beta1;
  o.beta2 = acfg.beta2;
  o.eps = acfg.eps;
  o.weight_decay = acfg.weight_decay;
  std::vector<bool> decay;
  for (const NamedParam& p : opt.params()) decay.push_back(p.decay);
  bludist::ZeroOptions zo;
  zo.stage = cfg_->zero;
  zo.bucket_cap_bytes = static_cast<std::size_t>(cfg_->dp_bucket_mb * 1024.0 * 1024.0);
  if (resume != nullptr) {  // rank 0 reads, ZeroAdamW broadcasts next
    fail_together([&] {
      if (rank() == 0) load_sharded_weights(*resume, opt);
    });
  }
  zero_ = std::make_unique<bludist::ZeroAdamW>(params, pg_, o, decay, zo);  // broadcasts rank 0's weights
  zero_->set_step_count(opt.step_count());
  if (opt_has_moments) {
    NoGradGuard no_grad;
    zero_->load_state(flatten(opt.exp_avg(), model.device()),
                      flatten(opt.exp_avg_sq(), model.device()));
  }
  if (resume != nullptr) fail_together([&] { load_sharded_moments(*resume, opt); });
  release_moments(opt);
}

void DataParallel::set_gradient_sync(bool on) {
  if (ddp_) ddp_->set_gradient_sync(on);
  // ZeRO-2 reduces every micro-step's gradients (Note [ZeRO-2]): close what the previous backward
  // left open before the next one starts.
  if (zero_) zero_->finish_gradient_sync();
}

void DataParallel::finish_gradients() {
  if (ddp_) ddp_->finish_gradient_sync();
  if (zero_) zero_->finish_gradient_sync();
}

UpdateResult DataParallel::clip_and_step(AdamW& opt, double grad_clip, double lr,
                                         const GradSumOfSquares& sum_of_squares) {
  UpdateResult r;
  if (zero_) {
    zero_->set_lr(lr);
    r.grad_norm = zero_->step(grad_clip, true, /*skip_nonfinite=*/true);
    r.applied = std::isfinite(r.grad_norm);
    if (!r.applied) {  // found on the gradient shards (the same on every rank; .grad is gone at stage 2)
      const int64_t i = zero_->first_nonfinite_param();
      r.first_nonfinite = i >= 0 ? opt.params()[static_cast<std::size_t>(i)].name : first_nonfinite_gradient(opt.params());
    }
    opt.set_step_count(zero_->step_count());
    opt.zero_grad();
    return r;
  }
  if (zero3()) {  // the shards' gradients are averaged already; the norm sums every rank's shards
    const auto pg = pg_;
    r = clip_and_update(opt, grad_clip, lr, true, [pg](const std::vector<NamedParam>& ps) {
      return all_reduce_double(*pg, grad_sum_of_squares(ps));
    });
    opt.zero_grad();
    return r;
  }
  BLU_CHECK(ddp_ != nullptr, "DataParallel::clip_and_step: the fused engine clips and steps inside its step");
  r = clip_and_update(opt, grad_clip, lr, true, sum_of_squares);  // averaged gradients: the same norm on every rank
  opt.zero_grad();
  return r;
}

void DataParallel::gather_moments(AdamW& opt) {
  if (!zero_) return;
  auto [m, v] = zero_->gather_state(0);  // rank 0 writes the checkpoint; no whole copy elsewhere
  if (!m.defined()) return;
  const auto& params = opt.params();
  for (size_t i = 0; i < params.size(); ++i) {
    const Tensor& p = *params[i].tensor;
    opt.exp_avg()[i] = m.narrow(0, zero_->offset(i), p.numel()).view(p.sizes());
    opt.exp_avg_sq()[i] = v.narrow(0, zero_->offset(i), p.numel()).view(p.sizes());
  }
}

bool DataParallel::zero3() const { return zero3_model_ != nullptr; }

WholeModel DataParallel::gather_whole(GPT2& model, AdamW& opt) {
  // Rank 0 writes the checkpoint: only it keeps the whole copies (the others join the collectives).
  WholeModel w;
  const bool keep = pg_->rank() == 0;
  w.model = model.zero3_whole(keep);
  if (keep) {
    w.opt = std::make_unique<AdamW>(w.model->parameters(), AdamWConfig{}, false);
    w.opt->set_step_count(opt.step_count());
  }
  for (std::size_t i = 0; i < opt.params().size(); ++i) {
    Tensor m = model.zero3_gather_like(i, opt.exp_avg()[i]);
    Tensor v = model.zero3_gather_like(i, opt.exp_avg_sq()[i]);
    if (keep) {
      w.opt->exp_avg()[i] = m;
      w.opt->exp_avg_sq()[i] = v;
    }
  }
  return w;
}

void DataParallel::release_moments(AdamW& opt) {
  if (!zero_) return;
  for (Tensor& t : opt.exp_avg()) t = Tensor();
  for (Tensor& t : opt.exp_avg_sq()) t = Tensor();
}

DataParallel::StepReport DataParallel::StepReport::of(const bludist::CommTiming& comm) {
  StepReport r;
  if (comm.ops > 0) {
    r.max_comm_ms = comm.comm_ms;
    r.max_comm_exposed_ms = comm.exposed_ms;
  }
  return r;
}

DataParallel::StepReport DataParallel::report_step(double local_loss, double rank_mem_gib,
                                                   const bludist::CommTiming& comm) {
  const StepReport own = StepReport::of(comm);
  const double comm_ms = own.max_comm_ms, exposed_ms = own.max_comm_exposed_ms;
  const int n = size();
  constexpr int kFields = 4;
  const TensorOptions opts(kFloat64);
  Tensor mine = from_vector(std::vector<double>{local_loss, rank_mem_gib, comm_ms, exposed_ms}, {kFields}, opts)
                    .to(pg_->device());
  Tensor all = zeros({kFields * n}, TensorOptions(kFloat64).device(pg_->device()));
  pg_->all_gather(all, mine);
  const std::vector<double> v = all.to_double_vector();
  StepReport r;
  for (int k = 0; k < n; ++k) {  // rank order: the same sum on every rank
    const double* f = &v[static_cast<size_t>(kFields * k)];
    r.loss += f[0];
    r.max_rank_mem_gib = std::max(r.max_rank_mem_gib, f[1]);
    r.max_comm_ms = std::max(r.max_comm_ms, f[2]);
    r.max_comm_exposed_ms = std::max(r.max_comm_exposed_ms, f[3]);
  }
  r.loss /= n;
  return r;
}

double DataParallel::mean(double local_value) { return all_reduce_double(*pg_, local_value, true); }

double all_reduce_double(bludist::ProcessGroup& pg, double value, bool mean) {
  Tensor t = from_vector(std::vector<double>{value}, {1}, TensorOptions(kFloat64)).to(pg.device());
  pg.all_reduce(t, mean ? bludist::ReduceOp::kAvg : bludist::ReduceOp::kSum);
  return t.item();
}

double process_peak_rss_gib() {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind("VmHWM:", 0) == 0)
      return std::strtod(line.c_str() + 6, nullptr) / (1024.0 * 1024.0);  // kB
  }
  return 0;
}

}  // namespace blu::train

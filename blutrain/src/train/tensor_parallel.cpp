// tensor_parallel.cpp: --tp in the trainer (Note [Tensor-parallel training] in tensor_parallel.h):
// the mesh, the sharded gradient norm, whole-model checkpoints by all-gather, loading into shards.
#include "train/tensor_parallel.h"

#include <utility>
#include <vector>

#include "bludist/process_group.h"
#include "blutensor/autograd.h"
#include "blutensor/error.h"
#include "blutensor/ops.h"
#include "train/data_parallel.h"

namespace blu::train {

TensorParallel::Groups TensorParallel::split_world(const TrainConfig& cfg,
                                                   const std::shared_ptr<bludist::ProcessGroup>& world) {
  Groups g;
  if (!world) return g;
  if (cfg.cp > 1) {  // Note [Context-parallel training]: gradients averaged over the whole world
    g.dp = world;
    if (cfg.dp == 1) {
      g.cp = world;
      return g;
    }
    // The rows of the dp x cp mesh only (make_mesh_2d would also build column groups that nobody
    // keeps: destroyed while a peer still connects to them, session 13's flaky mesh test).
    for (int row = 0; row < cfg.dp; ++row) {  // collective over the world: every rank makes every row
      std::vector<int> ranks;
      for (int c = 0; c < cfg.cp; ++c) ranks.push_back(row * cfg.cp + c);
      std::shared_ptr<bludist::ProcessGroup> mine = world->new_group(ranks);
      if (mine) g.cp = mine;
    }
    return g;
  }
  if (cfg.tp == 1) {
    g.dp = world;
  } else if (cfg.dp == 1) {
    g.tp = world;
  } else {
    bludist::Mesh2D mesh = bludist::make_mesh_2d(*world, cfg.dp, cfg.tp);  // rows: dp, columns: tp
    g.tp = mesh.row_group;  // consecutive ranks
    g.dp = mesh.col_group;
  }
  return g;
}

std::unique_ptr<TensorParallel> TensorParallel::create(const TrainConfig& cfg,
                                                       std::shared_ptr<bludist::ProcessGroup> tp) {
  if (cfg.tp == 1) return nullptr;
  BLU_CHECK(tp && tp->size() == cfg.tp, "TensorParallel: expected a group of --tp ", cfg.tp, " ranks");
  std::unique_ptr<TensorParallel> t(new TensorParallel());
  t->pg_ = std::move(tp);
  return t;
}

int TensorParallel::size() const { return pg_->size(); }
int TensorParallel::rank() const { return pg_->rank(); }

std::string TensorParallel::describe() const {
  return blu::detail::str_cat("tensor parallel over ", size(), " ranks (", bludist::backend_name(pg_->backend()),
                              "): attention heads, MLP and vocabulary cut in ", size(),
                              ", wpe and LayerNorms replicated");
}

double TensorParallel::grad_sum_of_squares(const std::vector<NamedParam>& params) const {
  std::vector<NamedParam> sharded, replicated;
  for (const NamedParam& p : params) (tp_split(p.name) == TpSplit::kReplicated ? replicated : sharded).push_back(p);
  return all_reduce_double(*pg_, blu::train::grad_sum_of_squares(sharded)) +
         blu::train::grad_sum_of_squares(replicated);  // identical on every rank: counted once
}

GradSumOfSquares TensorParallel::sum_of_squares_fn() const {
  return [this](const std::vector<NamedParam>& params) { return grad_sum_of_squares(params); };
}

Tensor TensorParallel::gather_whole(const Tensor& local, TpSplit split) const {
  NoGradGuard no_grad;
  Tensor mine = local.detach().contiguous();
  if (split == TpSplit::kReplicated) return mine.clone();
  const int64_t n = size();
  Shape parts = mine.sizes();
  parts.insert(parts.begin(), n);
  Tensor all = empty(parts, TensorOptions(mine.dtype()).device(mine.device()));
  pg_->all_gather(all, mine);  // [n, local...] in rank order
  Shape whole = mine.sizes();
  switch (split) {
    case TpSplit::kRows:
      whole[0] *= n;
      return all.reshape(whole);
    case TpSplit::kCols:  // [n, out, in/n] -> [out, n, in/n]
      whole[1] *= n;
      return all.transpose(0, 1).reshape(whole);
    case TpSplit::kFusedQkv: {  // [n, 3 rows, ...] -> [3, n, rows, ...]: q of every rank, then k, then v
      Shape split3 = parts;
      split3[1] /= 3;
      split3.insert(split3.begin() + 1, 3);
      whole[0] *= n;
      return all.reshape(split3).transpose(0, 1).reshape(whole);
    }
    case TpSplit::kReplicated: break;
  }
  return mine;
}

WholeModel TensorParallel::gather(GPT2& model, AdamW& opt) const {
  WholeModel w;
  w.model = std::make_unique<GPT2>(model.config(), model.device());
  std::vector<NamedParam> mine = model.parameters(), all = w.model->parameters();
  w.opt = std::make_unique<AdamW>(all, AdamWConfig{});
  NoGradGuard no_grad;
  for (size_t i = 0; i < mine.size(); ++i) {
    const TpSplit split = tp_split(mine[i].name);
    all[i].tensor->copy_(gather_whole(*mine[i].tensor, split));
    w.opt->exp_avg()[i].copy_(gather_whole(opt.exp_avg()[i], split));
    w.opt->exp_avg_sq()[i].copy_(gather_whole(opt.exp_avg_sq()[i], split));
  }
  w.opt->set_step_count(opt.step_count());
  return w;
}

void TensorParallel::take_shards(GPT2& whole, AdamW* whole_opt, GPT2& model, AdamW* opt) {
  NoGradGuard no_grad;
  std::vector<NamedParam> all = whole.parameters(), mine = model.parameters();
  for (size_t i = 0; i < mine.size(); ++i) {
    const TpSplit split = tp_split(mine[i].name);
    mine[i].tensor->copy_(model.tp_shard(all[i].tensor->detach(), split));
    if (opt == nullptr) continue;
    opt->exp_avg()[i].copy_(model.tp_shard(whole_opt->exp_avg()[i], split));
    opt->exp_avg_sq()[i].copy_(model.tp_shard(whole_opt->exp_avg_sq()[i], split));
  }
  if (opt != nullptr) opt->set_step_count(whole_opt->step_count());
}

TrainState TensorParallel::load_checkpoint(const std::string& dir, GPT2& model, AdamW& opt) const {
  GPT2 whole(model.config(), model.device());
  AdamW whole_opt(whole.parameters(), AdamWConfig{});
  TrainState state = blu::train::load_checkpoint(dir, whole, &whole_opt);
  take_shards(whole, &whole_opt, model, &opt);
  return state;
}

void TensorParallel::load_hf_safetensors(const std::string& path, GPT2& model, uint64_t seed) const {
  GPT2 whole(model.config(), model.device());
  whole.init_weights(seed);  // what a one-process run holds before it loads
  blu::train::load_hf_safetensors(whole, path);
  take_shards(whole, nullptr, model, nullptr);
}

}  // namespace blu::train

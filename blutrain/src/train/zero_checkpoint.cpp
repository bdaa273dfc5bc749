// zero_checkpoint.cpp: DataParallel's side of sharded checkpoints (Note [Sharded checkpoints] in
// sharded_checkpoint.h): which elements of which parameter a rank owns under ZeRO-1/2 (its
// ZeroAdamW ranges, cut at parameter boundaries) or ZeRO-3 (its piece of every parameter), the
// index rank 0 builds from the same rule for every rank, and the loads into the shards.
#include <algorithm>

#include "bludist/zero.h"
#include "blutensor/autograd.h"
#include "blutensor/error.h"
#include "blutensor/ops.h"
#include "train/data_parallel.h"

namespace blu::train {
namespace {

std::string moment_name(int which, const std::string& param) {
  return (which == 0 ? "exp_avg." : "exp_avg_sq.") + param;
}

}  // namespace

// What a rank owns, cut into blocks of at most kMaxSliceElements (Note [Sharded checkpoints]).
std::vector<DataParallel::OwnedSlice> DataParallel::owned_slices(int rank, std::size_t n_params) const {
  std::vector<OwnedSlice> out;
  auto add = [&out](std::size_t param, int64_t begin, int64_t end, int64_t local) {
    for (int64_t b = begin; b < end; b += kMaxSliceElements)
      out.push_back({param, b, std::min(end, b + kMaxSliceElements), local + (b - begin)});
  };
  if (zero3()) {
    for (std::size_t i = 0; i < n_params; ++i) {
      const auto [b, e] = zero3_model_->zero3_piece_range(i, rank);
      add(i, b, e, 0);
    }
    return out;
  }
  BLU_CHECK(zero_ != nullptr, "sharded checkpoint: needs --zero 1, 2 or 3");
  // Parameter i covers flat [offset(i), offset(i) + numel); a range is cut where parameters change.
  for (const bludist::ZeroAdamW::OwnedRange& r : zero_->owned_ranges(rank)) {
    const int64_t lo = r.flat_begin, hi = r.flat_begin + r.length;
    std::size_t i = 0;
    while (i + 1 < n_params && zero_->offset(i + 1) <= lo) ++i;
    for (; i < n_params && zero_->offset(i) < hi; ++i) {
      const int64_t off = zero_->offset(i), numel = shape_numel(whole_shapes_[i]);
      const int64_t b = std::max(lo, off), e = std::min(hi, off + numel);
      add(i, b - off, e - off, r.shard_begin + (b - lo));
    }
  }
  return out;
}

ShardIndex DataParallel::shard_index(const AdamW& opt) const {
  ShardIndex ix;
  ix.world_size = size();
  ix.zero_stage = cfg_->zero;
  const auto& params = opt.params();
  if (zero3()) {
    ix.partitioning = "ZeRO-3: each parameter's flat values cut into world_size pieces of ceil(numel / world_size) "
                      "elements; rank r holds piece r of the weights and of both moments";
  } else {
    ix.partitioning = blu::detail::str_cat(
        "ZeRO-", cfg_->zero, ": the parameters in order as one flat vector of ", zero_->total_numel(),
        " elements (flat_offset), cut into chunks; rank r holds elements [k C + r P, k C + (r + 1) P) of chunk k "
        "(P = ", zero_->shard_numel() / std::max<int64_t>(1, zero_->num_chunks()), ", C = P x world_size), cut where "
        "parameters begin and end, of the weights and of both moments");
  }
  for (std::size_t i = 0; i < params.size(); ++i) {
    const int64_t off = zero3() ? -1 : zero_->offset(i);
    ix.tensors[params[i].name] = {"model", whole_shapes_[i], off};
    for (int which = 0; which < 2; ++which) ix.tensors[moment_name(which, params[i].name)] = {"optimizer", whole_shapes_[i], off};
  }
  for (int r = 0; r < size(); ++r) {
    std::vector<TensorSlice> slices;
    for (const OwnedSlice& s : owned_slices(r, params.size())) {
      const std::string& name = params[s.param].name;
      slices.push_back({name, s.begin, s.end});
      for (int which = 0; which < 2; ++which) slices.push_back({moment_name(which, name), s.begin, s.end});
    }
    ix.rank_slices.push_back(std::move(slices));
  }
  return ix;
}

std::string DataParallel::save_sharded(const std::string& out_dir, int keep, int64_t step, AdamW& opt,
                                       const std::map<std::string, std::string>& rank0_files) {
  NoGradGuard no_grad;
  const auto& params = opt.params();
  std::map<std::string, std::map<std::string, Tensor>> mine;
  for (const OwnedSlice& s : owned_slices(rank(), params.size())) {
    const std::string& name = params[s.param].name;
    const int64_t len = s.end - s.begin;
    const Tensor flat = params[s.param].tensor->detach().reshape({-1});
    // ZeRO-1/2: the weights are whole on every rank, the moments in ZeroAdamW's shard; ZeRO-3: the
    // parameter and its moments are this rank's pieces.
    mine["model"][slice_name(name, s.begin)] = flat.narrow(0, zero3() ? s.local : s.begin, len);
    for (int which = 0; which < 2; ++which) {
      const Tensor moments = zero3() ? (which == 0 ? opt.exp_avg() : opt.exp_avg_sq())[s.param].reshape({-1})
                                    : (which == 0 ? zero_->exp_avg_shard() : zero_->exp_avg_sq_shard());
      mine["optimizer"][slice_name(moment_name(which, name), s.begin)] = moments.narrow(0, s.local, len);
    }
  }
  const ShardIndex index = rank() == 0 ? shard_index(opt) : ShardIndex{};
  return save_sharded_checkpoint(*pg_, out_dir, keep, step, index, mine, rank0_files);
}

void DataParallel::load_sharded_weights(ShardedCheckpointReader& reader, AdamW& opt) {
  NoGradGuard no_grad;
  for (const NamedParam& p : opt.params()) {
    Tensor t = p.tensor->detach();
    reader.expect(p.name, t.sizes());
    t.copy_(reader.read_whole(p.name));
  }
}

void DataParallel::load_sharded_moments(ShardedCheckpointReader& reader, AdamW& opt) {
  NoGradGuard no_grad;
  const auto& params = opt.params();
  for (std::size_t i = 0; i < params.size(); ++i) {
    for (int which = 0; which < 2; ++which) reader.expect(moment_name(which, params[i].name), whole_shapes_[i]);
  }
  // One moment at a time, in ascending order: a saved slice spanning several of the requests is
  // read once (the reader keeps the last slice).
  Tensor shard[2] = {zeros({zero_->shard_numel()}, kFloat32), zeros({zero_->shard_numel()}, kFloat32)};
  for (int which = 0; which < 2; ++which) {
    for (const OwnedSlice& s : owned_slices(rank(), params.size())) {
      shard[which].narrow(0, s.local, s.end - s.begin)
          .copy_(reader.read(moment_name(which, params[s.param].name), s.begin, s.end));
    }
  }
  zero_->load_shard_state(shard[0], shard[1]);
}

void DataParallel::load_sharded_pieces(ShardedCheckpointReader& reader, AdamW& opt) {
  NoGradGuard no_grad;
  const auto& params = opt.params();
  for (std::size_t i = 0; i < params.size(); ++i) {
    reader.expect(params[i].name, whole_shapes_[i]);
    for (int which = 0; which < 2; ++which) reader.expect(moment_name(which, params[i].name), whole_shapes_[i]);
  }
  for (const OwnedSlice& s : owned_slices(rank(), params.size())) {
    const std::string& name = params[s.param].name;
    const int64_t len = s.end - s.begin;
    params[s.param].tensor->detach().narrow(0, s.local, len).copy_(reader.read(name, s.begin, s.end));
    for (int which = 0; which < 2; ++which) {
      (which == 0 ? opt.exp_avg() : opt.exp_avg_sq())[s.param].narrow(0, s.local, len)
          .copy_(reader.read(moment_name(which, name), s.begin, s.end));
    }
  }
}

}  // namespace blu::train

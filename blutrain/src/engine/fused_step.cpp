// fused_step.cpp: the fused GPT-2 training step (Note [Fused step] in blutrain/fused_step.h):
// parameter binding, flat gradient and bf16 weight-copy buffers, the planned activation arena,
// the forward / backward / optimizer launch sequences and their CUDA-graph capture.
#include "blutrain/fused_step.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "bludist/process_group.h"
#include "blublas/adamw.h"
#include "blutensor/autograd.h"
#include "blutensor/cuda_allocator.h"
#include "blutensor/cuda_stream.h"
#include "blutensor/error.h"
#include "blutensor/ops.h"
#include "blutrain/activation_plan.h"
#include "engine/grad_buckets.h"
#include "engine/grad_sync.h"
#include "engine/step_launcher.h"

namespace blu::train {
namespace {

void cuda_check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) BLU_THROW("fused GPT-2 step: ", what, ": ", cudaGetErrorString(e));
}

// A raw device buffer from the caching allocator (counted in its statistics), as an f32 tensor.
Tensor device_bytes(std::size_t bytes, int device) {
  return empty({static_cast<int64_t>((bytes + 3) / 4)}, TensorOptions(kFloat32).device(Device::cuda(device)));
}

enum LayerParam { kLn1W, kLn1B, kQkvW, kQkvB, kProjW, kProjB, kLn2W, kLn2B, kFcW, kFcB, kFpW, kFpB, kNumLayerParams };
// The four matrices of a block, the part of the bf16 weight copy that --weight-copy layer keeps per
// block in a two-block ring (Note [Per-layer bf16 weight copy]).
constexpr LayerParam kRingParams[] = {kQkvW, kProjW, kFcW, kFpW};
constexpr int kNumRingParams = 4;

// Widest model whose weight gradients go to the side stream by default (Note [Weight gradients on
// a side stream]).
constexpr int kSideStreamMaxEmbd = 768;

constexpr const char* kLayerParamNames[kNumLayerParams] = {
    "ln_1.weight", "ln_1.bias",   "attn.c_attn.weight", "attn.c_attn.bias", "attn.c_proj.weight", "attn.c_proj.bias",
    "ln_2.weight", "ln_2.bias",   "mlp.c_fc.weight",    "mlp.c_fc.bias",    "mlp.c_proj.weight",  "mlp.c_proj.bias"};

// Step-level values the host reads back after each step.
struct Readback {
  float loss_sum;  // sum of per-row losses over all micro-batches
  float norm;      // global gradient norm before clipping
  float clip;      // the clip factor applied
  float pad;
  int token_error;   // an input id outside [0, vocab)
  int target_error;  // a target outside [0, vocab)
};

}  // namespace

struct FusedGPT2Step::Impl {
  GPT2& model;
  AdamW& opt;
  FusedStepOptions o;
  GPT2Config cfg;
  int device = 0;
  blu::cuda::Stream stream;
  StepLauncher L;
  // Weight gradients on a side stream (Note [Weight gradients on a side stream]).
  blu::cuda::Stream side;
  StepLauncher W;
  bool side_on = false;
  std::vector<cudaEvent_t> events;
  size_t next_event = 0;
  Tensor workspace_side;
  // The weight-gradient launcher: its own workspace always; the side stream when side_on, else
  // the main stream (set per pass in run_part).
  StepLauncher& WL() { return W; }
  std::vector<std::pair<std::string, cudaEvent_t>> marks;  // op timing of both launchers
  cudaEvent_t record(cudaStream_t s) {
    cudaEvent_t e = events[next_event++ % events.size()];
    cuda_check(cudaEventRecord(e, s), "cudaEventRecord");
    return e;
  }
  // The side stream continues after all work issued so far on the main stream.
  void fork() {
    if (side_on) cuda_check(cudaStreamWaitEvent(side.get(), record(stream.get()), 0), "cudaStreamWaitEvent");
  }
  // A mark after the side work issued so far (null when everything runs on the main stream).
  cudaEvent_t side_mark() { return side_on ? record(side.get()) : nullptr; }
  void main_wait(cudaEvent_t e) {
    if (e != nullptr) cuda_check(cudaStreamWaitEvent(stream.get(), e, 0), "cudaStreamWaitEvent");
  }
  cudaEvent_t ev_qkv_dw = nullptr;  // the last qkv weight gradient (reads dbig and ln1)
  Recompute recompute = Recompute::kGelu;
  // The GELU backward as the fc_proj dX GEMM's epilogue (blublas Epilogue::kGeluGrad) instead of
  // the elementwise kernel: off by default, measured slower (H100, run 3: the fused GEMM took
  // 7.95 ms per bf16 step against 1.74 + 1.0 ms for the GEMM and the kernel; 34.1 against 29.8 ms
  // in strict fp32): reading aux goes through the generic per-element epilogue, not the sm90
  // TMA-store path. BLUTRAIN_GELU_GRAD_EPILOGUE=1 turns it on for A/B timing. Since session 18 the
  // sm90 kernel reads aux through TMA into the store's staging tile (blublas Note [sm90 C through
  // TMA], on by default): still no win (H100, bf16 B16: 469.9K vs 473.4K tok/s, "fc proj dx + gelu
  // bwd" 3.17 ms vs 1.78 + 1.23), so it stays off.
  bool gelu_grad_epilogue = false;
  ActivationPlan plan;
  std::string attention_name;

  // Parameters, in the optimizer's order; element offsets into the flat gradient / copy buffers.
  struct Param {
    float* master;
    int64_t numel;
    std::size_t offset;
    bool decay;
  };
  std::vector<Param> params;
  int wte = -1, wpe = -1, lnf_w = -1, lnf_b = -1;
  std::vector<std::array<int, kNumLayerParams>> layer;
  std::vector<blublas::AdamWTensor> adam_list;

  Tensor grads, wcopy, arena, workspace, tokens, misc, mask;
  std::size_t grad_elems = 0;
  std::vector<std::size_t> copy_off;  // per parameter: its element offset in wcopy (bf16 mode)
  std::size_t copy_elems = 0;

  // Note [Per-layer bf16 weight copy]
  // The bf16 copy of the weights is 2 bytes a parameter beside the f32 weights, gradients and two
  // moments (16): on the largest models that fit, 11% of the state. --weight-copy layer keeps the
  // blocks' four matrices (all but ~0.1% of a block) out of the whole copy: each block's are cast
  // from the f32 weights (blublas::bf16_weight_copy, the bits the AdamW update would have written)
  // into a ring of two block-sized slots, block l in slot l % 2, before its forward and again
  // before its backward; the rest (LayerNorms, biases, embeddings) stays whole and is written by
  // the update as before. The cast of block l + 1 (forward) or l - 1 (backward) runs on its own
  // stream beside block l's kernels: issued after every main-stream read of the slot's previous
  // block (an event on the main stream), waited for by the main stream right before the block
  // that reads it. The backward starts with the forward's last two blocks still in the ring, so
  // it casts n_layer - 2 blocks, and a later micro-batch of the same step (--accum, parts kRest
  // and kLast: no update in between) finds blocks 0 and 1 there from the backward before. Block 0's
  // cast is issued first thing in the forward, beside the embedding. Cost: reading 4 and writing 2
  // bytes per matrix parameter, 2 x (n_layer - 2) + 2 casts per micro-batch; no change in the
  // numbers (the same bf16 bits reach the GEMMs: a GPU test compares the two modes' losses,
  // weights and gradients bit for bit, with a host delay in front of every cast so a missing wait
  // would read a stale slot: BLUTRAIN_TEST_CAST_DELAY_US).
  // auto: layer only when the whole copy, the activation arena and a margin (1 GiB or 2% of the
  // device) do not fit in what the device has free at setup, after the allocator returned its
  // cached segments (a cached block cannot serve a multi-GiB request; BLUTRAIN_TEST_FREE_MIB
  // replaces the measured free memory, for tests); whole is the race's mode (no extra traffic, one
  // copy made once per step by the update). Under data parallelism each rank decides alone: on
  // equal GPUs the same way; if not, the numbers still agree bit for bit, only the speed differs.
  // Measured (session 37, H200, raw bench/results/h200/raw/session37/call5_carry): d12 bf16 B16
  // T1024, 20 steps, layer vs whole: equal losses and norms at every step, 535.4K vs 534.0K tok/s,
  // peak 7.50 vs 7.63 GiB. Largest model (B1 T1024): 40x32x4096 (8.27B) now trains (auto picks
  // layer) at 129.5 GiB, 5748 tok/s, and with --recompute block 44x32x4096 (9.07B, PyTorch eager's
  // largest) at 136.9 GiB. Per parameter the 40x step runs ~11% slower than 36x32x4096 with the
  // whole copy (tok/s x params 47.5K vs 53.3K; PyTorch's is flat): the casts mostly do not overlap
  // (the persistent GEMMs hold every SM while the cast waits for one). Not tried: casting inside a
  // GEMM's producer, or a cast kernel on a few SMs with the GEMMs on the rest (blublas Note [GEMM
  // CTA budget]).
  bool layer_copy = false;
  std::string weight_copy_why;  // how the mode was chosen (describe())
  bool cast_on = false;  // this pass casts on cast_stream; else in order on the main stream
  bool ring_has_first_blocks = false;  // this pass starts with blocks 0 and 1 in the ring
  int64_t test_cast_delay_us = 0;      // BLUTRAIN_TEST_CAST_DELAY_US: a host sleep before each cast
  blu::cuda::Stream cast_stream;
  Tensor ring;
  std::size_t ring_slot_elems = 0;
  // Per parameter, under --weight-copy layer: its element offset in `ring` (slot included), or -1
  // for the parameters the whole copy keeps. Empty otherwise.
  std::vector<int64_t> ring_at;
  bool in_ring(size_t i) const { return !ring_at.empty() && ring_at[i] >= 0; }
  std::vector<std::array<blublas::AdamWTensor, kNumRingParams>> ring_lists;  // per block
  std::array<cudaEvent_t, 2> ev_cast{};  // per slot: the cast pending into it (null: none)
  void setup_weight_copy(std::size_t arena_bytes);
  void cast_block(int l);
  void wait_block(int l) {
    cudaEvent_t& e = ev_cast[static_cast<size_t>(l % 2)];
    main_wait(e);
    e = nullptr;
  }
  blublas::AdamWStepScalars* h_scalars = nullptr;
  HostMarks host_marks;  // Note [Host issue time]
  Readback* h_readback = nullptr;

  // CUDA graphs: first micro-batch (overwriting gradients; with the optimizer when accum == 1),
  // later micro-batches (accumulating), optimizer alone (accum > 1), and with data parallelism
  // and accum > 1 the last micro-batch with the gradient all-reduce and the optimizer (kLast
  // replaces kOptim: the collectives belong in the last backward, not in every kRest replay).
  enum Part { kFirst, kRest, kOptim, kLast, kNumParts };
  blu::cuda::GraphExec graphs[kNumParts];
  // Data parallelism (Note [Data-parallel fused step: streams and events under capture]):
  // null with one rank. sync_now: this pass is the step's last backward, so it all-reduces.
  std::unique_ptr<FusedGradSync> sync;
  bool sync_now = false;
  // Note [Embedding gradient by all-gather]: world > 1 with --dp-embedding-grad gather.
  bool embed_gather = false;
  int world = 1;
  Tensor gathered_rows, gathered_tokens;  // world x B*T rows of d x[0] and their token ids
  void unit_ready(int unit) {
    if (sync && sync_now && !L.sizing) sync->unit_ready(unit, stream.get());
  }
  void setup_data_parallel();
  void gathered_embedding_backward();
  void broadcast_weights();
  void wait_for_step_with_deadline();
  cudaEvent_t step_done = nullptr;  // data parallelism: polled with a deadline
  int64_t steps_done = 0;
  int64_t launches_per_step = 0;
  bool time_next = false;
  bool side_enabled = false;
  int side_gemm_ctas = 0;  // BLUTRAIN_SIDE_GEMM_CTAS (blublas Note [GEMM CTA budget])
  bool stream_priority = false;  // BLUTRAIN_STREAM_PRIORITY (blutensor Note [Stream priorities])
  std::string timing_json;

  void finish_timing(cudaEvent_t start, double wall_ms);

  Impl(GPT2& m, AdamW& a, const FusedStepOptions& opts) : model(m), opt(a), o(opts), cfg(m.config()) {}

  // ---- pointers
  char* base() const { return static_cast<char*>(arena.data_ptr()); }
  void* act(std::size_t off) const { return base() + off; }
  float* f32(std::size_t off) const { return reinterpret_cast<float*>(base() + off); }
  // The weight as the GEMMs read it: the bf16 copy in bf16 mode, the fp32 master otherwise.
  const void* w(int i) const {
    if (o.precision != Precision::kBf16) return params[i].master;
    const auto k = static_cast<size_t>(i);
    if (in_ring(k)) return static_cast<char*>(ring.data_ptr()) + ring_at[k] * 2;
    return static_cast<char*>(wcopy.data_ptr()) + copy_off[k] * 2;
  }
  float* g(int i) const { return static_cast<float*>(grads.data_ptr()) + params[i].offset; }
  int32_t* inputs() const { return static_cast<int32_t*>(tokens.data_ptr()); }
  int32_t* targets() const { return inputs() + L.rows; }
  Readback* d_readback() const { return static_cast<Readback*>(misc.data_ptr()); }
  blublas::AdamWStepScalars* d_scalars() const {
    return reinterpret_cast<blublas::AdamWStepScalars*>(static_cast<char*>(misc.data_ptr()) + 256);
  }
  int P(int l, LayerParam p) const { return layer[static_cast<size_t>(l)][p]; }

  void bind_params();
  void setup();
  void forward();
  void block_forward(int l, bool recomputing);
  void classifier(bool first);
  void backward(bool first);
  void block_backward(int l, bool first);
  void optimizer();
  void run_part(Part part);
  void launch(Part part);
};

void FusedGPT2Step::Impl::bind_params() {
  std::map<std::string, int> by_name;
  const std::vector<NamedParam>& list = opt.params();
  BLU_CHECK(opt.exp_avg().size() == list.size() && opt.exp_avg_sq().size() == list.size(),
            "fused GPT-2 step: optimizer state does not match its parameter list");
  std::size_t off = 0;
  for (size_t i = 0; i < list.size(); ++i) {
    const Tensor& t = *list[i].tensor;
    BLU_CHECK(t.is_cuda() && t.dtype() == kFloat32 && t.is_contiguous(), "fused GPT-2 step: parameter ", list[i].name,
              " must be a contiguous f32 CUDA tensor, got ", t.describe());
    params.push_back({static_cast<float*>(t.data_ptr()), t.numel(), off, list[i].decay});
    off += static_cast<std::size_t>((t.numel() + 63) / 64 * 64);  // 256-byte aligned f32 slices
    by_name[list[i].name] = static_cast<int>(i);
  }
  grad_elems = off;
  auto find = [&](const std::string& n) {
    auto it = by_name.find(n);
    BLU_CHECK(it != by_name.end(), "fused GPT-2 step: the model has no parameter ", n);
    return it->second;
  };
  wte = find("wte.weight");
  wpe = find("wpe.weight");
  lnf_w = find("ln_f.weight");
  lnf_b = find("ln_f.bias");
  for (int l = 0; l < cfg.n_layer; ++l) {
    std::array<int, kNumLayerParams> ids{};
    for (int p = 0; p < kNumLayerParams; ++p) ids[p] = find("h." + std::to_string(l) + "." + kLayerParamNames[p]);
    layer.push_back(ids);
  }
}

void FusedGPT2Step::Impl::setup_weight_copy(std::size_t arena_bytes) {
  const std::size_t n = params.size();
  copy_off.assign(n, 0);
  if (o.weight_copy == "layer" || o.weight_copy == "whole") {
    layer_copy = o.weight_copy == "layer";
    weight_copy_why = "--weight-copy " + o.weight_copy;
  } else {  // auto (setup checked the name)
    blu::cuda::CachingAllocator::get().empty_cache(device);
    std::size_t free_bytes = 0, total_bytes = 0;
    cuda_check(cudaMemGetInfo(&free_bytes, &total_bytes), "cudaMemGetInfo");
    if (const char* v = std::getenv("BLUTRAIN_TEST_FREE_MIB")) free_bytes = std::strtoull(v, nullptr, 10) << 20;
    const std::size_t margin = std::max<std::size_t>(std::size_t(1) << 30, total_bytes / 50);
    const std::size_t need = grad_elems * 2 + arena_bytes + margin;
    layer_copy = need > free_bytes;
    weight_copy_why = "auto: whole copy + activations + margin " + std::to_string(need >> 20) + " MiB " +
                      (layer_copy ? "> " : "<= ") + std::to_string(free_bytes >> 20) + " MiB free";
  }
  if (!layer_copy) {  // the flat gradient buffer's layout
    for (size_t i = 0; i < n; ++i) copy_off[i] = params[i].offset;
    copy_elems = grad_elems;
    wcopy = device_bytes(copy_elems * 2, device);
    return;
  }
  auto aligned = [](int64_t numel) { return static_cast<std::size_t>((numel + 127) / 128 * 128); };  // 256 bytes
  std::array<std::size_t, kNumRingParams> slot_off{};  // each matrix's place in a slot
  ring_slot_elems = 0;
  for (int k = 0; k < kNumRingParams; ++k) {
    slot_off[static_cast<size_t>(k)] = ring_slot_elems;
    ring_slot_elems += aligned(params[static_cast<size_t>(P(0, kRingParams[k]))].numel);
  }
  ring_at.assign(n, -1);
  for (int l = 0; l < cfg.n_layer; ++l) {
    for (int k = 0; k < kNumRingParams; ++k) {
      const auto i = static_cast<size_t>(P(l, kRingParams[k]));
      BLU_CHECK(params[i].numel == params[static_cast<size_t>(P(0, kRingParams[k]))].numel,
                "fused GPT-2 step: block ", l, "'s ", kLayerParamNames[kRingParams[k]], " differs in size from block 0's");
      ring_at[i] = static_cast<int64_t>(static_cast<std::size_t>(l % 2) * ring_slot_elems + slot_off[static_cast<size_t>(k)]);
    }
  }
  std::size_t off = 0;
  for (size_t i = 0; i < n; ++i) {
    if (in_ring(i)) continue;
    copy_off[i] = off;
    off += aligned(params[i].numel);
  }
  copy_elems = off;
  wcopy = device_bytes(std::max<std::size_t>(copy_elems, 128) * 2, device);
  ring = device_bytes(2 * ring_slot_elems * 2, device);
  cast_stream = blu::cuda::Stream::create(device, true,
                                          stream_priority ? blu::cuda::GraphExec::highest_stream_priority(device) : 0);
  if (const char* v = std::getenv("BLUTRAIN_TEST_CAST_DELAY_US")) test_cast_delay_us = std::atoll(v);
  ring_lists.resize(static_cast<size_t>(cfg.n_layer));
  for (int l = 0; l < cfg.n_layer; ++l) {
    for (int k = 0; k < kNumRingParams; ++k) {
      const int i = P(l, kRingParams[k]);
      blublas::AdamWTensor t;
      t.param = params[static_cast<size_t>(i)].master;
      t.param_bf16 = const_cast<void*>(w(i));
      t.numel = params[static_cast<size_t>(i)].numel;
      ring_lists[static_cast<size_t>(l)][static_cast<size_t>(k)] = t;
    }
  }
}

// Block l's matrices into their ring slot (Note [Per-layer bf16 weight copy]), after every read of
// the slot's previous block issued so far on the main stream.
void FusedGPT2Step::Impl::cast_block(int l) {
  if (!layer_copy) return;
  const auto& list = ring_lists[static_cast<size_t>(l)];
  if (!cast_on) {
    L.bf16_weights(list.data(), kNumRingParams, nullptr);
    return;
  }
  cuda_check(cudaStreamWaitEvent(cast_stream.get(), record(stream.get()), 0), "cudaStreamWaitEvent");
  if (test_cast_delay_us > 0) {  // tests: a late cast must still be waited for
    cuda_check(cudaLaunchHostFunc(
                   cast_stream.get(),
                   [](void* us) {
                     std::this_thread::sleep_for(std::chrono::microseconds(*static_cast<int64_t*>(us)));
                   },
                   &test_cast_delay_us),
               "cudaLaunchHostFunc");
  }
  L.bf16_weights(list.data(), kNumRingParams, cast_stream.get());
  ev_cast[static_cast<size_t>(l % 2)] = record(cast_stream.get());
}

void FusedGPT2Step::Impl::setup() {
  BLU_CHECK(model.device().is_cuda(), "fused GPT-2 step: the model is on ", model.device().str(), ", not CUDA");
  device = model.device().index;
  BLU_CHECK(o.batch > 0 && o.seq_len > 0 && o.seq_len <= cfg.block_size && o.accum_steps >= 1,
            "fused GPT-2 step: B=", o.batch, " T=", o.seq_len, " accum=", o.accum_steps, " (context ",
            cfg.block_size, ")");
  const int head_dim = cfg.n_embd / cfg.n_head;
  BLU_CHECK(head_dim == 64 || head_dim == 128, "fused GPT-2 step: head dim ", head_dim,
            " (the fused attention takes 64 or 128)");
  // auto: bf16 saves everything (recompute none: 472.7K tok/s at 7.65 GiB against 462.6K at 6.62
  // with gelu, H100 run 4, both under torch.compile's 8.44 GiB); f32 modes recompute the GELU
  // (none would add 2.3 GiB, within 0.1 GiB of torch.compile's peak in tf32).
  recompute = parse_recompute(o.recompute == "auto" ? (o.precision == Precision::kBf16 ? "none" : "gelu")
                                                    : o.recompute);
  BLU_CHECK(o.weight_copy == "auto" || o.weight_copy == "whole" || o.weight_copy == "layer",
            "fused GPT-2 step: weight copy '", o.weight_copy, "': expected whole, layer or auto");
  if (const char* v = std::getenv("BLUTRAIN_GELU_GRAD_EPILOGUE")) gelu_grad_epilogue = std::string(v) == "1";
  // blutensor's Note [Stream priorities]: BLUTRAIN_STREAM_PRIORITY=1 runs the main stream's
  // kernels at the device's highest priority, the side stream's weight gradients at the default.
  if (const char* v = std::getenv("BLUTRAIN_STREAM_PRIORITY")) stream_priority = std::string(v) == "1";
  stream = blu::cuda::Stream::create(device, true,
                                     stream_priority ? blu::cuda::GraphExec::highest_stream_priority(device) : 0);
  blu::cuda::StreamGuard guard(stream.get(), device);

  // Precision: activations, GEMM compute mode and attention.
  switch (o.precision) {
    case Precision::kBf16:
      L.act = blublas::Dtype::kBF16;
      L.compute = blublas::ComputeMode::kDefault;
      L.attn_precision = blublas::AttnPrecision::kBF16;
      attention_name = "bf16";
      break;
    case Precision::kTf32:
      L.act = blublas::Dtype::kF32;
      L.compute = blublas::ComputeMode::kTF32;
      L.attn_precision = blublas::AttnPrecision::kF32TF32;
      attention_name = "tf32";
      break;
    case Precision::kFp32:
      L.act = blublas::Dtype::kF32;
      L.compute = blublas::ComputeMode::kStrictF32;
      // Note [fp32 attention contract]: PyTorch's fp32 SDPA on sm80+ is the CUTLASS memory-efficient
      // kernel, whose float path runs 3xTF32 tensor-core products (OpMultiplyAddFastF32), so "auto"
      // races with the same contract: split-TF32 products (big*big + big*small + small*big, fp32
      // accumulation; fp32-level error, tested against the strict bound in attention_gpu tests).
      // "strict" keeps SIMT FMA only, no tf32 rounding anywhere; both are measured by bench/e2e.
      if (o.attention == "strict") {
        L.attn_precision = blublas::AttnPrecision::kF32Strict;
        attention_name = "strict fp32 (SIMT)";
      } else if (o.attention == "3xtf32" || o.attention == "auto") {
        L.attn_precision = blublas::AttnPrecision::kF32Split3TF32;
        attention_name = "fp32 3xTF32 (split-TF32 tensor cores)";
      } else {
        BLU_THROW("--attention '", o.attention, "': expected strict, 3xtf32 or auto");
      }
      break;
  }
  L.rows = int64_t{o.batch} * o.seq_len;
  L.batch = o.batch;
  L.seq_len = o.seq_len;
  L.heads = cfg.n_head;
  L.head_dim = head_dim;
  L.channels = cfg.n_embd;
  L.stream = stream.get();

  bind_params();
  const std::size_t es = L.act_size();
  grads = device_bytes(grad_elems * 4, device);
  // The padding between slices is never written by a kernel; zeroed once so that it is 0 (and
  // identical on every rank) where a gradient bucket carries it through an all-reduce.
  cuda_check(cudaMemsetAsync(grads.data_ptr(), 0, grad_elems * 4, stream.get()), "clearing the gradients");
  setup_data_parallel();

  ActivationPlanInput pin;
  pin.n_layer = cfg.n_layer;
  pin.n_embd = cfg.n_embd;
  pin.n_head = cfg.n_head;
  pin.padded_vocab = cfg.padded_vocab;
  pin.batch = o.batch;
  pin.seq_len = o.seq_len;
  pin.act_bytes = es;
  pin.recompute = recompute;
  // Auto: Note [Classifier chunk rows] (gpt2.h): 8192 bf16 rows measured 1% faster than 4096 for
  // +0.38 GiB; f32 8192 rows 296.2 vs 298.5 ms a step against 4096 for +0.76 GiB (H200, session 7).
  const int64_t auto_rows = auto_logits_chunk_rows(cfg.padded_vocab, static_cast<int64_t>(es));
  pin.logits_chunk_rows = std::min<int64_t>(o.logits_chunk_rows > 0 ? o.logits_chunk_rows : auto_rows, L.rows);
  plan = plan_activations(pin);
  if (o.precision == Precision::kBf16) setup_weight_copy(plan.total_bytes);
  arena = device_bytes(plan.total_bytes, device);
  tokens = device_bytes(static_cast<std::size_t>(L.rows) * 2 * sizeof(int32_t), device);
  if (embed_gather) {
    gathered_rows = device_bytes(static_cast<std::size_t>(world) * L.rows * cfg.n_embd * es, device);
    gathered_tokens = device_bytes(static_cast<std::size_t>(world) * L.rows * sizeof(int32_t), device);
  }
  misc = device_bytes(512, device);
  cuda_check(cudaMemsetAsync(misc.data_ptr(), 0, 512, stream.get()), "clearing the step's flags");
  cuda_check(cudaMallocHost(&h_scalars, sizeof(blublas::AdamWStepScalars)), "cudaMallocHost");
  cuda_check(cudaMallocHost(&h_readback, sizeof(Readback)), "cudaMallocHost");

  // The vocabulary mask (Note [Padded vocabulary] in gpt2.h) in the activation dtype.
  std::vector<float> maskv(static_cast<size_t>(cfg.padded_vocab), 0.0f);
  for (int64_t i = cfg.vocab_size; i < cfg.padded_vocab; ++i) maskv[static_cast<size_t>(i)] = -1e30f;
  mask = from_vector(maskv, {cfg.padded_vocab}).to(Device::cuda(device)).to(es == 2 ? kBFloat16 : kFloat32);

  // AdamW over the optimizer's own tensors (so checkpoints see the same moments).
  for (size_t i = 0; i < params.size(); ++i) {
    blublas::AdamWTensor t;
    t.param = params[i].master;
    t.grad = g(static_cast<int>(i));
    t.m = static_cast<float*>(opt.exp_avg()[i].data_ptr());
    t.v = static_cast<float*>(opt.exp_avg_sq()[i].data_ptr());
    // Under --weight-copy layer the blocks' matrices are cast per block instead (cast_block).
    const bool copied = o.precision == Precision::kBf16 && !in_ring(i);
    t.param_bf16 = copied ? const_cast<void*>(w(static_cast<int>(i))) : nullptr;
    t.numel = params[i].numel;
    t.weight_decay = params[i].decay ? static_cast<float>(o.adamw.weight_decay) : 0.0f;
    adam_list.push_back(t);
  }

  // Sizing pass over every launch of a step: one workspace for the main-stream ops, one for the
  // weight gradients (split-K and bias-gradient partials of concurrent GEMMs must not share one;
  // in tf32 the lm-head dW's split-K partials alone are ~800 MiB, the rest needs ~50).
  L.sizing = true;
  W = L;
  for (int first = 1; first >= 0; --first) {
    forward();
    backward(first == 1);
  }
  W.sizing = false;
  std::size_t norm_ws = 0;
  const blublas::Status s =
      blublas::grad_global_norm_workspace_size(adam_list.data(), static_cast<int>(adam_list.size()), &norm_ws);
  BLU_CHECK(s.ok(), "fused GPT-2 step: grad_global_norm: ", s.to_string());
  L.workspace_needed = std::max(L.workspace_needed, norm_ws);
  L.sizing = false;
  L.workspace_bytes = std::max<std::size_t>(L.workspace_needed, 256);
  workspace = device_bytes(L.workspace_bytes, device);
  L.workspace = workspace.data_ptr();
  side = blu::cuda::Stream::create(device);
  W.workspace_bytes = std::max<std::size_t>(W.workspace_needed, 256);
  workspace_side = device_bytes(W.workspace_bytes, device);
  W.workspace = workspace_side.data_ptr();
  L.marks = &marks;
  W.marks = &marks;
  events.resize(static_cast<size_t>(20 * cfg.n_layer + 64));  // never reused within one pass
  for (cudaEvent_t& e : events) cuda_check(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "cudaEventCreate");
  // Note [Weight gradients on a side stream]: on by default up to 768 channels only.
  side_enabled = cfg.n_embd <= kSideStreamMaxEmbd;
  if (const char* v = std::getenv("BLUTRAIN_SIDE_STREAM")) side_enabled = std::string(v) != "0";
  if (const char* v = std::getenv("BLUTRAIN_SIDE_GEMM_CTAS")) {
    side_gemm_ctas = std::atoi(v);
    BLU_CHECK(side_gemm_ctas >= 0, "BLUTRAIN_SIDE_GEMM_CTAS=", v, ": expected 0 (all SMs) or a CTA count");
  }
  cuda_check(cudaStreamSynchronize(stream.get()), "setup");
}

// The ready units of the backward over the flat gradient buffer and the buckets over them
// (Note [Gradient buckets of the fused step] in grad_buckets.h); each parameter is checked to lie
// in the unit whose ready point finalises it, so a different parameter order is an error, not a
// silently wrong reduction.
void FusedGPT2Step::Impl::setup_data_parallel() {
  if (o.process_group == nullptr || o.process_group->size() <= 1) return;
  BLU_CHECK(o.process_group->device() == Device::cuda(device), "fused GPT-2 step: the process group is on ",
            o.process_group->device().str(), ", the model on cuda:", device);
  const int nl = cfg.n_layer;
  auto start = [&](int i) { return params[static_cast<size_t>(i)].offset; };
  std::vector<GradRange> units;
  units.push_back({start(lnf_w), grad_elems});  // 0: ln_f
  for (int l = nl - 1; l >= 0; --l) {           // 1 .. L: block L-1 .. 0
    units.push_back({start(P(l, kLn1W)), l + 1 < nl ? start(P(l + 1, kLn1W)) : start(lnf_w)});
  }
  world = o.process_group->size();
  embed_gather = o.dp_embedding_gather;
  // L+1: wte and wpe; with the embedding gradient by all-gather, wpe alone (wte is reduced early
  // and completed from the gathered rows: Note [Embedding gradient by all-gather]).
  units.push_back({embed_gather ? start(wpe) : 0, start(P(0, kLn1W))});
  auto inside = [&](int param, int unit, const char* what) {
    const Param& p = params[static_cast<size_t>(param)];
    const GradRange& u = units[static_cast<size_t>(unit)];
    BLU_CHECK(p.offset >= u.begin && p.offset + static_cast<std::size_t>(p.numel) <= u.end,
              "fused data-parallel step: the gradient of ", what, " is not where the bucket plan expects it",
              " (the optimizer's parameter order is not wte, wpe, h.0 .. h.L-1, ln_f)");
  };
  inside(lnf_w, 0, "ln_f.weight");
  inside(lnf_b, 0, "ln_f.bias");
  for (int l = 0; l < nl; ++l) {
    for (int q = 0; q < kNumLayerParams; ++q) inside(P(l, static_cast<LayerParam>(q)), nl - l, kLayerParamNames[q]);
  }
  if (embed_gather) {
    BLU_CHECK(params[static_cast<size_t>(wte)].offset == 0 && start(wpe) >= static_cast<std::size_t>(params[wte].numel),
              "fused data-parallel step: --dp-embedding-grad gather expects wte first in the gradient buffer");
  } else {
    inside(wte, nl + 1, "wte.weight");
  }
  inside(wpe, nl + 1, "wpe.weight");
  const std::size_t target = std::max<std::size_t>(1, o.dp_bucket_bytes / sizeof(float));
  sync = std::make_unique<FusedGradSync>(o.process_group, static_cast<float*>(grads.data_ptr()),
                                         plan_grad_buckets(units, target), /*sum=*/embed_gather);
}

// Note [Deadline of a data-parallel step]
// The step's collectives run inside a CUDA graph, where bludist's watchdog cannot see them (its
// events would be graph nodes). A dead or hung peer would leave the host in cudaStreamSynchronize
// forever; instead the host polls an event after the step, and past the group's timeout it prints
// a clear error and ends the process with bludist's watchdog status, which blurun turns into the
// end of the gang (Note [Collective timeouts] in bludist/process_group.h). The polling costs tens
// of microseconds per step.
void FusedGPT2Step::Impl::wait_for_step_with_deadline() {
  if (step_done == nullptr) {
    cuda_check(cudaEventCreateWithFlags(&step_done, cudaEventDisableTiming), "cudaEventCreate");
  }
  cuda_check(cudaEventRecord(step_done, stream.get()), "cudaEventRecord");
  const auto start = std::chrono::steady_clock::now();
  const auto limit = o.process_group->timeout();
  for (;;) {
    const cudaError_t e = cudaEventQuery(step_done);
    if (e == cudaSuccess) return;
    if (e != cudaErrorNotReady) cuda_check(e, "the training step");
    if (std::chrono::steady_clock::now() - start > limit) {
      std::fprintf(stderr,
                   "blutrain: the data-parallel training step did not finish within %.0f s (a peer rank died or "
                   "hangs in a gradient all-reduce, %s); exiting with status %d\n",
                   std::chrono::duration<double>(limit).count(), o.process_group->describe().c_str(),
                   bludist::kWatchdogExitCode);
      std::fflush(stderr);
      std::_Exit(bludist::kWatchdogExitCode);
    }
    std::this_thread::sleep_for(std::chrono::microseconds(20));
  }
}

// Rank 0's master weights into every rank, once before the first step (one grouped NCCL call);
// the bf16 copy is derived from them afterwards (sync_weights_from_model).
void FusedGPT2Step::Impl::broadcast_weights() {
  if (!sync) return;
  blu::cuda::stream_wait_stream(stream.get(), nullptr);  // the initialisation / checkpoint load first
  bludist::ProcessGroup& pg = *o.process_group;
  bludist::CommOptions co;
  co.stream = stream.get();
  pg.group_start();
  for (const Param& p : params) {
    pg.broadcast(p.master, static_cast<std::size_t>(p.numel), bludist::DType::F32, 0, co);
  }
  pg.group_end();
  cuda_check(cudaStreamSynchronize(stream.get()), "broadcasting rank 0's weights");
}

void FusedGPT2Step::Impl::forward() {
  const LayerBuffers& b0 = plan.layers[0];
  // Note [Per-layer bf16 weight copy]: blocks 0 and 1 are still in the ring after an earlier
  // micro-batch of this step; else block 0's cast goes first, beside the embedding.
  const int cached = ring_has_first_blocks ? std::min(2, cfg.n_layer) : 0;
  if (cached == 0) cast_block(0);
  L.embedding(act(b0.x), inputs(), w(wte), w(wpe), cfg.vocab_size, &d_readback()->token_error);
  L.layernorm(act(b0.ln1), f32(b0.ln1_mean), f32(b0.ln1_rstd), nullptr, act(b0.x), nullptr, w(P(0, kLn1W)),
              w(P(0, kLn1B)));
  for (int l = 0; l < cfg.n_layer; ++l) {
    wait_block(l);
    if (l + 1 < cfg.n_layer && l + 1 >= cached) cast_block(l + 1);  // into block l - 1's slot, beside block l
    block_forward(l, false);
  }
}

// Block l from x[l] and ln1 (written by the previous block's fused LayerNorm, or recomputed here
// when `recomputing` under --recompute block). The fc_proj output is added to x2 inside the next
// LayerNorm (ln_1 of block l+1, or ln_f), which also writes x[l+1].
void FusedGPT2Step::Impl::block_forward(int l, bool recomputing) {
  const LayerBuffers& b = plan.layers[static_cast<size_t>(l)];
  const int C = cfg.n_embd;
  if (recomputing) {
    L.layernorm(act(b.ln1), nullptr, nullptr, nullptr, act(b.x), nullptr, w(P(l, kLn1W)), w(P(l, kLn1B)));
  }
  L.linear("qkv", act(b.qkv), act(b.ln1), w(P(l, kQkvW)), w(P(l, kQkvB)), 3 * C, C);
  L.attention(act(b.qkv), act(b.atty), f32(b.lse));
  L.linear("attn proj", act(plan.tmp), act(b.atty), w(P(l, kProjW)), w(P(l, kProjB)), C, C);
  L.layernorm(act(b.ln2), f32(b.ln2_mean), f32(b.ln2_rstd), act(b.x2), act(plan.tmp), act(b.x), w(P(l, kLn2W)),
              w(P(l, kLn2B)));
  L.linear("fc", act(b.gelu), act(b.ln2), w(P(l, kFcW)), w(P(l, kFcB)), 4 * C, C, blublas::Epilogue::kBiasGelu,
           act(b.pre));
  if (recomputing) return;
  L.linear("fc proj", act(plan.tmp), act(b.gelu), w(P(l, kFpW)), w(P(l, kFpB)), C, 4 * C);
  if (l + 1 < cfg.n_layer) {
    const LayerBuffers& n = plan.layers[static_cast<size_t>(l + 1)];
    L.layernorm(act(n.ln1), f32(n.ln1_mean), f32(n.ln1_rstd), act(n.x), act(plan.tmp), act(b.x2),
                w(P(l + 1, kLn1W)), w(P(l + 1, kLn1B)));
  } else {
    L.layernorm(act(plan.lnf), f32(plan.lnf_mean), f32(plan.lnf_rstd), act(plan.x_final), act(plan.tmp),
                act(b.x2), w(lnf_w), w(lnf_b));
  }
}

// Note [Chunked classifier]
// The logits of all B*T rows would be B*T*Vp elements (1.6 GB in bf16 at B16 T1024, 3.3 GB in
// f32). Instead R rows at a time (default 8192): the lm-head GEMM writes the chunk's logits in
// the compute dtype with the padded-vocabulary mask as its bias epilogue; the fused cross-entropy
// reads each row once, writes the row's loss and overwrites the logits with dlogits =
// (softmax - onehot) / (B*T*accum) (its dloss argument is R / (B*T*accum), as it divides by its
// own row count); then dx_lnf[rows of the chunk] = dlogits wte and dwte += dlogits^T ln_f(x).
// Only the first chunk of the first micro-batch overwrites dwte; the embedding backward adds its
// part at the end of the backward.
void FusedGPT2Step::Impl::classifier(bool first) {
  const int C = cfg.n_embd, V = cfg.padded_vocab;
  const int64_t R = plan.in.logits_chunk_rows;
  // With the embedding gradient by all-gather the gradients are of the global batch's mean
  // (scaled by 1/world here) and the collectives sum (Note [Embedding gradient by all-gather]).
  const double total_rows = static_cast<double>(L.rows) * static_cast<double>(o.accum_steps) *
                            static_cast<double>(embed_gather ? world : 1);
  const std::size_t es = L.act_size();
  cudaEvent_t ev_lm_dw = nullptr;  // the previous chunk's weight gradient reads the logits buffer
  for (int64_t r0 = 0; r0 < L.rows; r0 += R) {
    const int n = static_cast<int>(std::min<int64_t>(R, L.rows - r0));
    const void* x = static_cast<const char*>(act(plan.lnf)) + static_cast<std::size_t>(r0) * C * es;
    void* dx = static_cast<char*>(act(plan.tmp)) + static_cast<std::size_t>(r0) * C * es;
    void* logits = act(plan.logits);
    main_wait(ev_lm_dw);
    L.gemm("lm head", n, V, C, x, false, C, w(wte), true, C, logits, V, false, 0.0f, blublas::Epilogue::kBias,
           mask.data_ptr());
    L.cross_entropy(f32(plan.row_losses) + r0, logits, targets() + r0, n, V, static_cast<float>(n / total_rows),
                    &d_readback()->target_error);
    fork();
    WL().gemm("lm head dw", V, C, n, logits, true, V, x, false, C, g(wte), C, true,
              first && r0 == 0 ? 0.0f : 1.0f);
    ev_lm_dw = side_mark();
    L.gemm("lm head dx", n, C, V, logits, false, V, w(wte), false, C, dx, C, false, 0.0f);
  }
  // Every lm-head part of dwte (all micro-batches) and the earlier micro-batches' embedding parts
  // are in: reduce dwte now, overlapping the whole backward (Note [Embedding gradient by all-gather]).
  if (embed_gather && sync && sync_now && !L.sizing) {
    sync->reduce_early(g(wte), static_cast<std::size_t>(params[wte].numel), WL().stream);
  }
  L.column_sum(&d_readback()->loss_sum, f32(plan.row_losses), L.rows, 1, blublas::Dtype::kF32, !first);
}

// Note [Gradient accumulation]
// The first micro-batch of a step overwrites every gradient (beta = 0 GEMMs, the bias-gradient
// epilogue, LayerNorm parameter gradients with accumulate = false), so no gradient is ever
// zeroed, except the position table's, which the embedding backward only adds to. Later
// micro-batches accumulate (beta = 1, column sums for the biases).
void FusedGPT2Step::Impl::backward(bool first) {
  if (first) L.memset_async(g(wpe), static_cast<std::size_t>(params[wpe].numel) * sizeof(float));
  classifier(first);
  L.layernorm_backward(act(plan.dres), g(lnf_w), g(lnf_b), act(plan.tmp), act(plan.x_final), f32(plan.lnf_mean),
                       f32(plan.lnf_rstd), w(lnf_w), false, !first);
  unit_ready(0);  // ln_f
  ev_qkv_dw = nullptr;
  for (int l = cfg.n_layer - 1; l >= 0; --l) {
    // The forward's last two blocks are still in the ring (Note [Per-layer bf16 weight copy]).
    wait_block(l);
    if (l - 1 >= 0 && l - 1 < cfg.n_layer - 2) cast_block(l - 1);  // into block l + 1's slot
    block_backward(l, first);
    if (sync && sync_now) {
      main_wait(ev_qkv_dw);  // the block's last weight gradient (the next block waits for it anyway)
      unit_ready(cfg.n_layer - l);
    }
  }
  main_wait(side_mark());  // join: every weight gradient is done (dwte is added to next)
  if (embed_gather && (sync_now || L.sizing)) {
    // The sizing pass sizes both embedding backwards (this rank's rows, all ranks' rows).
    if (L.sizing) L.embedding_backward(g(wte), g(wpe), act(plan.dres), inputs(), cfg.vocab_size, nullptr);
    gathered_embedding_backward();
    return;
  }
  L.embedding_backward(g(wte), g(wpe), act(plan.dres), inputs(), cfg.vocab_size, &d_readback()->token_error);
  unit_ready(cfg.n_layer + 1);  // wte, wpe
}

// Note [Embedding gradient by all-gather]
// The tied embedding's gradient is the largest bucket (wte + wpe, 157.7 MB for GPT-2 124M) and
// the last: dwte is final only after the embedding backward at the very end of the backward, so
// with --dp-embedding-grad allreduce its all-reduce has nothing left to overlap (2x H200,
// 2026-11-26: bf16 --dp 2 scaled 1.907x against fp32's 1.997x). With `gather`:
//  - the collectives sum instead of averaging, and each rank's gradients are of the global
//    batch's mean loss: the cross-entropy's dloss divides by world * B * T * accum (so the sum of
//    the ranks' gradients is the average the `allreduce` mode computes);
//  - dwte is reduced right after the last micro-batch's lm-head weight gradient (the first thing
//    of its backward), overlapping all of the backward; it then holds every micro-batch's lm-head
//    part and the earlier micro-batches' embedding parts;
//  - the last micro-batch's embedding part is not reduced as a 154 MB dense matrix: every rank
//    all-gathers the B*T rows of d x[0] (25 MB in bf16 at B16 T1024) and their token ids, waits
//    for the early reduction, and adds all ranks' rows into dwte with the deterministic embedding
//    backward over world*B sequences: the same rows in the same order on every rank, so dwte stays
//    bitwise identical across ranks;
//  - wpe keeps its own last bucket (3 MB): its last micro-batch part is this rank's column sum.
// Not yet measured on the device (as of its commit): an A/B switch, `allreduce` stays the default.
void FusedGPT2Step::Impl::gathered_embedding_backward() {
  const int C = cfg.n_embd;
  L.column_sum(g(wpe), act(plan.dres), L.batch, static_cast<int64_t>(L.seq_len) * C, L.act, /*accumulate=*/true);
  unit_ready(cfg.n_layer + 1);  // wpe
  if (!L.sizing) {
    sync->all_gather(gathered_rows.data_ptr(), act(plan.dres), static_cast<std::size_t>(L.rows) * C,
                     L.act_size() == 2 ? DType::BF16 : DType::F32, stream.get());
    sync->all_gather(gathered_tokens.data_ptr(), inputs(), static_cast<std::size_t>(L.rows), DType::I32, stream.get());
    sync->wait_early(stream.get());
  }
  L.embedding_backward(g(wte), nullptr, gathered_rows.data_ptr(), static_cast<const int32_t*>(gathered_tokens.data_ptr()),
                       cfg.vocab_size, &d_readback()->token_error, world * L.batch);
}

// Note [Weight gradients on a side stream]
// Each weight-gradient GEMM (dW = dY^T X with its bias gradient) depends on its inputs only, and
// nothing but the optimizer reads its output, so it runs on a second stream, forked from the main
// stream when its inputs are ready, while the main stream goes on with the data gradients. The
// skinny dW shapes (M, N <= 3072, K = 16384) leave part of the GPU idle in their last wave of
// tiles; the concurrent dX GEMMs, LayerNorm and attention kernels fill it. The main stream waits
// for a dW only before overwriting what it reads (dres before a LayerNorm backward adds into it,
// dbig before the next GEMM writes it, the logits chunk, the slots of the next block) and joins
// all of them before the embedding backward (which adds into dwte) and the optimizer. Both
// streams are captured into the one graph (fork = event record + wait). The side stream has its
// own workspace. Every kernel keeps its fixed reduction order, so the bits do not change
// (tested: FusedStep.SideStreamIsBitwiseSerial). Off while sizing and timing ops one by one, and
// with BLUTRAIN_SIDE_STREAM=0 (=1 forces it on). Off by default above kSideStreamMaxEmbd channels:
// measured on the H100 (session 10, bf16 B16 T1024, blutrain alone, same call): d12 (768) 469.8K
// tok/s with it vs 460.8K without (+2%); d48 (1600) 41.2K with it vs 42.7K without (-3.5%: its
// dW GEMMs already fill the machine, and the concurrent kernels then only wait for SMs, as the
// profile's inflated layernorm and bias-gradient times showed). d24 / d36 not yet measured.
// dres holds d x[l+1] on entry and d x[l] on exit.
void FusedGPT2Step::Impl::block_backward(int l, bool first) {
  const LayerBuffers& b = plan.layers[static_cast<size_t>(l)];
  const int C = cfg.n_embd;
  void* dres = act(plan.dres);
  void* dtmp = act(plan.tmp);
  void* dbig = act(plan.dbig);
  // Everything below overwrites dbig or a slot that the previous block's qkv weight gradient
  // (the last side-stream op so far) reads.
  main_wait(ev_qkv_dw);
  if (recompute == Recompute::kBlock) {
    block_forward(l, true);
  } else {
    if (recompute == Recompute::kLayerNorm) {
      L.layernorm(act(b.ln2), nullptr, nullptr, nullptr, act(b.x2), nullptr, w(P(l, kLn2W)), w(P(l, kLn2B)));
    }
    if (recompute != Recompute::kNone) L.gelu(act(b.gelu), act(b.pre), 4 * C);
  }
  // MLP: x[l+1] = x2 + fc_proj(gelu(fc(ln2(x2)))).
  fork();
  WL().linear_dw("fc proj dw", g(P(l, kFpW)), g(P(l, kFpB)), dres, act(b.gelu), C, 4 * C, first);
  cudaEvent_t ev_fp_dw = side_mark();  // reads dres
  if (gelu_grad_epilogue) {  // d(pre) straight from the GEMM: (dres W) * gelu'(pre)
    L.linear_dx("fc proj dx + gelu bwd", dbig, dres, w(P(l, kFpW)), C, 4 * C, act(b.pre));
  } else {
    L.linear_dx("fc proj dx", dbig, dres, w(P(l, kFpW)), C, 4 * C);
    L.gelu_backward(dbig, dbig, act(b.pre), 4 * C);
  }
  fork();
  WL().linear_dw("fc dw", g(P(l, kFcW)), g(P(l, kFcB)), dbig, act(b.ln2), 4 * C, C, first);
  cudaEvent_t ev_fc_dw = side_mark();  // reads dbig
  L.linear_dx("fc dx", dtmp, dbig, w(P(l, kFcW)), 4 * C, C);
  main_wait(ev_fp_dw);  // the LayerNorm backward adds into dres
  L.layernorm_backward(dres, g(P(l, kLn2W)), g(P(l, kLn2B)), dtmp, act(b.x2), f32(b.ln2_mean), f32(b.ln2_rstd),
                       w(P(l, kLn2W)), true, !first);
  // Attention: x2 = x + proj(attn(qkv(ln1(x)))).
  fork();
  WL().linear_dw("attn proj dw", g(P(l, kProjW)), g(P(l, kProjB)), dres, act(b.atty), C, C, first);
  cudaEvent_t ev_ap_dw = side_mark();  // reads dres
  L.linear_dx("attn proj dx", dtmp, dres, w(P(l, kProjW)), C, C);
  main_wait(ev_fc_dw);  // the attention backward overwrites dbig
  L.attention_backward(act(b.qkv), act(b.atty), f32(b.lse), dtmp, dbig);
  if (recompute == Recompute::kLayerNorm) {
    L.layernorm(act(b.ln1), nullptr, nullptr, nullptr, act(b.x), nullptr, w(P(l, kLn1W)), w(P(l, kLn1B)));
  }
  fork();
  WL().linear_dw("qkv dw", g(P(l, kQkvW)), g(P(l, kQkvB)), dbig, act(b.ln1), 3 * C, C, first);
  ev_qkv_dw = side_mark();  // reads dbig and ln1
  L.linear_dx("qkv dx", dtmp, dbig, w(P(l, kQkvW)), 3 * C, C);
  main_wait(ev_ap_dw);  // the LayerNorm backward adds into dres
  L.layernorm_backward(dres, g(P(l, kLn1W)), g(P(l, kLn1B)), dtmp, act(b.x), f32(b.ln1_mean), f32(b.ln1_rstd),
                       w(P(l, kLn1W)), true, !first);
}

// Note [Clip after the all-reduce]
// With data parallelism the global norm is taken over the averaged gradients, after the main
// stream waited for every bucket: each rank then computes the same norm from bitwise the same
// values (an all-reduce hands every rank the same result), so the clip factor and the AdamW
// update agree on every rank and the replicas never drift apart. Clipping each rank's local
// gradients before averaging would be a different (and rank-dependent) step.
void FusedGPT2Step::Impl::optimizer() {
  if (sync && sync_now && !L.sizing) sync->wait_all(stream.get());
  cuda_check(cudaMemcpyAsync(d_scalars(), h_scalars, sizeof(*h_scalars), cudaMemcpyHostToDevice, stream.get()),
             "copying the AdamW step scalars");
  const int n = static_cast<int>(adam_list.size());
  const bool clip = o.grad_clip > 0;
  Readback* rb = d_readback();
  blublas::Status s = blublas::grad_global_norm(&rb->norm, &rb->clip, static_cast<float>(o.grad_clip),
                                                adam_list.data(), n, blublas::Dtype::kF32, L.workspace,
                                                L.workspace_bytes, stream.get());
  BLU_CHECK(s.ok(), "fused GPT-2 step: grad_global_norm: ", s.to_string());
  s = blublas::adamw_update_device_scalars(adam_list.data(), n, blublas::Dtype::kF32,
                                           static_cast<float>(o.adamw.beta1), static_cast<float>(o.adamw.beta2),
                                           static_cast<float>(o.adamw.eps), d_scalars(), clip ? &rb->clip : nullptr,
                                           stream.get());
  BLU_CHECK(s.ok(), "fused GPT-2 step: adamw_update: ", s.to_string());
  L.mark("adamw (scalars copy, grad norm, update)");
  L.launches += 2;
}

void FusedGPT2Step::Impl::run_part(Part part) {
  // The side stream is off while sizing (setup) and while timing ops one by one.
  side_on = side_enabled && !L.sizing && !L.timing;
  W.stream = side_on ? side.get() : stream.get();
  // blublas Note [GEMM CTA budget]: the side stream's weight-gradient GEMMs on fewer CTAs, leaving
  // SMs to the main stream's kernels beside them (BLUTRAIN_SIDE_GEMM_CTAS; 0, the default: all;
  // 112 measured 478.2K -> 473.5K tok/s in bf16 B16, H100, session 24).
  W.max_ctas = side_on ? side_gemm_ctas : 0;
  cast_on = layer_copy && !L.sizing && !L.timing;
  ev_cast = {};
  // kRest / kLast follow a backward of the same step (no update since): it left blocks 0 and 1 in
  // the ring. Not while sizing or timing (a timed step casts every block in order).
  ring_has_first_blocks = cast_on && (part == kRest || part == kLast);
  W.timing = L.timing;
  next_event = 0;
  sync_now = false;
  switch (part) {
    case kFirst:
      sync_now = o.accum_steps == 1;  // only the last micro-batch communicates
      forward();
      backward(true);
      if (o.accum_steps == 1) optimizer();
      break;
    case kRest:
      forward();
      backward(false);
      break;
    case kOptim:
      optimizer();
      break;
    case kLast:
      sync_now = true;
      forward();
      backward(false);
      optimizer();
      break;
    case kNumParts: break;
  }
  sync_now = false;
}

// Note [Graph capture of the step]
// The first step runs eagerly: lazy initialisation inside the launchers (function attributes,
// device queries) happens outside any capture, and its launch count is recorded. Each part is
// captured on first use after that (relaxed mode: the launchers only query the device) and
// replayed from then on. Every pointer a kernel reads is fixed for the engine's lifetime
// (arena, flat buffers, token buffers), and what changes per step reaches the graph through
// device memory: the tokens (copied in before the replay) and the AdamW scalars (a captured copy
// from pinned host memory that the host rewrites before each replay, safe because step() waits
// for the previous step before returning).
void FusedGPT2Step::Impl::launch(Part part) {
  if (!o.use_graph || steps_done == 0 || L.timing) {
    run_part(part);
    return;
  }
  if (!graphs[part].valid()) {
    blu::cuda::GraphExec::begin_capture(stream.get());
    try {
      run_part(part);
    } catch (...) {
      blu::cuda::GraphExec::abandon_capture(stream.get());
      throw;
    }
    graphs[part] = blu::cuda::GraphExec::end_capture(stream.get(), stream_priority);
  }
  graphs[part].launch(stream.get());
}

FusedGPT2Step::FusedGPT2Step(GPT2& model, AdamW& optimizer, const FusedStepOptions& options)
    : impl_(std::make_unique<Impl>(model, optimizer, options)) {
  impl_->setup();
  impl_->broadcast_weights();
  sync_weights_from_model();
}

FusedGPT2Step::~FusedGPT2Step() {
  Impl& s = *impl_;
  if (s.stream.get() != nullptr) (void)cudaStreamSynchronize(s.stream.get());
  if (s.side.get() != nullptr) (void)cudaStreamSynchronize(s.side.get());
  if (s.cast_stream.get() != nullptr) (void)cudaStreamSynchronize(s.cast_stream.get());
  for (cudaEvent_t e : s.events) (void)cudaEventDestroy(e);
  if (s.step_done != nullptr) (void)cudaEventDestroy(s.step_done);
  if (s.h_scalars != nullptr) (void)cudaFreeHost(s.h_scalars);
  if (s.h_readback != nullptr) (void)cudaFreeHost(s.h_readback);
}

void FusedGPT2Step::sync_weights_from_model() {
  Impl& s = *impl_;
  if (s.o.precision != Precision::kBf16) return;
  NoGradGuard no_grad;
  blu::cuda::StreamGuard guard(s.stream.get(), s.device);
  const std::vector<NamedParam>& list = s.opt.params();
  // The copy is a bf16 view of the flat buffer; blutensor's copy_ casts. Under --weight-copy layer
  // the blocks' matrices are not in it: each step casts them (Note [Per-layer bf16 weight copy]).
  Tensor flat = from_blob(s.wcopy.data_ptr(), {static_cast<int64_t>(s.copy_elems)},
                          TensorOptions(kBFloat16).device(Device::cuda(s.device)));
  for (size_t i = 0; i < list.size(); ++i) {
    if (s.in_ring(i)) continue;
    const Tensor src = list[i].tensor->detach().reshape({-1});
    flat.narrow(0, static_cast<int64_t>(s.copy_off[i]), s.params[i].numel).copy_(src);
  }
  cuda_check(cudaStreamSynchronize(s.stream.get()), "refreshing the bf16 weights");
}

FusedStepResult FusedGPT2Step::step(const StageFn& stage, double lr) {
  Impl& s = *impl_;
  blu::cuda::StreamGuard guard(s.stream.get(), s.device);
  // Work issued on the legacy stream (checkpoint loads, evaluation) comes first.
  blu::cuda::stream_wait_stream(s.stream.get(), nullptr);
  const int64_t t = s.opt.step_count() + 1;
  *s.h_scalars = blublas::adamw_step_scalars(lr, s.o.adamw.beta1, s.o.adamw.beta2, static_cast<int>(t));
  const int64_t launches_before = s.L.launches + s.W.launches;
  cudaEvent_t timing_start = nullptr;
  if (s.time_next) {
    s.L.timing = true;
    cuda_check(cudaEventCreate(&timing_start), "cudaEventCreate");
    cuda_check(cudaEventRecord(timing_start, s.stream.get()), "cudaEventRecord");
  }
  const auto wall_start = std::chrono::steady_clock::now();
  // With data parallelism and accumulation the last micro-batch is its own part (kLast): it
  // all-reduces and runs the optimizer; the others never communicate.
  const bool last_part = s.sync != nullptr && s.o.accum_steps > 1;
  for (int64_t micro = 0; micro < s.o.accum_steps; ++micro) {
    stage(s.inputs(), s.targets(), s.stream.get());
    if (micro == 0) s.host_marks.launching = std::chrono::steady_clock::now();  // Note [Host issue time]
    s.launch(micro == 0 ? Impl::kFirst : last_part && micro + 1 == s.o.accum_steps ? Impl::kLast : Impl::kRest);
    if (micro == 0) s.host_marks.launched = std::chrono::steady_clock::now();  // Note [Host issue time]
  }
  if (s.o.accum_steps > 1 && !last_part) s.launch(Impl::kOptim);
  if (s.steps_done == 0) s.launches_per_step = s.L.launches + s.W.launches - launches_before;
  cuda_check(cudaMemcpyAsync(s.h_readback, s.d_readback(), sizeof(Readback), cudaMemcpyDeviceToHost, s.stream.get()),
             "reading the loss");
  s.host_marks.waiting = std::chrono::steady_clock::now();
  if (s.sync) {
    s.wait_for_step_with_deadline();
  } else {
    cuda_check(cudaStreamSynchronize(s.stream.get()), "the training step");
  }
  if (timing_start != nullptr) {
    s.finish_timing(timing_start,
                    std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - wall_start).count());
  }
  const Readback& r = *s.h_readback;
  BLU_CHECK(r.token_error == 0, "fused GPT-2 step: an input token id is outside [0, ", s.cfg.vocab_size, ")");
  BLU_CHECK(r.target_error == 0, "fused GPT-2 step: a target token id is outside [0, ", s.cfg.padded_vocab, ")");
  s.opt.set_step_count(t);
  ++s.steps_done;
  FusedStepResult out;
  out.loss = static_cast<double>(r.loss_sum) / (static_cast<double>(s.L.rows) * static_cast<double>(s.o.accum_steps));
  out.grad_norm = r.norm;
  return out;
}

Tensor FusedGPT2Step::gradient(int index) const {
  const Impl& s = *impl_;
  BLU_CHECK(index >= 0 && index < static_cast<int>(s.params.size()), "FusedGPT2Step::gradient: index ", index,
            " out of range (", s.params.size(), " parameters)");
  const Tensor& p = *s.opt.params()[static_cast<size_t>(index)].tensor;
  return from_blob(s.g(index), p.sizes(), TensorOptions(kFloat32).device(Device::cuda(s.device)));
}

// Note [Op timing]
// `time_next_step()` makes the next step run eagerly with a CUDA event recorded after every
// launch (StepLauncher::mark). An op's time is the gap between its event and the previous one:
// on one stream with the host ahead of the GPU (265 launches in ~37 ms) that is the op's device
// time. The eager step is otherwise the same step (same kernels, same order), so its per-op
// times add up to the graph step's time minus what the graph saves in launch gaps.
namespace {
const char* op_family(const std::string& op) {
  if (op.find("attention") != std::string::npos) return "attention";
  if (op.find("layernorm") != std::string::npos) return "layernorm";
  if (op.find("gelu") != std::string::npos) return "gelu";
  if (op.find("cross entropy") != std::string::npos) return "cross-entropy";
  if (op.find("embedding") != std::string::npos) return "embedding";
  if (op.find("adamw") != std::string::npos) return "optimizer";
  if (op.find("column sum") != std::string::npos || op.find("memset") != std::string::npos ||
      op.find("bf16 copy") != std::string::npos)
    return "other";
  return "gemm";
}
}  // namespace

void FusedGPT2Step::Impl::finish_timing(cudaEvent_t start, double wall_ms) {
  std::map<std::string, std::pair<double, int>> per_op;
  std::map<std::string, std::pair<double, int>> per_family;
  std::vector<std::string> order;
  cudaEvent_t prev = start;
  double total = 0;
  for (auto& [op, e] : marks) {
    float ms = 0;
    cuda_check(cudaEventElapsedTime(&ms, prev, e), "cudaEventElapsedTime");
    if (per_op.find(op) == per_op.end()) order.push_back(op);
    per_op[op].first += ms;
    per_op[op].second += 1;
    per_family[op_family(op)].first += ms;
    per_family[op_family(op)].second += 1;
    total += ms;
    prev = e;
  }
  std::sort(order.begin(), order.end(), [&](const std::string& a, const std::string& b) {
    return per_op[a].first > per_op[b].first;
  });
  std::string js = "{\"engine\": \"fused\", \"mode\": \"eager with events\", \"device_ms\": " +
                   std::to_string(total) + ", \"host_wall_ms\": " + std::to_string(wall_ms) +
                   ", \"launches\": " + std::to_string(marks.size()) + ", \"families\": {";
  bool firstf = true;
  for (auto& [f, v] : per_family) {
    js += std::string(firstf ? "" : ", ") + "\"" + f + "\": {\"ms\": " + std::to_string(v.first) +
          ", \"launches\": " + std::to_string(v.second) + "}";
    firstf = false;
  }
  js += "}, \"ops\": [";
  for (size_t i = 0; i < order.size(); ++i) {
    js += std::string(i ? ", " : "") + "{\"op\": \"" + order[i] + "\", \"ms\": " +
          std::to_string(per_op[order[i]].first) + ", \"launches\": " + std::to_string(per_op[order[i]].second) + "}";
  }
  js += "]}";
  timing_json = js;
  for (auto& [op, e] : marks) (void)cudaEventDestroy(e);
  (void)cudaEventDestroy(start);
  marks.clear();
  L.timing = false;
  W.timing = false;
  time_next = false;
}

void FusedGPT2Step::time_next_step() { impl_->time_next = true; }
const std::string& FusedGPT2Step::timing_json() const { return impl_->timing_json; }

namespace {
bool matches(const std::string& name, const std::string& pattern) {
  if (!pattern.empty() && pattern.back() == '*') return name.rfind(pattern.substr(0, pattern.size() - 1), 0) == 0;
  return name == pattern;
}
}  // namespace

std::vector<std::string> FusedGPT2Step::dump_names() const {
  const Impl& s = *impl_;
  std::vector<std::string> names;
  for (int l = 0; l < s.cfg.n_layer; ++l) {
    for (const char* n : {"x", "ln_1", "attn.qkv", "attn.y", "x2", "ln_2", "mlp.pre", "mlp.gelu"}) {
      names.push_back("h." + std::to_string(l) + "." + n);
    }
  }
  names.push_back("x_final");
  names.push_back("ln_f");
  for (const NamedParam& p : s.opt.params()) names.push_back("grad." + p.name);
  return names;
}

std::map<std::string, Tensor> FusedGPT2Step::dump(const std::vector<std::string>& patterns) const {
  const Impl& s = *impl_;
  BLU_CUDA_CHECK(cudaStreamSynchronize(s.stream.get()));
  const int64_t C = s.cfg.n_embd;
  const DType dt = s.L.act == blublas::Dtype::kBF16 ? kBFloat16 : kFloat32;
  // Offsets used by more than one layer are shared slots (Note [Activation arena]).
  std::map<std::size_t, int> uses;
  for (const LayerBuffers& b : s.plan.layers) {
    for (std::size_t off : {b.x, b.ln1, b.qkv, b.atty, b.x2, b.ln2, b.pre, b.gelu}) ++uses[off];
  }
  auto activation = [&](std::size_t off, int64_t width, const std::string& name) {
    BLU_CHECK(s.cfg.n_layer == 1 || uses[off] <= 1, "--dump ", name, ": not kept per layer under --recompute ",
              recompute_name(s.recompute), " (use --recompute none)");
    return from_blob(s.act(off), {s.L.batch, s.L.seq_len, width}, TensorOptions(dt).device(Device::cuda(s.device)))
        .to(kCPU);
  };
  std::map<std::string, Tensor> out;
  for (const std::string& name : dump_names()) {
    bool want = false;
    for (const std::string& p : patterns) want = want || matches(name, p);
    if (!want) continue;
    if (name.rfind("grad.", 0) == 0) {
      const std::vector<NamedParam>& list = s.opt.params();
      for (size_t i = 0; i < list.size(); ++i) {
        if ("grad." + list[i].name == name) out[name] = gradient(static_cast<int>(i)).to(kCPU);
      }
      continue;
    }
    if (name == "x_final") {
      out[name] = activation(s.plan.x_final, C, name);
      continue;
    }
    if (name == "ln_f") {
      out[name] = activation(s.plan.lnf, C, name);
      continue;
    }
    const size_t dot = name.find('.', 2);
    const int l = std::stoi(name.substr(2, dot - 2));
    const std::string what = name.substr(dot + 1);
    const LayerBuffers& b = s.plan.layers[static_cast<size_t>(l)];
    if (what == "x") out[name] = activation(b.x, C, name);
    if (what == "ln_1") out[name] = activation(b.ln1, C, name);
    if (what == "attn.qkv") out[name] = activation(b.qkv, 3 * C, name);
    if (what == "attn.y") out[name] = activation(b.atty, C, name);
    if (what == "x2") out[name] = activation(b.x2, C, name);
    if (what == "ln_2") out[name] = activation(b.ln2, C, name);
    if (what == "mlp.pre") out[name] = activation(b.pre, 4 * C, name);
    if (what == "mlp.gelu") out[name] = activation(b.gelu, 4 * C, name);
  }
  for (const std::string& p : patterns) {
    bool any = false;
    for (const auto& kv : out) any = any || matches(kv.first, p);
    BLU_CHECK(any, "--dump: no activation or gradient named '", p, "' (names: h.<layer>.{x, ln_1, attn.qkv, attn.y, ",
              "x2, ln_2, mlp.pre, mlp.gelu}, x_final, ln_f, grad.<parameter>; a trailing * matches a prefix)");
  }
  return out;
}

cudaStream_t FusedGPT2Step::stream() const { return impl_->stream.get(); }

HostMarks FusedGPT2Step::host_marks() const { return impl_->host_marks; }

int64_t FusedGPT2Step::launches_per_step() const { return impl_->launches_per_step; }

std::string FusedGPT2Step::describe() const {
  const Impl& s = *impl_;
  char buf[1024];
  const double mib = 1024.0 * 1024.0;
  auto mib_of = [&](std::size_t bytes) { return std::to_string(static_cast<int>(bytes / mib)); };
  const std::string weight_copy =
      s.o.precision != Precision::kBf16 ? ""
      : ", bf16 weight copy " + mib_of(s.copy_elems * 2) + " MiB" +
            (s.layer_copy ? " + per block a two-block ring of " + mib_of(s.ring_slot_elems * 4) + " MiB" : "") + " (" +
            s.weight_copy_why + ")";
  std::snprintf(buf, sizeof(buf),
                "fused step: %s activations, attention %s, %s; gradients %.0f MiB%s, workspace %.0f MiB, "
                "logits chunk %lld rows, %s",
                s.L.act == blublas::Dtype::kBF16 ? "bf16" : "f32", s.attention_name.c_str(), s.plan.describe().c_str(),
                s.grad_elems * 4 / mib,
                weight_copy.c_str(),
                (s.L.workspace_bytes + s.W.workspace_bytes) / mib, static_cast<long long>(s.plan.in.logits_chunk_rows),
                s.o.use_graph ? "CUDA graph" : "eager launches");
  if (s.sync) return std::string(buf) + "; " + s.sync->describe();
  return buf;
}

}  // namespace blu::train

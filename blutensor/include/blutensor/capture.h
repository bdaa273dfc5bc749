// blutensor/capture.h: records what one stretch of eager code (a whole training step: forward,
// autograd backward, optimizer update) asks of the backends, as a graph of backend-op calls on
// buffers at fixed shapes, and replays such a graph. blucomp compiles it (it reads the JSON
// form; blutensor never includes blucomp). Note [Step capture].
//
//   blu::capture::Scope scope;          // on this thread, every backend op is now also recorded
//   Tensor loss = model.forward(x, y); loss.backward(); opt.step(lr);
//   blu::capture::Graph g = scope.finish();
//   std::string key = g.key("sm_90");    // cache key: graph structure, shapes/dtypes, arch
//   std::string json = g.to_json();      // what blu-import reads
//   auto out = blu::capture::replay(g, {{buffer id, tensor holding its value at capture start}});
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "blutensor/capture_arena.h"
#include "blutensor/cuda_stream.h"
#include "blutensor/tensor.h"

namespace blu::capture {

namespace detail {
struct Ctx;  // the storages of one run (src/capture/capture_internal.h)
}  // namespace detail

// Note [Step capture]
// The record is taken where the ops meet the backends (BLU_DISPATCH, dispatch.h, plus the CUDA
// fused attention and the host <-> tensor copies), so autograd, nn and optim need nothing of it:
// whatever the eager code runs is what the graph holds, in order, with the op's own arguments.
// Values are not recorded (the eager code still runs), only what is needed to run the same calls
// again: each tensor argument as (buffer, storage offset, sizes, strides, dtype), every scalar
// argument, and the bytes of tensors filled from host memory during the capture (token batches,
// constants) so that a replay is self-contained.
//
// Buffers are storages. A buffer first touched by a read (or by a write that does not cover all
// of it) existed before the capture and is an *input*: parameters, gradients, optimizer moments.
// A buffer still referenced when finish() runs and written during the capture is an *output*
// (updated weights and moments, the loss); the rest are temporaries the step made and dropped,
// which is what a compiler may place in one arena. Host reads (item(), to_double_vector(), a copy
// to the CPU from CUDA) are recorded as `host_read` nodes: they are where a step's control flow or
// scalar arguments may depend on values (gradient clipping's scale, the non-finite check), so a
// compiled step must either end there or get the value on the device; replay just repeats the
// recorded scalars, so it reproduces the captured step, not another one.
//
// Replay runs the nodes through the same backends on fresh buffers: a replay that reproduces the
// eager step bit for bit (tests/blutensor/capture_test.cpp, the GPT-2 step in blutrain's test)
// proves that nothing the step did escaped the record.

enum class Origin : uint8_t {
  kInput,     // read before written: its value at capture start comes from outside
  kInternal,  // first fully written during the capture
};

struct Buffer {
  int id = 0;
  std::size_t nbytes = 0;
  Device device;
  Origin origin = Origin::kInternal;
  bool written = false;  // some node writes it
  bool alive = false;    // still referenced when finish() ran (an output when written)
  bool output() const { return alive && written; }
};

// One tensor argument: a strided view of a buffer.
struct TensorRef {
  int buffer = -1;  // -1: an undefined Tensor (an optional argument left out)
  DType dtype = DType::F32;
  int64_t offset = 0;  // in elements of dtype
  Shape sizes, strides;
  bool defined() const { return buffer >= 0; }
  int64_t numel() const;
  bool contiguous() const;  // row-major dense (offset any)
};

// One positional argument of a backend op, named as in backend_ops.def.
struct Arg {
  enum class Kind : uint8_t { kTensor, kTensorList, kNumber, kInt, kUInt, kBool, kEnum };
  std::string name;
  Kind kind = Kind::kNumber;
  bool read = false, write = false;  // tensors: what the op does with it
  std::vector<TensorRef> tensors;    // kTensor: one; kTensorList: any
  double number = 0;                 // kNumber
  int64_t integer = 0;               // kInt, kBool (0/1), kEnum (the enumerator's value)
  uint64_t uinteger = 0;             // kUInt
  std::string enum_name;             // kEnum: the enumerator, e.g. "kAdd"
};

struct Node {
  std::string op;  // a backend op of backend_ops.def, "attention_forward"/"attention_backward"
                   // (CUDA), "host_write" (arg "dst", bytes in `data`), "host_read" (arg "src")
  Device device;
  std::vector<Arg> args;
  std::vector<uint8_t> data;  // host_write only
  const Arg& arg(const std::string& name) const;  // throws naming the node when absent
};

struct Graph {
  std::vector<Buffer> buffers;  // id = index
  std::vector<Node> nodes;
  // With Scope(true): each input buffer's bytes at its first touch (what replay() needs). Not in
  // the JSON. A CUDA buffer whose storage existed before the Scope opened is kept in host memory
  // (Note [Input snapshots on the host] in src/capture/capture_record.cpp).
  std::map<int, Tensor> initial;
  // The storages seen, by buffer id, as weak references (not in the JSON): buffer_of(t) is the id
  // of t's storage, or -1 when the capture never touched it.
  std::vector<std::weak_ptr<Storage>> storages;
  int buffer_of(const Tensor& t) const;

  std::vector<int> inputs() const;   // buffer ids, ascending
  std::vector<int> outputs() const;  // buffer ids, ascending
  int launches() const;              // nodes that are kernel launches (not host_read/host_write)
  int host_reads() const;
  // FNV-1a over the op sequence, the scalar arguments (but AdamW's lr and step count: a
  // compiled step takes those per call) and which buffer each argument uses (structure), and
  // over every sizes/strides/dtype/offset (signature).
  uint64_t structure_hash() const;
  uint64_t signature_hash() const;
  static std::string hash_hex(uint64_t h);  // 16 lowercase hex digits (keys, the JSON, plans)
  // "<structure hex>-<signature hex>-<arch>": equal keys mean the same calls on the same shapes,
  // so a compiled artefact for one is valid for the other. arch: e.g. "sm_90", "cpu".
  std::string key(const std::string& arch) const;
  std::string to_json() const;  // Note [Capture JSON] in src/capture/capture_json.cpp
  static Graph from_json(const std::string& text);
  std::string summary() const;  // one line per op kind with counts, inputs/outputs/temporaries
};

// Starts recording on this thread; one Scope at a time per thread (a second is an error).
class Scope {
 public:
  explicit Scope(bool snapshot_inputs = false);
  ~Scope();  // stops recording if finish() was not called
  Scope(const Scope&) = delete;
  Scope& operator=(const Scope&) = delete;
  Graph finish();  // stops recording and returns the graph; once

 private:
  bool open_ = true;
};

bool recording();  // a Scope is open on this thread

// Runs g's nodes through the backends on new buffers of g's device(s), each input buffer filled
// from g.initial (a capture with Scope(true)); a missing input is an error naming the buffer.
// Returns every output buffer (Buffer::output()) as a contiguous 1-D tensor over all its bytes
// (i32 elements, or u16 when the size is not a multiple of 4): compare bytes with
// capture::bytes_of(eager tensor).
std::map<int, Tensor> replay(const Graph& g);

// The whole storage of t (all its bytes, from the storage's start) as replay() returns buffers.
Tensor bytes_of(const Tensor& t);

// Note [Side stream] (src/capture/capture_side_stream.cpp): the calls of g that an Executable runs
// on a second stream and where its main stream waits for them. override_of: per node, the
// replace()d set it belongs to (-1: none; may be shorter than the node list).
struct SidePlan {
  std::vector<int> group_of;     // per node: its side group, -1: the main stream (a replaced
                                 // set: marked at its last node, where its kernel launches)
  std::vector<int> fork_at;      // per group: its first call (the main stream forks it there)
  std::vector<int> join_before;  // per group: the node before which the main stream waits for it
                                 // (nodes.size(): at the end of the step)
  std::vector<int> ready_after;  // per group: the main-stream launch it waits for (-1: the step's start)
  std::vector<int> extend_to;    // per buffer: a group touches it, so it lives to this node (-1: none)
  std::vector<int> start_from;   // per buffer: a group writes it, so it lives from this node (-1: none)
  std::vector<std::vector<int>> issue_order;  // per group: its launches in the order the side stream
                                 // issues them where that is not the record's (Note [Cheap side
                                 // calls first]); empty: record order
  std::size_t side_calls = 0;
};
// Note [LayerNorm backward with the residual gradient] (src/capture/capture_ln_residual.cpp): the
// (layer_norm_backward, binary kAdd) pairs whose add sums the LayerNorm's dx with the residual
// gradient and may run as one launch; residual: the add's operand that is not dx (0 = a, 1 = b).
struct LnResidualPair {
  int ln = -1, add = -1, residual = -1;
};
std::vector<LnResidualPair> find_ln_residual_pairs(const Graph& g, const std::vector<int>& override_of);
// Note [Classifier gradient scaling] (src/capture/capture_classifier_grad.cpp): the widen / scale /
// narrow runs (each three consecutive calls) and the tied embedding's gradient chain (kMul,
// [copy_], embedding_backward, kAdd, [copy_]; empty with why_embedding when not found).
struct ClassifierGradChains {
  std::vector<std::vector<int>> dx;
  std::vector<int> embedding;
  std::size_t embedding_split = 0;  // embedding[embedding_split] is the embedding_backward: the
                                    // scaling's calls before it, the sum's from it on
  std::string why_embedding;
};
ClassifierGradChains find_classifier_grad_chains(const Graph& g, const std::vector<int>& override_of);
// Note [Weight copies from the update] (src/capture/capture_weight_copies.cpp): the casts (copy_ /
// copy_tensors_ nodes) of parameters to bf16 copies that the parameters' adamw_step can write
// instead. last_use: per buffer, its last node (-1: none).
struct WeightCastFolds {
  struct Copy {
    TensorRef dst, src;      // the bf16 copy, the fp32 parameter
    int update = -1, index = -1;  // the adamw_step node and the parameter's place in its list
  };
  struct Cast {
    int node = -1;
    std::vector<Copy> copies;
  };
  std::vector<Cast> casts;
};
WeightCastFolds find_weight_casts(const Graph& g, const std::vector<int>& override_of, const std::vector<int>& last_use);

// max_in_flight: how many groups may be forked and not yet joined at once (Note [Side groups in
// flight] in src/capture/capture_side_stream.cpp; 1: each fork joins the group before it). An
// Executable runs kSideInFlightDefault unless BLU_CAPTURE_SIDE_IN_FLIGHT says otherwise (measured:
// no gain from 2).
inline constexpr int kSideInFlightDefault = 1;
// chains: Note [Side chains] (a launch whose results only gap-rule side calls touch later is a side
// call however soon): 1 on, 0 off, -1 side_chains_default(g): BLU_CAPTURE_SIDE_CHAIN=1 / 0, else on
// for a step with 16-bit GEMM operands (measured, session 38: +1.3% bf16, -0.6% fp32).
bool side_chains_default(const Graph& g);
// Note [Cheap side calls first]: off unless BLU_CAPTURE_SIDE_CHEAP_FIRST=1.
bool side_cheap_first_default();
// Note [Side gaps from a set's first node]: true unless BLU_CAPTURE_SIDE_GAP_AT_LAUNCH=1.
bool side_gap_from_first_node();
SidePlan side_stream_plan(const Graph& g, const std::vector<int>& override_of,
                          int max_in_flight = kSideInFlightDefault, int chains = -1,
                          bool cheap_first = side_cheap_first_default());

// Note [Running a captured step]
// An Executable runs a captured step again, as the step: on the live buffers the capture saw
// (weights, moments, the batch tensors: whatever is still referenced), so each run() updates them
// in place like the eager step would, while the step's temporaries live in one arena per device,
// allocated at the first run() and kept, each at a fixed offset from its live range (Note [Step
// arena]; the buffers a host read reads live to the end of the step, so host_reads() stay valid
// after run()); a result may take the bytes of an operand that dies at its node where the op is
// in-place safe (Note [In-place reuse]; BLU_CAPTURE_INPLACE=0 or use_inplace(false): never, for
// A/B). BLU_CAPTURE_ARENA=0 in the environment, or use_arena(false), gives each temporary
// its own storage at its first use, released after its last (the eager step's allocation
// pattern: for debugging). Inputs no longer
// referenced after the capture (a scalar made from a host value inside the step) replay their
// snapshot: capture with Scope(true). Per-run scalars: AdamW's lr and step count (the key leaves
// them out, Graph::structure_hash). To feed a new batch, write it into the batch tensors the
// captured step read (x.copy_(next)) before run(). The host reads of the eager step become values
// the caller reads after run() (host_reads(), in node order); their checks (embedding index range)
// are not repeated: the caller validates what it writes into the inputs. Valid while the step's
// launches do not depend on values read on the host (Note [Clipping on the device] in blutrain).
struct StepScalars {
  double lr = -1;     // AdamW learning rate; < 0: as captured
  int64_t step = -1;  // AdamW step count (bias correction); < 0: as captured
};

class Executable {
 public:
  explicit Executable(Graph g);  // throws naming an input buffer that is neither live nor snapshotted
  // Runs the step. on_host_read (optional) sees each host read's value as the eager code did, in
  // node order (index = position among the host reads); returning false stops the run there, the
  // rest of the step not launched (a non-finite gradient norm before the update). Returns whether
  // the whole step ran.
  using HostReadFn = std::function<bool(std::size_t index, const Tensor& value)>;
  bool run(const StepScalars& scalars = StepScalars(), const HostReadFn& on_host_read = nullptr);
  // The tensors the step's host reads read, after the last run() (views that keep their storage).
  const std::vector<Tensor>& host_reads() const { return host_reads_; }
  // When the last run()'s first CUDA graph launch returned on the host (a default time point when
  // that run launched no graph): blutrain Note [Host issue time].
  std::chrono::steady_clock::time_point graph_launched_at() const { return graph_launched_at_; }
  std::chrono::steady_clock::time_point graph_launching_at() const { return graph_launching_at_; }  // its call began
  std::size_t persistent_buffers() const { return persistent_; }

  // Note [Kernel overrides]
  // A compiled kernel in place of a set of recorded calls (blucomp's fused groups and GEMM
  // epilogues name theirs: Note [Node provenance]). The calls `nodes` (ascending indices into the
  // graph, no host reads, disjoint from earlier overrides) are not run; where the last of them was,
  // `launch` runs with `view`, which gives the tensor of any TensorRef of the graph on this run's
  // buffers (a call's arguments: graph().nodes[i].args). The kernel must leave what the calls left
  // in every buffer read later or kept after the step. `views`: the buffers the launch views
  // (empty: every buffer its calls name). A buffer that only replaced calls use and that no
  // launch views gets no bytes: not in the arena, not allocated per run (the chunked classifier's
  // logits and their gradient, a fused group's inner values); a viewed one is a temporary from its
  // first use to the last launch that views it (a value one compiled kernel hands to another: the
  // session-16 device run found such values dropped, each then given a storage of its own at run
  // time, 2.3 GiB outside the arena at d12 B8). Viewing an undeclared buffer with no bytes is an
  // error naming it. scratch_bytes > 0: the launch also gets a scratch tensor of that many bytes
  // (byte_view's form), placed in the arena as a temporary live at the set's last node only (a
  // storage of its own without the arena).
  using ViewFn = std::function<Tensor(const TensorRef&)>;
  using LaunchFn = std::function<void(const ViewFn& view)>;
  using ScratchLaunchFn = std::function<void(const ViewFn& view, const Tensor& scratch)>;
  void replace(std::vector<int> nodes, LaunchFn launch, std::vector<int> views = {});
  void replace(std::vector<int> nodes, std::size_t scratch_bytes, ScratchLaunchFn launch,
               std::vector<int> views = {});
  const Graph& graph() const { return graph_; }
  // Whether call `node` is in a replace()d set (it no longer runs itself).
  bool replaced(int node) const {
    return node >= 0 && static_cast<size_t>(node) < override_of_.size() && override_of_[static_cast<size_t>(node)] >= 0;
  }

  // The classifier in row chunks (Note [Chunked classifier], src/capture/capture_classifier.cpp):
  // recognises the lm-head GEMM, cross-entropy forward/backward and the two backward GEMMs and
  // replaces them by two chunked launches (forward, backward), so the [N, V] logits and their
  // gradient get no bytes. chunk_rows <= 0: BLU_CAPTURE_CLASSIFIER_ROWS, else the rows whose
  // logits fit kClassifierChunkBytes. Where the pattern is not exactly there (or a node is already
  // replaced) the record is left as is and the report says why. Once per Executable (a second
  // call returns the first report). Callers switch it off by not calling it (the trainer:
  // BLU_CAPTURE_CHUNKED_CLASSIFIER=0).
  static constexpr std::size_t kClassifierChunkBytes = std::size_t{128} << 20;
  struct ClassifierChunks {
    bool applied = false;
    std::string why;              // not applied: the part of the pattern that is missing
    int64_t rows = 0, vocab = 0;  // the logits' [N, V]
    int64_t chunk_rows = 0, chunks = 0;
    std::size_t logits_bytes = 0;   // the recorded logits (their gradient: as many)
    std::size_t scratch_bytes = 0;  // one chunk's logits (each launch's scratch)
    std::vector<int> forward_nodes, backward_nodes;
    std::string describe() const;  // one line, no newline
  };
  const ClassifierChunks& chunk_classifier(int64_t chunk_rows = 0);
  // Note [LayerNorm backward with the residual gradient]: replaces each pair find_ln_residual_pairs
  // finds by one launch (CUDA builds; the same bits); the number replaced. Call after the other
  // overrides (blu-plan's kernels keep their nodes). one_pass (Note [One-pass LayerNorm
  // backward]): every pair and every other bf16 LayerNorm backward through blublas's
  // one-pass kernel (not autograd's bits in bf16: the compiled step's rewrite); the launches replaced.
  int fuse_ln_residual_grads(bool one_pass = false);
  // Note [Classifier gradient scaling]: each widen / scale / narrow run as one launch (the same
  // bits) and, with embedding_in_f32, the tied embedding's gradient summed in fp32 into the
  // classifier's (not the same bits in 16-bit: the compiled step's rewrite). CUDA builds; returns a
  // one-line report. Call after blu-plan's kernels are bound.
  std::string fold_classifier_grads(bool embedding_in_f32);
  // Note [Weight copies from the update]: the bf16 weight casts written by the AdamW update (CUDA
  // builds; the same bits); the number of parameter copies folded. Call after the other overrides.
  int fold_weight_casts();
  // Note [Dead host copies]: item()'s copies into host memory that nothing reads again run nothing
  // (the same bits); the number dropped.
  int drop_dead_host_copies();
  // Note [Position gradient as a copy]: an embedding backward over indices 0..T-1 (with its
  // widening copy_ when there is one) run as a copy of dout (the same bits); the number folded.
  // Reads the index buffers' live values once: only for steps whose position ids never change.
  int fold_position_grads();
  const ClassifierChunks& classifier() const { return classifier_; }

  // The arena plan of the temporaries (made on first need, again after replace()); enabled false
  // with per-buffer storage.
  ArenaStats arena();
  void use_arena(bool on);  // before or between runs
  // Results in place of dying operands (Note [In-place reuse]); on unless BLU_CAPTURE_INPLACE=0.
  // Before or between runs. inplace_pairs(): the pairs the plan was given (empty when off).
  void use_inplace(bool on);
  // Calls whose results are read only much later (the weight gradients) on a second stream
  // (Note [Side stream], src/capture/capture_side_stream.cpp); on unless BLU_CAPTURE_SIDE_STREAM=0.
  // Before or between runs; arena().side_calls / side_groups say what the plan put there.
  void use_side_stream(bool on);
  const std::vector<InplacePair>& inplace_pairs();
  // Note [Graph segments] (src/capture/capture_graphs.cpp): from the second run after a plan, the
  // step's stretches between host reads run as CUDA graphs (captured once, then one launch each)
  // where nothing in them changes per run; on unless BLU_CAPTURE_GRAPHS=0. Before or between runs.
  void use_graphs(bool on);
  struct GraphStats {
    bool enabled = false;       // use_graphs, the arena, and the whole step on one CUDA device
    int segments = 0;           // stretches of the step between its host reads
    int captured = 0;           // of them, captured (after the second run)
    int captured_calls = 0;     // launches inside the captured graphs
    int eager_calls = 0;        // launches still made one by one from the host
    int prioritized = -1;       // BLU_CAPTURE_STREAM_PRIORITY=1: kernel nodes at the main stream's
                                // high priority (Note [Stream priorities]); -1: off
    std::string why;            // why graphs are off, or why the first uncapturable segment is not
    std::string describe() const;  // one line, no newline
  };
  GraphStats graph_stats();
  // Buffer id's bytes as run() addresses them (bytes_of's form): a persistent buffer, or a
  // temporary's window of the arena (planned and allocated on first need); undefined for a
  // temporary without the arena (its storage exists only during a run).
  Tensor buffer(int id);

  ~Executable();
  Executable(const Executable&) = delete;
  Executable& operator=(const Executable&) = delete;

 private:
  // One stretch of the step (Note [Graph segments]): nodes [begin, body_end) hold no host read and
  // touch no host memory (a graph may run them); [body_end, end) is its tail, run eagerly: calls
  // on host memory, the host read that ends it, if any, and the calls on host memory after it.
  struct Segment {
    int begin = 0, body_end = 0, end = 0;
    bool capturable = false;
    int calls = 0;       // launches in [begin, body_end)
    int tail_calls = 0;  // launches in [body_end, end)
    cuda::GraphExec exec;
  };
  // What one run() tracks of the side stream (Note [Side stream]).
  struct SideRun {
    bool on = false;
    int device = -1;
    cudaStream_t main = nullptr;  // the caller's current stream, or the capture stream
    std::vector<int> in_flight;   // the forked groups not yet joined, in fork order
    int issuing = -1;             // the group whose calls are being issued (its done event not yet
                                  // recorded: Note [Side groups in flight])
    bool capturing = false;       // issuing into a capture (capture_segment)
    int seg_begin = 0;            // the captured segment's first node
    int graph_end = 0;            // body end of the last segment a graph ran in this run
  };
  bool run_nodes(int begin, int end, detail::Ctx& ctx, const StepScalars& scalars, SideRun& side,
                 const HostReadFn& on_host_read);
  void join_side(SideRun& side);  // joins every group in flight
  void end_issuing(SideRun& side);
  void join_front(SideRun& side);
  void plan_segments(bool one_cuda_device);
  bool capture_segment(Segment& seg, detail::Ctx& ctx, const StepScalars& scalars, SideRun& side);
  void drop_graphs() noexcept;
  void plan_temporaries();
  void add_override(std::vector<int> nodes, LaunchFn launch, std::size_t scratch_bytes,
                    ScratchLaunchFn scratch_launch, std::vector<int> views);
  bool use_arena_ = true;
  bool use_inplace_ = true;
  bool use_side_stream_ = true;
  bool planned_ = false;
  // Note [Side stream]: the plan (no groups: no side stream), per node the groups whose ready
  // event follows it, the stream, each group's ready event (+ the step's start, last) and the
  // event the main stream joins on.
  SidePlan side_;
  std::vector<std::vector<int>> side_record_at_;
  cuda::Stream side_stream_;
  std::vector<cuda::Event> side_ready_;
  std::vector<cuda::Event> side_done_;  // per in-flight slot (group k: k % side_in_flight_)
  int side_in_flight_ = kSideInFlightDefault;  // BLU_CAPTURE_SIDE_IN_FLIGHT
  int side_gemm_ctas_ = 0;                      // BLU_CAPTURE_SIDE_GEMM_CTAS (Note [GEMM CTA budget])
  bool stream_priority_ = false;                // BLU_CAPTURE_STREAM_PRIORITY (Note [Stream priorities])
  int prioritized_ = 0;                         // kernel nodes captured at the high priority
  std::vector<InplacePair> inplace_pairs_;
  ArenaStats stats_;
  std::vector<std::shared_ptr<Storage>> arena_views_;  // per buffer: a window of an arena, or null
  std::vector<int> first_use_;                         // node index of each buffer's first use
  struct Override {
    std::vector<int> nodes;
    LaunchFn launch;
    std::size_t scratch_bytes = 0;
    ScratchLaunchFn scratch_launch;
    std::shared_ptr<Storage> scratch;  // its window of the arena (null without the arena)
    std::vector<int> views;            // the buffers the launch views (empty: all its calls name)
  };
  ClassifierChunks classifier_;
  bool classifier_tried_ = false;
  std::vector<char> dropped_;  // per buffer: only override sets use it (no bytes)
  std::vector<Override> overrides_;
  std::vector<int> override_of_;  // per node: index into overrides_, -1 when the node runs itself
  Graph graph_;
  std::vector<std::shared_ptr<Storage>> live_;  // persistent buffers; null for temporaries
  std::vector<int> last_use_;                   // node index of each buffer's last use (-1: none)
  std::vector<Tensor> host_reads_;
  std::chrono::steady_clock::time_point graph_launched_at_{}, graph_launching_at_{};
  std::vector<int> refill_;  // inputs made inside the step and written by it: reset each run
  std::size_t persistent_ = 0;
  // Note [Graph segments].
  bool use_graphs_ = true;
  int head_calls_ = 48;  // Note [Graph head] (BLU_CAPTURE_GRAPH_HEAD)
  int side_map_blocks_ = 0;  // Note [Side map budget] (BLU_CAPTURE_SIDE_MAP_BLOCKS, per SM; 0 = no cap)
  bool graphs_enabled_ = false;  // use_graphs_, the arena and one CUDA device (the last plan)
  bool graphs_failed_ = false;  // a capture failed: the rest of this plan's runs are eager
  std::string graphs_why_;
  int runs_since_plan_ = 0;
  std::vector<Segment> segments_;
  cuda::Stream capture_stream_;
  // The side stream's events inside captures (an event recorded in a capture belongs to it: the
  // eager stretches keep side_ready_ / side_done_).
  std::vector<cuda::Event> capture_ready_;
  std::vector<cuda::Event> capture_done_;
  std::uint64_t pool_ = 0;  // the caching allocator's private pool of the captures (0: none)
  int pool_refs_ = 0;       // begin_allocate_to_pool calls not yet released
};

}  // namespace blu::capture

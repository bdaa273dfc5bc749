// blutrain/metrics.h: what a training run reports: the progress line (with MFU), the JSONL
// metrics log, and the model-FLOPs arithmetic behind MFU.
//
// Note [MFU]
// FLOPs per token = 6N + 12*L*C*T (N parameters, L layers, C channels, T context): 6N for the
// forward+backward matmuls against the weights, 12LCT for attention's QK^T and AV (PaLM's
// appendix B; llm.c reports the same). MFU = FLOPs/token * tokens/s / the GPU's dense peak for
// the precision mode (no sparsity): H100/H200 SXM fp32 67, tf32 495, bf16 989 TFLOP/s.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

namespace blu::train {

double flops_per_token(int64_t num_params, int num_layers, int channels, int seq_len);
// Dense peak FLOP/s of a GPU (by its CUDA device name) in a precision mode ("fp32", "tf32",
// "bf16"); 0 when the GPU is not known (MFU is then not printed).
double dense_peak_flops(const std::string& gpu_name, const std::string& precision);

struct ProgressInfo {
  int64_t step = 0;
  int64_t max_steps = 0;
  double loss = 0;
  double lr = 0;
  double grad_norm = 0;
  double step_ms = 0;
  double tokens_per_s = 0;
  double mfu = -1;             // fraction of peak; < 0: unknown
  double mem_allocated_gib = -1;  // < 0: not on a GPU
  double mem_reserved_gib = -1;
  double mem_peak_gib = -1;
  double device_used_gib = -1;
  int dp_ranks = 0;            // > 1: data parallel (Note [Data-parallel training])
  double comm_ms = -1;         // the step's largest per-rank time in collectives (bludist Note [Communication timing])
  double comm_exposed_ms = -1; // of it, the largest per-rank time compute waited for them (< 0: not measured)
  double rank_mem_gib = -1;    // the largest per-rank memory (GPU peak allocated, CPU peak RSS)
  int tp_ranks = 0;            // > 1: tensor parallel (Note [Tensor-parallel GPT-2] in blutrain/gpt2.h)
  int cp_ranks = 0;            // > 1: context parallel (Note [Context-parallel GPT-2] in blutrain/gpt2.h)
};

// "step   12/1000 | loss 5.4321 | lr 6.00e-04 | norm 1.234 | 123.4 ms | 132.8K tok/s | MFU 41.2% |
//  mem 3.21/4.00 GiB (peak 3.50) | dev 5.10 GiB | dp 2: rank mem 3.50 GiB | tp 2, comm 12.3 ms
//  (exposed 4.1 ms, 67% hidden)" (rank memory and communication: the largest over ranks)
std::string format_progress_line(const ProgressInfo& p);

// Appends one JSON object per line; flushed per record so a killed run keeps its log.
class MetricsLog {
 public:
  MetricsLog() = default;
  explicit MetricsLog(const std::string& path);  // appends; creates parent directories
  ~MetricsLog();
  MetricsLog(const MetricsLog&) = delete;
  MetricsLog& operator=(const MetricsLog&) = delete;

  bool is_open() const { return file_ != nullptr; }
  // {"event": <event>, <key>: <number>, ..., <key>: <string>, ...}; a non-finite number is null.
  void write(const std::string& event, const std::vector<std::pair<std::string, double>>& values,
             const std::vector<std::pair<std::string, std::string>>& strings = {});

 private:
  std::FILE* file_ = nullptr;
};

struct LossPoint {
  int64_t step;
  double loss;
};

// The train (and val) loss curves as an image: PNG through libpng when built with it, else SVG
// (the extension of `path` is replaced). Returns the path written.
std::string write_loss_curve(const std::string& path, const std::vector<LossPoint>& train,
                             const std::vector<LossPoint>& val, const std::string& title);

// The loss curve drawn by gnuplot (Note [Loss plot through gnuplot] in loss_plot_gnuplot.cpp):
// writes <png minus extension>.dat and .gp beside `png_path`, runs gnuplot (env BLU_GNUPLOT names
// it; "none" skips it) and, where gnuplot is missing or fails, draws write_loss_curve's built-in
// plot instead, saying why in `note`.
struct LossPlot {
  std::string path;    // the image written (loss.png; .svg from the built-in plot without libpng)
  std::string tool;    // "gnuplot" or "built-in"
  std::string script;  // the gnuplot script (kept either way: `gnuplot <script>` redraws)
  std::string note;    // empty when gnuplot drew it, else why not
};
LossPlot plot_loss_curve(const std::string& png_path, const std::vector<LossPoint>& train,
                         const std::vector<LossPoint>& val, const std::string& title);
// The gnuplot script of plot_loss_curve (exposed for tests).
std::string loss_plot_script(const std::string& png_path, const std::string& data_path, bool have_val,
                             const std::string& title);

}  // namespace blu::train

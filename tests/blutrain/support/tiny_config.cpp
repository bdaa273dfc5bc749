// tiny_config (support/tiny_config.h).
#include "support/tiny_config.h"

namespace blu::train::test {

TrainConfig tiny_config(const std::string& data_dir, const std::string& out_dir) {
  TrainConfig c;
  c.model = "tiny";
  c.device = "cpu";
  c.data = data_dir;
  c.batch_size = 4;
  c.seq_len = 32;
  c.max_steps = 30;
  c.lr = 3e-3;
  c.warmup_steps = 3;
  c.val_every = 10;
  c.val_batches = 2;
  c.sample_tokens = 0;
  c.out_dir = out_dir;
  c.resume = "none";
  c.plot = true;
  // The ids the shards use (tens, not GPT-2's 50257): the lm head was most of each test's time.
  // A test of GPT-2's vocabulary sets vocab = "gpt2" itself.
  c.vocab = "corpus";
  resolve_auto(c, false);
  c.time_limit_s = 0;
  return c;
}

}  // namespace blu::train::test

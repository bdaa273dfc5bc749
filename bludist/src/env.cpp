// The launch environment and init_process_group (Note [Rendezvous] in bludist/env.h).
#include "bludist/env.h"

#include <cstdlib>

#include "blutensor/cuda_stream.h"
#include "blutensor/error.h"

namespace bludist {

namespace {
const char* env(const char* name) {
  const char* v = std::getenv(name);
  return v && *v ? v : nullptr;
}
int env_int(const char* name, int fallback) {
  const char* v = env(name);
  if (!v) return fallback;
  char* end = nullptr;
  long x = std::strtol(v, &end, 10);
  BLU_CHECK(end && *end == '\0' && x >= 0 && x < (1L << 30), "bludist: environment variable ", name, "='", v,
            "' is not a non-negative integer");
  return static_cast<int>(x);
}
}  // namespace

DistEnv DistEnv::from_environment() {
  DistEnv e;
  if (env("RANK")) {
    e.rank = env_int("RANK", 0);
    e.world_size = env_int("WORLD_SIZE", 1);
    e.local_rank = env_int("LOCAL_RANK", e.rank);
    e.local_world_size = env_int("LOCAL_WORLD_SIZE", e.world_size);
    e.node_rank = env_int("GROUP_RANK", env_int("NODE_RANK", e.rank / std::max(1, e.local_world_size)));
  } else if (env("SLURM_PROCID")) {
    e.rank = env_int("SLURM_PROCID", 0);
    e.world_size = env_int("SLURM_NTASKS", 1);
    e.local_rank = env_int("SLURM_LOCALID", 0);
    e.local_world_size = env_int("SLURM_NTASKS_PER_NODE", e.world_size);
    e.node_rank = env_int("SLURM_NODEID", 0);
  }
  if (const char* a = env("MASTER_ADDR")) e.master_addr = a;
  e.master_port = env_int("MASTER_PORT", e.master_port);
  e.restart_count = env_int("BLURUN_RESTART_COUNT", env_int("TORCHELASTIC_RESTART_COUNT", 0));
  BLU_CHECK(e.world_size >= 1 && e.rank < e.world_size, "bludist: RANK=", e.rank, " is not below WORLD_SIZE=",
            e.world_size);
  BLU_CHECK(e.local_world_size >= 1 && e.local_rank < e.local_world_size, "bludist: LOCAL_RANK=", e.local_rank,
            " is not below LOCAL_WORLD_SIZE=", e.local_world_size);
  BLU_CHECK(e.master_port > 0 && e.master_port < 65536, "bludist: MASTER_PORT=", e.master_port, " is not a port");
  return e;
}

std::string DistEnv::describe() const {
  return blu::detail::str_cat("rank ", rank, "/", world_size, " (local ", local_rank, "/", local_world_size,
                              ", node ", node_rank, ") store ", master_addr, ":", master_port,
                              restart_count ? " restart " + std::to_string(restart_count) : std::string());
}

namespace {
// Keeps rank 0's store server alive as long as the world group (through the store handle).
class ServedStore final : public Store {
 public:
  ServedStore(std::unique_ptr<TcpStoreServer> server, std::shared_ptr<TcpStore> client)
      : server_(std::move(server)), client_(std::move(client)) {}
  ~ServedStore() override {
    client_.reset();  // close our connection before the server goes
    server_.reset();
  }
  void set(const std::string& k, const std::vector<char>& v) override { client_->set(k, v); }
  std::vector<char> get(const std::string& k) override { return client_->get(k); }
  int64_t add(const std::string& k, int64_t d) override { return client_->add(k, d); }
  void wait(const std::vector<std::string>& keys, Milliseconds t) override { client_->wait(keys, t); }
  using Store::wait;
  bool check(const std::vector<std::string>& keys) override { return client_->check(keys); }
  bool erase(const std::string& k) override { return client_->erase(k); }
  Milliseconds timeout() const override { return client_->timeout(); }
  void set_timeout(Milliseconds t) override { client_->set_timeout(t); }

 private:
  std::unique_ptr<TcpStoreServer> server_;
  std::shared_ptr<TcpStore> client_;
};
}  // namespace

std::shared_ptr<ProcessGroup> init_process_group(Backend backend, const InitOptions& options) {
  return init_process_group(backend, DistEnv::from_environment(), options);
}

std::shared_ptr<ProcessGroup> init_process_group(Backend backend, const DistEnv& e, const InitOptions& options) {
  std::shared_ptr<Store> base;
  if (e.rank == 0) {
    auto server = std::make_unique<TcpStoreServer>(e.master_port);
    auto client = std::make_shared<TcpStore>("127.0.0.1", server->port(), options.group.timeout);
    base = std::make_shared<ServedStore>(std::move(server), std::move(client));
  } else {
    base = std::make_shared<TcpStore>(e.master_addr, e.master_port, options.group.timeout);
  }
  auto store = std::make_shared<PrefixStore>("run" + std::to_string(e.restart_count), base);
  ProcessGroupOptions go = options.group;
  if (go.gloo_hostname.empty()) {
    const std::string& a = e.master_addr;
    if (a == "localhost" || a.rfind("127.", 0) == 0 || a == "::1") go.gloo_hostname = "127.0.0.1";
  }
  if (backend == Backend::kGloo) return make_gloo_group(store, e.rank, e.world_size, go);
  int device = options.device >= 0 ? options.device : e.local_rank;
  BLU_CHECK(device < blu::cuda::device_count(), "bludist: rank ", e.rank, " (LOCAL_RANK ", e.local_rank,
            ") needs cuda:", device, " but ", blu::cuda::device_count(), " CUDA device(s) are visible");
  blu::cuda::set_device(device);  // this rank's GPU becomes the thread's current device
  return make_nccl_group(store, e.rank, e.world_size, device, go);
}

}  // namespace bludist

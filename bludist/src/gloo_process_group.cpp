// The Gloo backend (CPU buffers): Debian's libgloo over its TCP transport, rendezvous through the
// bludist store. Synchronous: each call returns when its data is in place.
//
// Note [Gloo mapping]
// all_reduce, all_gather, broadcast and barrier are Gloo's own collectives, each with the next
// tag of this group (every rank issues the same sequence, so tags agree). Average is the sum
// scaled by 1/size afterwards. reduce_scatter is an all_reduce of a copy of the input followed by
// taking this rank's slice: it moves size/2 times more bytes than a dedicated algorithm, which is
// irrelevant for CPU test ranks and keeps one well-tested code path. bf16 reductions use a
// reduce function that widens to float. send/recv use Gloo's unbound buffers with a slot per
// (peer, sequence number); inside a group they are only posted, and group_end waits for them all.
#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/common/error.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/store.h>
#include <gloo/transport/tcp/device.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <map>
#include <utility>

#include "bludist/process_group.h"
#include "blutensor/error.h"

namespace bludist {

bool gloo_available() noexcept { return true; }

namespace {

// Gloo's store interface over a bludist store.
class GlooStore final : public ::gloo::rendezvous::Store {
 public:
  explicit GlooStore(std::shared_ptr<bludist::Store> s) : s_(std::move(s)) {}
  void set(const std::string& key, const std::vector<char>& data) override { s_->set(key, data); }
  std::vector<char> get(const std::string& key) override { return s_->get(key); }
  void wait(const std::vector<std::string>& keys) override { s_->wait(keys, s_->timeout()); }
  void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& t) override { s_->wait(keys, t); }

 private:
  std::shared_ptr<bludist::Store> s_;
};

uint16_t f32_to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40);  // NaN
  u += 0x7fffu + ((u >> 16) & 1u);  // round to nearest even
  return static_cast<uint16_t>(u >> 16);
}
float bf16_to_f32(uint16_t h) {
  uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

template <typename T>
void reduce_fn(ReduceOp op, void* c, const void* a, const void* b, std::size_t n) {
  T* o = static_cast<T*>(c);
  const T* x = static_cast<const T*>(a);
  const T* y = static_cast<const T*>(b);
  switch (op) {
    case ReduceOp::kSum: case ReduceOp::kAvg: for (std::size_t i = 0; i < n; ++i) o[i] = x[i] + y[i]; break;
    case ReduceOp::kMax: for (std::size_t i = 0; i < n; ++i) o[i] = x[i] > y[i] ? x[i] : y[i]; break;
    case ReduceOp::kMin: for (std::size_t i = 0; i < n; ++i) o[i] = x[i] < y[i] ? x[i] : y[i]; break;
  }
}
void reduce_bf16(ReduceOp op, void* c, const void* a, const void* b, std::size_t n) {
  uint16_t* o = static_cast<uint16_t*>(c);
  const uint16_t* x = static_cast<const uint16_t*>(a);
  const uint16_t* y = static_cast<const uint16_t*>(b);
  for (std::size_t i = 0; i < n; ++i) {
    float fx = bf16_to_f32(x[i]), fy = bf16_to_f32(y[i]);
    float r = op == ReduceOp::kMax ? std::max(fx, fy) : op == ReduceOp::kMin ? std::min(fx, fy) : fx + fy;
    o[i] = f32_to_bf16(r);
  }
}

template <typename T>
void scale(void* buf, std::size_t n, int size) {
  T* p = static_cast<T*>(buf);
  if constexpr (std::is_floating_point_v<T>) {
    const T inv = T(1) / T(size);
    for (std::size_t i = 0; i < n; ++i) p[i] *= inv;
  } else {
    for (std::size_t i = 0; i < n; ++i) p[i] /= T(size);
  }
}

class GlooProcessGroup final : public ProcessGroup {
 public:
  GlooProcessGroup(std::shared_ptr<Store> store, int rank, int size, ProcessGroupOptions options,
                   std::shared_ptr<::gloo::transport::Device> dev)
      : ProcessGroup(std::move(store), rank, size, std::move(options)), dev_(std::move(dev)) {
    try {
      if (!dev_) {
        ::gloo::transport::tcp::attr attr;
        attr.hostname = hostname();
        dev_ = ::gloo::transport::tcp::CreateDevice(attr);
      }
      ctx_ = std::make_shared<::gloo::rendezvous::Context>(rank, size);
      ctx_->setTimeout(options_.timeout);
      GlooStore gs(store_);
      ctx_->connectFullMesh(gs, dev_);
    } catch (const ::gloo::Exception& e) {
      BLU_THROW("bludist: connecting the gloo group (rank ", rank, " of ", size, ") failed: ", e.what());
    }
  }

  blu::Device device() const override { return blu::kCPU; }
  Backend backend() const override { return Backend::kGloo; }

  Work all_reduce(void* buf, std::size_t count, DType dtype, ReduceOp op, const CommOptions&) override {
    if (count == 0 || size_ == 1) return {};
    run("all_reduce", count, dtype, [&] {
      ::gloo::AllreduceOptions o(ctx_);
      o.setTag(tag_++);
      o.setTimeout(options_.timeout);
      switch (dtype) {
        case DType::F32: o.setOutput(static_cast<float*>(buf), count); set_reduce<float>(o, op); break;
        case DType::F64: o.setOutput(static_cast<double*>(buf), count); set_reduce<double>(o, op); break;
        case DType::I32: o.setOutput(static_cast<int32_t*>(buf), count); set_reduce<int32_t>(o, op); break;
        case DType::I64: o.setOutput(static_cast<int64_t*>(buf), count); set_reduce<int64_t>(o, op); break;
        case DType::BF16:
          o.setOutput(static_cast<uint16_t*>(buf), count);
          o.setReduceFunction([op](void* c, const void* a, const void* b, size_t n) { reduce_bf16(op, c, a, b, n); });
          break;
        default: BLU_THROW("unsupported dtype");
      }
      ::gloo::allreduce(o);
    });
    if (op == ReduceOp::kAvg) {
      switch (dtype) {
        case DType::F32: scale<float>(buf, count, size_); break;
        case DType::F64: scale<double>(buf, count, size_); break;
        case DType::I32: scale<int32_t>(buf, count, size_); break;
        case DType::I64: scale<int64_t>(buf, count, size_); break;
        case DType::BF16: {
          uint16_t* p = static_cast<uint16_t*>(buf);
          for (std::size_t i = 0; i < count; ++i) p[i] = f32_to_bf16(bf16_to_f32(p[i]) / float(size_));
          break;
        }
        default: break;
      }
    }
    return {};
  }

  Work reduce_scatter(void* out, const void* in, std::size_t out_count, DType dtype, ReduceOp op,
                      const CommOptions& o) override {
    std::size_t bytes = out_count * blu::dtype_size(dtype);
    std::vector<char> tmp(static_cast<const char*>(in), static_cast<const char*>(in) + bytes * size_);
    all_reduce(tmp.data(), out_count * size_, dtype, op, o);
    std::memcpy(out, tmp.data() + bytes * rank_, bytes);
    return {};
  }

  Work all_gather(void* out, const void* in, std::size_t in_count, DType dtype, const CommOptions&) override {
    if (in_count == 0) return {};
    std::size_t bytes = in_count * blu::dtype_size(dtype);
    if (size_ == 1) {
      std::memmove(out, in, bytes);
      return {};
    }
    // Gloo's input must not overlap the output: copy it when it does (e.g. this rank's own slot).
    std::vector<char> copy;
    const char* src = static_cast<const char*>(in);
    const char* o0 = static_cast<const char*>(out);
    if (src < o0 + bytes * size_ && o0 < src + bytes) {
      copy.assign(src, src + bytes);
      src = copy.data();
    }
    run("all_gather", in_count, dtype, [&] {
      ::gloo::AllgatherOptions g(ctx_);
      g.setTag(tag_++);
      g.setTimeout(options_.timeout);
      g.setInput(const_cast<char*>(src), bytes);
      g.setOutput(static_cast<char*>(out), bytes * size_);
      ::gloo::allgather(g);
    });
    return {};
  }

  Work broadcast(void* buf, std::size_t count, DType dtype, int root, const CommOptions&) override {
    check_peer("broadcast", root);
    if (count == 0 || size_ == 1) return {};
    run("broadcast", count, dtype, [&] {
      ::gloo::BroadcastOptions b(ctx_);
      b.setTag(tag_++);
      b.setTimeout(options_.timeout);
      b.setRoot(root);
      b.setOutput(static_cast<char*>(buf), count * blu::dtype_size(dtype));
      ::gloo::broadcast(b);
    });
    return {};
  }

  Work send(const void* buf, std::size_t count, DType dtype, int dst, const CommOptions&) override {
    check_peer("send", dst);
    BLU_CHECK(dst != rank_, "bludist gloo send: rank ", rank_, " sends to itself");
    run("send", count, dtype, [&] {
      auto ub = ctx_->createUnboundBuffer(const_cast<void*>(buf), count * blu::dtype_size(dtype));
      ub->send(dst, p2p_slot(send_seq_[dst]++));
      if (group_depth_ > 0) {
        pending_.push_back({std::move(ub), true});
      } else {
        BLU_CHECK(ub->waitSend(options_.timeout), "send aborted");
      }
    });
    return {};
  }

  Work recv(void* buf, std::size_t count, DType dtype, int src, const CommOptions&) override {
    check_peer("recv", src);
    BLU_CHECK(src != rank_, "bludist gloo recv: rank ", rank_, " receives from itself");
    run("recv", count, dtype, [&] {
      auto ub = ctx_->createUnboundBuffer(buf, count * blu::dtype_size(dtype));
      ub->recv(src, p2p_slot(recv_seq_[src]++));
      if (group_depth_ > 0) {
        pending_.push_back({std::move(ub), false});
      } else {
        BLU_CHECK(ub->waitRecv(options_.timeout), "recv aborted");
      }
    });
    return {};
  }

  CommTiming take_comm_timing() override { return std::exchange(timing_, CommTiming{}); }

  void barrier() override {
    if (size_ == 1) return;
    run("barrier", 0, DType::F32, [&] {
      ::gloo::BarrierOptions b(ctx_);
      b.setTag(tag_++);
      b.setTimeout(options_.timeout);
      ::gloo::barrier(b);
    });
  }

  void group_start() override { ++group_depth_; }

  void group_end() override {
    BLU_CHECK(group_depth_ > 0, "bludist: group_end() without group_start() on the ", describe());
    if (--group_depth_ > 0) return;
    std::vector<Pending> pending = std::move(pending_);
    pending_.clear();
    run("grouped send/recv", pending.size(), DType::F32, [&] {
      for (auto& p : pending) {
        bool ok = p.is_send ? p.buf->waitSend(options_.timeout) : p.buf->waitRecv(options_.timeout);
        BLU_CHECK(ok, "aborted");
      }
    });
  }

 protected:
  std::shared_ptr<ProcessGroup> make_subgroup(std::shared_ptr<Store> store, int rank, int size) override {
    return std::make_shared<GlooProcessGroup>(std::move(store), rank, size, options_, dev_);
  }

 private:
  struct Pending {
    std::unique_ptr<::gloo::transport::UnboundBuffer> buf;
    bool is_send;
  };

  std::string hostname() const {
    if (const char* h = std::getenv("BLUDIST_GLOO_HOSTNAME"); h && *h) return h;
    if (!options_.gloo_hostname.empty()) return options_.gloo_hostname;
    char name[256] = {0};
    ::gethostname(name, sizeof(name) - 1);
    return name;
  }

  template <typename T>
  static void set_reduce(::gloo::AllreduceOptions& o, ReduceOp op) {
    o.setReduceFunction([op](void* c, const void* a, const void* b, size_t n) { reduce_fn<T>(op, c, a, b, n); });
  }

  static uint64_t p2p_slot(uint64_t seq) { return ::gloo::Slot::build(0x7f, static_cast<uint32_t>(seq)); }

  void check_peer(const char* op, int peer) const {
    BLU_CHECK(peer >= 0 && peer < size_, "bludist gloo ", op, ": peer rank ", peer, " is not in the ", describe());
  }

  template <typename F>
  void run(const char* op, std::size_t count, DType dtype, F&& f) {
    switch (dtype) {
      case DType::F32: case DType::F64: case DType::I32: case DType::I64: case DType::BF16: break;
      default:
        if (std::strcmp(op, "all_reduce") == 0)
          BLU_THROW("bludist gloo all_reduce: dtype ", blu::dtype_name(dtype), " is not supported (f32, f64, bf16, i32, i64)");
    }
    try {
      const auto t0 = std::chrono::steady_clock::now();
      f();
      if (options_.time_comm) {  // Note [Communication timing]: a blocking call's host time is all exposed
        const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
        timing_.comm_ms += ms;
        timing_.exposed_ms += ms;
        ++timing_.ops;
      }
    } catch (const ::gloo::Exception& e) {
      BLU_THROW("bludist gloo ", op, " of ", count, " ", blu::dtype_name(dtype), " on rank ", rank_, " of the ",
                describe(), " failed: ", e.what(), " (a peer rank died, or did not call the same operation within ",
                options_.timeout.count() / 1000.0, " s)");
    }
  }

  CommTiming timing_;
  std::shared_ptr<::gloo::transport::Device> dev_;
  std::shared_ptr<::gloo::rendezvous::Context> ctx_;
  uint32_t tag_ = 0;
  int group_depth_ = 0;
  std::vector<Pending> pending_;
  std::map<int, uint64_t> send_seq_, recv_seq_;
};

}  // namespace

std::shared_ptr<ProcessGroup> make_gloo_group(std::shared_ptr<Store> store, int rank, int size,
                                              ProcessGroupOptions options) {
  return std::make_shared<GlooProcessGroup>(std::move(store), rank, size, std::move(options), nullptr);
}

}  // namespace bludist

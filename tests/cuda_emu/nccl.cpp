// A CPU stand-in for the NCCL functions tandem calls, for the CUDA emulation tests: the ranks of
// one process (make_nccl_group) joined by a unique id, non-blocking communicators only (and
// ncclCommInitAll's blocking ones, for the raw-NCCL benchmark). A
// collective is queued on its stream (streams.hpp) as a kernel would be: when the stream reaches
// it, it waits there until every rank's stream has reached its collective of the same number,
// the last to arrive computes every rank's result, and each stream goes on. Reductions run in
// rank order; f16 and bf16 round to their 16 bits after every step, as NCCL's ring does (avg
// premultiplies each rank's value by 1/nranks, NCCL's PreMulSum for floats). As with NCCL, a
// collective whose peers never come holds its stream until its communicator is aborted; after
// ncclCommAbort the handle is gone (AddressSanitizer sees a use after it). Stricter than NCCL,
// which would hang or corrupt: ranks that call different collectives (kind, count, type, op or
// root) as the same number fail with an asynchronous error naming both calls; a buffer that is not
// device memory of the communicator's GPU, or a stream of another GPU, is refused when the call is
// made.
#include <nccl.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <type_traits>
#include <vector>

#include "streams.hpp"
#include "values.hpp"

namespace {

thread_local std::string g_last_error;

ncclResult_t refuse(ncclResult_t r, const std::string& why) {
  g_last_error = why;
  return r;
}

enum class Kind { allreduce, broadcast, allgather, reduce_scatter };

const char* kind_name(Kind k) {
  switch (k) {
    case Kind::allreduce: return "ncclAllReduce";
    case Kind::broadcast: return "ncclBroadcast";
    case Kind::allgather: return "ncclAllGather";
    case Kind::reduce_scatter: return "ncclReduceScatter";
  }
  return "?";
}

size_t type_size(ncclDataType_t t) {
  switch (t) {
    case ncclInt8:
    case ncclUint8: return 1;
    case ncclInt32:
    case ncclUint32:
    case ncclFloat32: return 4;
    case ncclInt64:
    case ncclUint64:
    case ncclFloat64: return 8;
    case ncclFloat16:
    case ncclBfloat16: return 2;
    default: return 0;  // fp8: not emulated
  }
}

// One rank's part in a collective.
struct Post {
  Kind kind;
  const void* send;
  void* recv;
  size_t count;  // elements per rank, as NCCL counts them for the call
  ncclDataType_t type;
  ncclRedOp_t op;
  int root;

  std::string describe() const {
    char s[160];
    std::snprintf(s, sizeof(s), "%s(count %zu, type %d, op %d, root %d)", kind_name(kind), count,
                  static_cast<int>(type), static_cast<int>(op), root);
    return s;
  }
  bool same_call(const Post& o) const {
    return kind == o.kind && count == o.count && type == o.type &&
           (kind == Kind::broadcast || kind == Kind::allgather || op == o.op) &&
           (kind != Kind::broadcast || root == o.root);
  }
  size_t send_bytes(int nranks) const {
    return count * type_size(type) * (kind == Kind::reduce_scatter ? nranks : 1);
  }
  size_t recv_bytes(int nranks) const {
    return count * type_size(type) * (kind == Kind::allgather ? nranks : 1);
  }
};

// A collective's meeting point, by its number.
struct Round {
  std::vector<const Post*> posts;  // per rank, null until it arrives
  int arrived = 0, left = 0;
  bool done = false;
  bool broken = false;  // a rank in it was aborted: it never completes
};

struct Comm;

// The ranks of one unique id.
struct Clique {
  explicit Clique(int n) : nranks(n), members(static_cast<size_t>(n)), ever(members.size()) {}
  const int nranks;
  std::mutex mu;  // guards everything below and each member's state
  std::condition_variable cv;
  std::vector<Comm*> members;  // null until the rank joins (and once it is aborted)
  std::vector<bool> ever;      // which ranks joined (a rank joins once)
  int joined = 0;              // ranks that ever joined: initialized at nranks
  std::vector<uint64_t> met = std::vector<uint64_t>(members.size());  // collectives run, per rank
  std::map<uint64_t, Round> rounds;
};

struct Comm {
  std::shared_ptr<Clique> clique;
  int rank = 0, device = 0;
  uint64_t issued = 0;               // collectives called (the caller's thread)
  uint64_t queued = 0;               // of them, those queued (not of zero elements)
  ncclResult_t error = ncclSuccess;  // the asynchronous error
  std::string error_text;
  bool finalizing = false;  // ncclCommFinalize was called: no more collectives
};

// Every clique alive, by unique id.
std::mutex g_cliques_mu;
std::map<std::string, std::weak_ptr<Clique>> g_cliques;

// The unique ids of this process: a tag, the process id and a counter.
constexpr char kTag[] = "tandem cuda emulation";

// As NCCL: floats' max and min are fmax and fmin, which drop a NaN.
template <typename T>
T combine(T a, T b, ncclRedOp_t op) {
  switch (op) {
    case ncclMax:
      if constexpr (std::is_floating_point_v<T>) return std::fmax(a, b);
      return std::max(a, b);
    case ncclMin:
      if constexpr (std::is_floating_point_v<T>) return std::fmin(a, b);
      return std::min(a, b);
    default: return static_cast<T>(a + b);  // sum, avg (divided at the end)
  }
}

// out[i] = reduction over ranks q (in rank order) of in(q)[offset + i], i < count.
template <typename T>
void reduce(std::vector<char>& out, const std::vector<const Post*>& posts, size_t offset,
            size_t count, ncclRedOp_t op) {
  out.resize(count * sizeof(T));
  T* o = reinterpret_cast<T*>(out.data());
  for (size_t i = 0; i < count; ++i) {
    T acc = static_cast<const T*>(posts[0]->send)[offset + i];
    for (size_t q = 1; q < posts.size(); ++q)
      acc = combine(acc, static_cast<const T*>(posts[q]->send)[offset + i], op);
    if (op == ncclAvg) acc = static_cast<T>(acc / static_cast<T>(posts.size()));
    o[i] = acc;
  }
}

// reduce<T> for f16 and bf16: every step computed in f32 and rounded to `t`.
void reduce16(std::vector<char>& out, const std::vector<const Post*>& posts, size_t offset,
              size_t count, ncclRedOp_t op, tandem_emu::Real t) {
  using tandem_emu::load, tandem_emu::store;
  auto rounded = [t](float v) {
    uint16_t bits;
    store(&bits, 0, t, v);
    return static_cast<float>(load(&bits, 0, t));
  };
  const float scale = op == ncclAvg ? rounded(1.0f / static_cast<float>(posts.size())) : 1.0f;
  std::vector<float> acc(count);
  for (size_t q = 0; q < posts.size(); ++q)
    for (size_t i = 0; i < count; ++i) {
      float v = static_cast<float>(load(posts[q]->send, static_cast<int64_t>(offset + i), t));
      if (op == ncclAvg) v = rounded(v * scale);
      acc[i] = q == 0 ? v : rounded(combine(acc[i], v, op == ncclAvg ? ncclSum : op));
    }
  out.resize(count * 2);
  for (size_t i = 0; i < count; ++i) store(out.data(), static_cast<int64_t>(i), t, acc[i]);
}

void reduce_any(std::vector<char>& out, const std::vector<const Post*>& posts, size_t offset,
                size_t count, ncclDataType_t type, ncclRedOp_t op) {
  switch (type) {
    case ncclFloat16: return reduce16(out, posts, offset, count, op, tandem_emu::Real::f16);
    case ncclBfloat16: return reduce16(out, posts, offset, count, op, tandem_emu::Real::bf16);
    case ncclInt8: return reduce<int8_t>(out, posts, offset, count, op);
    case ncclUint8: return reduce<uint8_t>(out, posts, offset, count, op);
    case ncclInt32: return reduce<int32_t>(out, posts, offset, count, op);
    case ncclUint32: return reduce<uint32_t>(out, posts, offset, count, op);
    case ncclInt64: return reduce<int64_t>(out, posts, offset, count, op);
    case ncclUint64: return reduce<uint64_t>(out, posts, offset, count, op);
    case ncclFloat32: return reduce<float>(out, posts, offset, count, op);
    case ncclFloat64: return reduce<double>(out, posts, offset, count, op);
    default: return;  // refused when called
  }
}

// Every rank's result of a round whose posts agree; computed whole before any output is written
// (outputs may be inputs).
void carry_out(const std::vector<const Post*>& posts) {
  const Post& p = *posts[0];
  const int n = static_cast<int>(posts.size());
  const size_t item = type_size(p.type), bytes = p.count * item;
  std::vector<std::vector<char>> results(posts.size());
  switch (p.kind) {
    case Kind::allreduce:
      reduce_any(results[0], posts, 0, p.count, p.type, p.op);
      for (int q = 1; q < n; ++q) results[q] = results[0];
      break;
    case Kind::broadcast: {
      const char* src = static_cast<const char*>(posts[p.root]->send);
      for (auto& r : results) r.assign(src, src + bytes);
      break;
    }
    case Kind::allgather:
      for (int q = 0; q < n; ++q) {
        const char* src = static_cast<const char*>(posts[q]->send);
        results[0].insert(results[0].end(), src, src + bytes);
      }
      for (int q = 1; q < n; ++q) results[q] = results[0];
      break;
    case Kind::reduce_scatter:
      for (int q = 0; q < n; ++q)
        reduce_any(results[q], posts, static_cast<size_t>(q) * p.count, p.count, p.type, p.op);
      break;
  }
  for (int q = 0; q < n; ++q)
    if (!results[q].empty()) std::memcpy(posts[q]->recv, results[q].data(), results[q].size());
}

// The stream's part of a collective (on the stream's thread): meets the other ranks at round
// `number`, and returns once it is carried out or this rank is aborted.
void meet(const std::shared_ptr<Clique>& clique, int rank, uint64_t number, const Post& post) {
  std::unique_lock<std::mutex> lock(clique->mu);
  if (clique->members[rank] == nullptr) return;  // aborted (a rank joins once): nothing to do
  Round& round = clique->rounds[number];
  if (round.posts.empty()) round.posts.assign(static_cast<size_t>(clique->nranks), nullptr);
  round.posts[rank] = &post;
  ++round.arrived;
  const Post* first = nullptr;
  for (const Post* p : round.posts)
    if (p != nullptr && p != &post) first = first != nullptr ? first : p;
  if (first != nullptr && !first->same_call(post)) {
    const std::string why = "collective #" + std::to_string(number + 1) + ": ranks called " +
                            first->describe() + " and " + post.describe() + " (rank " +
                            std::to_string(rank) + ")";
    for (Comm* c : clique->members)
      if (c != nullptr && c->error == ncclSuccess) {
        c->error = ncclInvalidUsage;
        c->error_text = why;
      }
    round.broken = true;
  }
  if (round.arrived == clique->nranks && !round.broken) {
    carry_out(round.posts);
    round.done = true;
  }
  clique->cv.notify_all();
  clique->cv.wait(lock, [&] { return round.done || clique->members[rank] == nullptr; });
  round.posts[rank] = nullptr;  // `post` goes with this call
  if (++round.left == clique->nranks) clique->rounds.erase(number);
  ++clique->met[rank];
  clique->cv.notify_all();  // for ncclCommDestroy
}

// Bytes that ranks of this process passed to ncclAllReduce (tandem_emu_nccl_allreduce_bytes).
std::atomic<uint64_t> g_allreduce_bytes{0};

// Whether this rank's queued collectives have all run (the clique's lock held).
bool flushed(const Comm& c) { return c.clique->met[c.rank] == c.queued; }

ncclResult_t check_comm(ncclComm_t comm) {
  return comm == nullptr ? refuse(ncclInvalidArgument, "the communicator is null") : ncclSuccess;
}

// A collective call (the caller's thread): checks it and queues its part on the stream.
ncclResult_t collective(ncclComm_t comm, cudaStream_t stream, Post post) {
  if (const ncclResult_t r = check_comm(comm)) return r;
  Comm& c = *reinterpret_cast<Comm*>(comm);
  const int n = c.clique->nranks;
  if (c.finalizing)
    return refuse(ncclInvalidUsage,
                  std::string(kind_name(post.kind)) + ": the communicator is being finalized");
  if (type_size(post.type) == 0)
    return refuse(ncclInvalidArgument, std::string(kind_name(post.kind)) +
                                           ": the CUDA emulation does not reduce fp8 types");
  if (post.kind == Kind::broadcast && (post.root < 0 || post.root >= n))
    return refuse(ncclInvalidArgument, "ncclBroadcast: root out of range");
  if (tandem_emu::device_of_stream(stream) != c.device)
    return refuse(ncclInvalidUsage,
                  std::string(kind_name(post.kind)) + ": the stream is on cuda:" +
                      std::to_string(tandem_emu::device_of_stream(stream)) +
                      ", the communicator's GPU is cuda:" + std::to_string(c.device));
  if (post.count > 0) {
    const bool sends = post.kind != Kind::broadcast || post.root == c.rank;
    if ((sends && tandem_emu::device_of_memory(post.send, post.send_bytes(n)) != c.device) ||
        tandem_emu::device_of_memory(post.recv, post.recv_bytes(n)) != c.device)
      return refuse(ncclInvalidArgument,
                    std::string(kind_name(post.kind)) + ": a buffer is not device memory of cuda:" +
                        std::to_string(c.device) + " (of the size the call needs)");
  }
  const uint64_t number = c.issued++;
  if (post.kind == Kind::allreduce) g_allreduce_bytes += post.send_bytes(n);
  if (post.count == 0) return ncclSuccess;  // NCCL returns at once (every rank does the same)
  ++c.queued;
  tandem_emu::enqueue_waiting(stream, [clique = c.clique, rank = c.rank, number, post] {
    meet(clique, rank, number, post);
  });
  return ncclSuccess;
}

// Rank `rank` of the clique of `key` joins, on `device`.
ncclResult_t join(ncclComm_t* comm, int nranks, const std::string& key, int rank, int device) {
  std::shared_ptr<Clique> clique;
  {
    std::lock_guard<std::mutex> lock(g_cliques_mu);
    clique = g_cliques[key].lock();
    if (!clique) g_cliques[key] = clique = std::make_shared<Clique>(nranks);
  }
  std::lock_guard<std::mutex> lock(clique->mu);
  if (clique->nranks != nranks)
    return refuse(ncclInvalidArgument, "ncclCommInitRankConfig: " + std::to_string(nranks) +
                                           " ranks, but the id's others said " +
                                           std::to_string(clique->nranks));
  if (clique->ever[rank])  // NCCL's ids are for one communicator each
    return refuse(ncclInvalidArgument,
                  "ncclCommInitRankConfig: rank " + std::to_string(rank) + " joined twice");
  clique->ever[rank] = true;
  auto* c = new Comm;
  c->clique = clique;
  c->rank = rank;
  c->device = device;
  for (Comm* other : clique->members)
    if (other != nullptr && other->device == device)
      for (Comm* x : {c, other}) {  // NCCL's own check
        x->error = ncclInvalidUsage;
        x->error_text = "Duplicate GPU detected: ranks " + std::to_string(other->rank) + " and " +
                        std::to_string(rank) + " both on cuda:" + std::to_string(device);
      }
  clique->members[rank] = c;
  ++clique->joined;
  *comm = reinterpret_cast<ncclComm_t>(c);
  return ncclSuccess;
}

}  // namespace

extern "C" {

ncclResult_t ncclGetVersion(int* version) {
  if (!version) return ncclInvalidArgument;
  *version = 0;  // no NCCL library: build_info says 0.0.0
  return ncclSuccess;
}

const char* ncclGetErrorString(ncclResult_t r) {
  switch (r) {
    case ncclSuccess: return "no error";
    case ncclUnhandledCudaError: return "unhandled cuda error";
    case ncclSystemError: return "unhandled system error";
    case ncclInternalError: return "internal error";
    case ncclInvalidArgument: return "invalid argument";
    case ncclInvalidUsage: return "invalid usage";
    case ncclRemoteError: return "remote process exited or there was a network error";
    case ncclInProgress: return "NCCL operation in progress";
    default: return "unknown result code";
  }
}

const char* ncclGetLastError(ncclComm_t) { return g_last_error.c_str(); }

ncclResult_t ncclGetUniqueId(ncclUniqueId* id) {
  if (!id) return refuse(ncclInvalidArgument, "ncclGetUniqueId: null id");
  static std::atomic<uint64_t> counter{0};
  std::memset(id, 0, sizeof(*id));
  std::snprintf(id->internal, sizeof(id->internal), "%s %ld %llu", kTag,
                static_cast<long>(getpid()), static_cast<unsigned long long>(++counter));
  return ncclSuccess;
}

// Group calls change nothing here: a collective is queued when called, and the ranks of a
// make_nccl_group join one clique whatever the grouping.
ncclResult_t ncclGroupStart() { return ncclSuccess; }
ncclResult_t ncclGroupEnd() { return ncclSuccess; }

ncclResult_t ncclCommInitRankConfig(ncclComm_t* comm, int nranks, ncclUniqueId id, int rank,
                                    ncclConfig_t* config) {
  if (!comm) return refuse(ncclInvalidArgument, "ncclCommInitRankConfig: null communicator");
  *comm = nullptr;
  if (nranks < 1 || rank < 0 || rank >= nranks)
    return refuse(ncclInvalidArgument, "ncclCommInitRankConfig: rank " + std::to_string(rank) +
                                           " of " + std::to_string(nranks));
  if (config == nullptr || config->blocking != 0)
    return refuse(ncclInvalidUsage, "the CUDA emulation has non-blocking communicators only");
  const std::string key(id.internal, strnlen(id.internal, sizeof(id.internal)));
  char mine[64];
  std::snprintf(mine, sizeof(mine), "%s %ld ", kTag, static_cast<long>(getpid()));
  if (key.rfind(mine, 0) != 0)
    return refuse(ncclSystemError,
                  "the CUDA emulation's NCCL joins the ranks of one process only (this unique id "
                  "comes from another process)");
  int device = 0;
  cudaGetDevice(&device);
  const ncclResult_t r = join(comm, nranks, key, rank, device);
  return r != ncclSuccess ? r : ncclInProgress;  // non-blocking: ncclCommGetAsyncError says when
}

// One communicator per device in one call (what the raw-NCCL benchmark uses): the ranks of a
// new id, blocking (all have joined when it returns).
ncclResult_t ncclCommInitAll(ncclComm_t* comms, int ndev, const int* devlist) {
  if (!comms || ndev < 1) return refuse(ncclInvalidArgument, "ncclCommInitAll: no communicators");
  ncclUniqueId id;
  ncclGetUniqueId(&id);
  const std::string key(id.internal, strnlen(id.internal, sizeof(id.internal)));
  for (int d = 0; d < ndev; ++d) {
    const ncclResult_t r = join(&comms[d], ndev, key, d, devlist != nullptr ? devlist[d] : d);
    if (r != ncclSuccess) return r;
  }
  return ncclSuccess;
}

ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* state) {
  if (const ncclResult_t r = check_comm(comm)) return r;
  if (!state) return refuse(ncclInvalidArgument, "ncclCommGetAsyncError: null state");
  const Comm& c = *reinterpret_cast<Comm*>(comm);
  std::lock_guard<std::mutex> lock(c.clique->mu);
  if (c.error != ncclSuccess) {
    g_last_error = c.error_text;
    *state = c.error;
  } else if (c.finalizing) {
    *state = flushed(c) ? ncclSuccess : ncclInProgress;
  } else {
    *state = c.clique->joined < c.clique->nranks ? ncclInProgress : ncclSuccess;
  }
  return ncclSuccess;
}

// Ends this rank's collectives at once: its streams go on (as when NCCL's kernels exit), the
// rounds it was in never complete, and the handle is freed.
ncclResult_t ncclCommAbort(ncclComm_t comm) {
  if (comm == nullptr) return ncclSuccess;
  Comm* c = reinterpret_cast<Comm*>(comm);
  const std::shared_ptr<Clique> clique = c->clique;
  {
    std::lock_guard<std::mutex> lock(clique->mu);
    for (auto& entry : clique->rounds)
      if (entry.second.posts[c->rank] != nullptr && !entry.second.done) entry.second.broken = true;
    clique->members[c->rank] = nullptr;
    clique->cv.notify_all();
  }
  delete c;
  return ncclSuccess;
}

// Flushes this rank's collectives without waiting (a non-blocking communicator's finalize): its
// state is ncclInProgress until they have run, then ncclSuccess; no collective may follow.
ncclResult_t ncclCommFinalize(ncclComm_t comm) {
  if (const ncclResult_t r = check_comm(comm)) return r;
  Comm& c = *reinterpret_cast<Comm*>(comm);
  std::lock_guard<std::mutex> lock(c.clique->mu);
  if (c.finalizing) return refuse(ncclInvalidUsage, "ncclCommFinalize: called twice");
  c.finalizing = true;
  return flushed(c) ? ncclSuccess : ncclInProgress;
}

// Waits for this rank's collectives to run (as NCCL's, which finalizes first), then frees it.
ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  if (comm == nullptr) return ncclSuccess;
  Comm* c = reinterpret_cast<Comm*>(comm);
  const std::shared_ptr<Clique> clique = c->clique;
  {
    std::unique_lock<std::mutex> lock(clique->mu);
    clique->cv.wait(lock, [&] { return flushed(*c); });
    clique->members[c->rank] = nullptr;
  }
  delete c;
  return ncclSuccess;
}

ncclResult_t ncclAllReduce(const void* sendbuff, void* recvbuff, size_t count,
                           ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                           cudaStream_t stream) {
  return collective(comm, stream, {Kind::allreduce, sendbuff, recvbuff, count, datatype, op, 0});
}

ncclResult_t ncclBroadcast(const void* sendbuff, void* recvbuff, size_t count,
                           ncclDataType_t datatype, int root, ncclComm_t comm,
                           cudaStream_t stream) {
  return collective(comm, stream,
                    {Kind::broadcast, sendbuff, recvbuff, count, datatype, ncclSum, root});
}

ncclResult_t ncclAllGather(const void* sendbuff, void* recvbuff, size_t sendcount,
                           ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream) {
  return collective(comm, stream,
                    {Kind::allgather, sendbuff, recvbuff, sendcount, datatype, ncclSum, 0});
}

ncclResult_t ncclReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount,
                               ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                               cudaStream_t stream) {
  return collective(comm, stream,
                    {Kind::reduce_scatter, sendbuff, recvbuff, recvcount, datatype, op, 0});
}

// Not NCCL's: for the tests, what the ranks of this process have sent into allreduces, in bytes.
uint64_t tandem_emu_nccl_allreduce_bytes() { return g_allreduce_bytes.load(); }

}  // extern "C"

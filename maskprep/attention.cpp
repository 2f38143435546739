// The CPU attention entry points: the instruction set to run, and the worker threads.
#include "attention.hpp"

#include <algorithm>
#include <atomic>
#include <mutex>
#include <new>
#include <stdexcept>
#include <thread>
#include <vector>

namespace maskprep {

void parallel_for(int64_t units, int threads, void (*fn)(void*, int64_t, int), void* ctx) {
  if (units <= 0) return;
  const int64_t workers = std::max<int64_t>(1, std::min<int64_t>(threads, units));
  if (workers == 1) {
    for (int64_t u = 0; u < units; ++u) fn(ctx, u, 0);
    return;
  }
  std::atomic<int64_t> next{0};
  auto work = [&](int thread) {
    for (int64_t u = next.fetch_add(1, std::memory_order_relaxed); u < units;
         u = next.fetch_add(1, std::memory_order_relaxed))
      fn(ctx, u, thread);
  };
  std::vector<std::thread> pool;
  pool.reserve(workers - 1);
  for (int t = 1; t < workers; ++t) {
    try {
      pool.emplace_back(work, t);
    } catch (...) {  // no more threads to be had: those started and this one share the units
      break;
    }
  }
  work(0);
  for (auto& t : pool) t.join();
}

namespace {

struct Kept {
  void* data;
  size_t bytes;
};

std::mutex kept_mutex;
std::vector<Kept> kept;  // oldest first
size_t kept_bytes = 0;

}  // namespace

void* workspace_take(size_t bytes) {
  {
    std::lock_guard<std::mutex> lock(kept_mutex);
    // the smallest kept buffer that holds `bytes`, if it is not much larger
    size_t best = kept.size();
    for (size_t i = 0; i < kept.size(); ++i) {
      const bool fits = kept[i].bytes >= bytes && kept[i].bytes <= 2 * bytes + 65536;
      if (fits && (best == kept.size() || kept[i].bytes < kept[best].bytes)) best = i;
    }
    if (best != kept.size()) {
      void* data = kept[best].data;
      kept_bytes -= kept[best].bytes;
      kept.erase(kept.begin() + static_cast<std::ptrdiff_t>(best));
      return data;
    }
  }
  return ::operator new(bytes, std::align_val_t(64));
}

void workspace_give(void* data, size_t bytes) {
  std::vector<Kept> drop;
  {
    std::lock_guard<std::mutex> lock(kept_mutex);
    kept.push_back({data, bytes});
    kept_bytes += bytes;
    while (kept_bytes > WORKSPACE_CACHE_BYTES || kept.size() > 64) {
      drop.push_back(kept.front());
      kept_bytes -= kept.front().bytes;
      kept.erase(kept.begin());
    }
  }
  for (const Kept& k : drop) ::operator delete(k.data, std::align_val_t(64));
}

void workspace_release() {
  std::vector<Kept> drop;
  {
    std::lock_guard<std::mutex> lock(kept_mutex);
    drop.swap(kept);
    kept_bytes = 0;
  }
  for (const Kept& k : drop) ::operator delete(k.data, std::align_val_t(64));
}

bool isa_available(int isa) {
  switch (isa) {
    case ISA_GENERIC:
      return true;
#if defined(MASKPREP_HAVE_AVX2)
    case ISA_AVX2:
      return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#endif
#if defined(MASKPREP_HAVE_AVX512)
    case ISA_AVX512:
      return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq") &&
             __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#endif
    default:
      return false;
  }
}

int best_isa() {
  for (int isa : {ISA_AVX512, ISA_AVX2})
    if (isa_available(isa)) return isa;
  return ISA_GENERIC;
}

static int resolve(int isa) {
  if (isa == ISA_AUTO) return best_isa();
  if (!isa_available(isa)) throw std::invalid_argument("this instruction set was not built or does not run here");
  return isa;
}

namespace {

struct Entries {
  void (*forward)(const AttentionProblem&, int);
  void (*backward)(const AttentionProblem&, int);
};

Entries entries(int isa) {
  switch (resolve(isa)) {
#if defined(MASKPREP_HAVE_AVX512)
    case ISA_AVX512:
      return {isa_avx512::forward, isa_avx512::backward};
#endif
#if defined(MASKPREP_HAVE_AVX2)
    case ISA_AVX2:
      return {isa_avx2::forward, isa_avx2::backward};
#endif
    default:
      return {isa_generic::forward, isa_generic::backward};
  }
}

}  // namespace

void attention_forward(const AttentionProblem& p, int threads, int isa) { entries(isa).forward(p, threads); }

void attention_backward(const AttentionProblem& p, int threads, int isa) { entries(isa).backward(p, threads); }

}  // namespace maskprep

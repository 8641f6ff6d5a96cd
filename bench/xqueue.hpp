// A single-producer single-consumer ring of pointer batches for the
// cross-thread benchmarks (xthread.cpp, pair.cpp). The producer fills the
// batch at the ring's tail in place and publishes it with one release store;
// the consumer frees the batch at the head and hands the slot back with one
// release store. So the queue costs two atomic stores and a cache-line
// transfer per kBatch blocks, not per block: what is left per block is the
// allocator's malloc on one thread and its free of a block another thread
// allocated. The ring lives in memory the benchmark allocates once, before
// the clock starts, so it adds no allocator calls to the timed loop.
#pragma once

#include <atomic>
#include <cstddef>
#include <thread>

namespace bench {

constexpr int kXBatch = 64;   // blocks per batch
constexpr int kXRing = 64;    // batches in flight per ring (4,096 blocks)

struct alignas(64) XBatch {
  int n = 0;
  void* p[kXBatch];
};

class XRing {
 public:
  // Producer side: the batch to fill, or nullptr while the ring is full.
  XBatch* tail_slot() {
    const unsigned t = tail_.load(std::memory_order_relaxed);
    if (t - head_.load(std::memory_order_acquire) == kXRing) return nullptr;
    return &ring_[t % kXRing];
  }
  void publish() { tail_.store(tail_.load(std::memory_order_relaxed) + 1, std::memory_order_release); }

  // Consumer side: the oldest published batch, or nullptr if there is none.
  XBatch* head_slot() {
    const unsigned h = head_.load(std::memory_order_relaxed);
    if (h == tail_.load(std::memory_order_acquire)) return nullptr;
    return &ring_[h % kXRing];
  }
  void release() { head_.store(head_.load(std::memory_order_relaxed) + 1, std::memory_order_release); }

  std::atomic<bool> producer_done{false};

 private:
  alignas(64) std::atomic<unsigned> head_{0};
  alignas(64) std::atomic<unsigned> tail_{0};
  XBatch ring_[kXRing];
};

// Frees every block of every batch waiting in r; returns the blocks freed.
template <typename Free>
long drain(XRing& r, Free free_one) {
  long n = 0;
  while (XBatch* b = r.head_slot()) {
    for (int i = 0; i < b->n; ++i) free_one(b->p[i]);
    n += b->n;
    r.release();
  }
  return n;
}

// Waiting on the other thread: a short spin, then give the core away. On a
// 2-core machine shared with other jobs, a pure spin can keep the thread we
// wait for off the CPU.
inline void backoff(int& spins) {
  if (++spins < 64) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
  } else {
    std::this_thread::yield();
  }
}

}  // namespace bench

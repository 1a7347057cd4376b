// The CPU backend's worker threads: a fixed pool that runs one parallel loop at a time.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace flexjit::cpu {

// `threads` workers in all, the calling thread counted: run() hands out loop indices to the
// pool's threads and to its caller. Results must not depend on which thread runs an index
// (every caller writes disjoint outputs per index), so they do not depend on the thread count.
class ThreadPool {
 public:
  explicit ThreadPool(unsigned threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  unsigned size() const { return static_cast<unsigned>(workers_.size()) + 1; }

  // Calls body(i) for every i in [0, count), in no particular order, and returns when all have
  // returned. Indices are taken from a shared counter, so a slow index does not hold up the
  // others. One loop runs at a time: a second caller waits for the first loop to finish. An
  // exception thrown by body stops the handing out of indices and is rethrown here (the first
  // one). body must not call run() on the same pool.
  void run(int64_t count, const std::function<void(int64_t)>& body);

  // The process's pool: one thread per hardware thread. Created on first use.
  static ThreadPool& shared();

 private:
  void work();          // a worker's loop
  void take_indices();  // runs indices of the current loop until none is left

  std::vector<std::jthread> workers_;
  std::mutex run_mutex_;  // one loop at a time

  std::mutex mutex_;  // guards what follows
  std::condition_variable wake_;
  std::condition_variable done_;
  uint64_t generation_ = 0;  // counts loops; a change wakes the workers
  int busy_ = 0;             // workers still inside the current loop
  bool stopping_ = false;
  const std::function<void(int64_t)>* body_ = nullptr;
  int64_t count_ = 0;
  std::atomic<int64_t> next_{0};
  std::exception_ptr error_;
};

}  // namespace flexjit::cpu

#include "cpu/cpu_pool.h"

#include <algorithm>

namespace flexjit::cpu {

ThreadPool::ThreadPool(unsigned threads) {
  for (unsigned i = 1; i < std::max(threads, 1u); ++i)
    workers_.emplace_back([this] { work(); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  workers_.clear();  // joins
}

ThreadPool& ThreadPool::shared() {
  // Never destroyed: a static pool's threads would otherwise be joined during exit, after
  // other statics they may use are gone.
  static ThreadPool* pool = new ThreadPool(std::max(1u, std::thread::hardware_concurrency()));
  return *pool;
}

void ThreadPool::take_indices() {
  for (int64_t i = next_++; i < count_; i = next_++) {
    try {
      (*body_)(i);
    } catch (...) {
      std::lock_guard lock(mutex_);
      if (!error_) error_ = std::current_exception();
      next_ = count_;  // hand out nothing more
    }
  }
}

void ThreadPool::work() {
  uint64_t seen = 0;
  std::unique_lock lock(mutex_);
  while (true) {
    wake_.wait(lock, [&] { return stopping_ || generation_ != seen; });
    if (stopping_) return;
    seen = generation_;
    lock.unlock();
    take_indices();
    lock.lock();
    if (--busy_ == 0) done_.notify_all();
  }
}

void ThreadPool::run(int64_t count, const std::function<void(int64_t)>& body) {
  if (count <= 0) return;
  std::lock_guard run_lock(run_mutex_);
  {
    std::lock_guard lock(mutex_);
    body_ = &body;
    count_ = count;
    next_ = 0;
    error_ = nullptr;
    busy_ = static_cast<int>(workers_.size());
    ++generation_;
  }
  wake_.notify_all();
  take_indices();
  std::exception_ptr error;
  {
    std::unique_lock lock(mutex_);
    done_.wait(lock, [&] { return busy_ == 0; });
    body_ = nullptr;
    error = error_;
  }
  if (error) std::rethrow_exception(error);
}

}  // namespace flexjit::cpu

// AdaptiveMutex: a mutex for critical sections of a few hundred nanoseconds that several threads
// enter at high rates (the allocators' bookkeeping, taken for every tensor a loader worker makes).
// A waiter spins briefly before sleeping: std::mutex sleeps at once, and on a contended lock the
// futex sleep and wake-up cost more than the critical section itself (measured: two loader workers
// ran at half the speed of one, most of the difference in futex calls).
// glibc's adaptive pthread mutex (PTHREAD_MUTEX_ADAPTIVE_NP) spins a bounded, self-tuning number of
// times, then sleeps as a normal mutex; other C libraries get a normal mutex.
// A lock held longer now and then (the caching allocator growing a pool with cudaMalloc) costs a
// waiter only the bounded spin before it sleeps as it would have anyway.
// Not here: condition variables (they need std::mutex).
#pragma once

#include <pthread.h>

namespace frugal {

class AdaptiveMutex {
 public:
  AdaptiveMutex() {
    pthread_mutexattr_t attributes;
    pthread_mutexattr_init(&attributes);
#ifdef PTHREAD_ADAPTIVE_MUTEX_INITIALIZER_NP
    pthread_mutexattr_settype(&attributes, PTHREAD_MUTEX_ADAPTIVE_NP);
#endif
    pthread_mutex_init(&mutex_, &attributes);
    pthread_mutexattr_destroy(&attributes);
  }
  ~AdaptiveMutex() { pthread_mutex_destroy(&mutex_); }
  AdaptiveMutex(const AdaptiveMutex&) = delete;
  AdaptiveMutex& operator=(const AdaptiveMutex&) = delete;

  // Lockable, so std::lock_guard and std::unique_lock work with it.
  void lock() { pthread_mutex_lock(&mutex_); }
  bool try_lock() { return pthread_mutex_trylock(&mutex_) == 0; }
  void unlock() { pthread_mutex_unlock(&mutex_); }

 private:
  pthread_mutex_t mutex_;
};

}  // namespace frugal

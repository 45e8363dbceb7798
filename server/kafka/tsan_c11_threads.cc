// Linked into ThreadSanitizer builds only. glibc's C11 threads (thrd_create, mtx_lock, ...)
// call glibc's pthread internals directly, around ThreadSanitizer's interceptors, so threads
// that librdkafka starts with thrd_create are unknown to it (it crashes on their first callback
// into our code) and its locks are invisible (our callbacks would look racy). These definitions
// take precedence over glibc's for every library in the process and route the calls through the
// pthread functions ThreadSanitizer intercepts. glibc lays out thrd_t, mtx_t and cnd_t as
// pthread_t, pthread_mutex_t and pthread_cond_t.
#include <errno.h>
#include <pthread.h>
#include <threads.h>
#include <time.h>

#include <cstdint>
#include <new>

namespace {

struct Start {
  thrd_start_t func;
  void* arg;
};

void* Trampoline(void* p) {
  const Start start = *static_cast<Start*>(p);
  delete static_cast<Start*>(p);
  return reinterpret_cast<void*>(static_cast<intptr_t>(start.func(start.arg)));
}

int FromErrno(int err) {
  if (err == 0) return thrd_success;
  if (err == ETIMEDOUT) return thrd_timedout;
  if (err == EBUSY) return thrd_busy;
  if (err == ENOMEM) return thrd_nomem;
  return thrd_error;
}

pthread_mutex_t* M(mtx_t* m) { return reinterpret_cast<pthread_mutex_t*>(m); }
pthread_cond_t* C(cnd_t* c) { return reinterpret_cast<pthread_cond_t*>(c); }

}  // namespace

extern "C" {

int thrd_create(thrd_t* thr, thrd_start_t func, void* arg) {
  auto* start = new (std::nothrow) Start{func, arg};
  if (start == nullptr) return thrd_nomem;
  const int err = pthread_create(reinterpret_cast<pthread_t*>(thr), nullptr, Trampoline, start);
  if (err != 0) delete start;
  return FromErrno(err);
}

int thrd_join(thrd_t thr, int* res) {
  void* value = nullptr;
  const int err = pthread_join(static_cast<pthread_t>(thr), &value);
  if (err == 0 && res != nullptr) *res = static_cast<int>(reinterpret_cast<intptr_t>(value));
  return FromErrno(err);
}

int thrd_detach(thrd_t thr) { return FromErrno(pthread_detach(static_cast<pthread_t>(thr))); }

int mtx_init(mtx_t* m, int type) {
  pthread_mutexattr_t attr;
  pthread_mutexattr_init(&attr);
  if (type & mtx_recursive) pthread_mutexattr_settype(&attr, PTHREAD_MUTEX_RECURSIVE);
  const int err = pthread_mutex_init(M(m), &attr);
  pthread_mutexattr_destroy(&attr);
  return FromErrno(err);
}
int mtx_lock(mtx_t* m) { return FromErrno(pthread_mutex_lock(M(m))); }
int mtx_trylock(mtx_t* m) { return FromErrno(pthread_mutex_trylock(M(m))); }
int mtx_timedlock(mtx_t* m, const struct timespec* t) {
  return FromErrno(pthread_mutex_timedlock(M(m), t));
}
int mtx_unlock(mtx_t* m) { return FromErrno(pthread_mutex_unlock(M(m))); }
void mtx_destroy(mtx_t* m) { pthread_mutex_destroy(M(m)); }

int cnd_init(cnd_t* c) { return FromErrno(pthread_cond_init(C(c), nullptr)); }
int cnd_signal(cnd_t* c) { return FromErrno(pthread_cond_signal(C(c))); }
int cnd_broadcast(cnd_t* c) { return FromErrno(pthread_cond_broadcast(C(c))); }
int cnd_wait(cnd_t* c, mtx_t* m) { return FromErrno(pthread_cond_wait(C(c), M(m))); }
int cnd_timedwait(cnd_t* c, mtx_t* m, const struct timespec* t) {
  return FromErrno(pthread_cond_timedwait(C(c), M(m), t));
}
void cnd_destroy(cnd_t* c) { pthread_cond_destroy(C(c)); }

}  // extern "C"

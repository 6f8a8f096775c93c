# cython: language_level=3
"""The group commit's worker threads without the GIL (compiled twin of :class:`.flusher.Flusher`'s threads).

Why: a periodic round nobody waits for (the default policy's sync every
``messages_required_to_save`` messages) is, on a Python worker, two GIL
acquisitions (after the queue wait, after ``fdatasync``) taken from the event
loop's thread while it serves requests, plus the Python of the round. Here a
worker runs the whole round in C with the GIL released: ``fdatasync`` each fd
in order (stopping at the first failure), ``close`` every fd, store (calls,
errno, seconds), mark the round done. It takes the GIL only to call the
loop back, which it does only when the round asks for it (``wake``: it had
waiters or sealed segments), it failed, or the loop asked for another sync while
it ran (:meth:`Round.ask`), exactly the cases where the Python worker calls the loop back.

Memory order: the loop sets "asked" (``Round.ask``) and then reads "done"
(``Round.done``); the worker stores "done" and then reads "asked"; both with
sequentially consistent atomics, so at least one side sees the other (the
same argument as the pure-Python module's, where the GIL orders them).

A :class:`Round` belongs to one GroupCommit and is reused for each of its
rounds (one in flight at a time). :class:`SyncQueue` is a FIFO shared by the
worker threads of one Flusher (Python threads that enter :meth:`SyncQueue.run`
and release the GIL there); it also runs plain Python callables, in order with
the rounds (taking the GIL for them).

A round armed ``by_fd`` does not call back with the GIL: its worker puts the round's
job on the queue's ``woken`` list and writes the queue's eventfd (when the list was
empty), and the loop watching that fd calls :meth:`SyncQueue.drain`, which runs the
call backs there. The job keeps its Round alive until the drain released it.
"""

from cpython.ref cimport PyObject, Py_INCREF, Py_DECREF
from libc.stdlib cimport malloc, free
from libc.errno cimport errno

cdef extern from "<pthread.h>" nogil:
    ctypedef struct pthread_mutex_t:
        pass
    ctypedef struct pthread_cond_t:
        pass
    int pthread_mutex_init(pthread_mutex_t *, void *)
    int pthread_mutex_destroy(pthread_mutex_t *)
    int pthread_mutex_lock(pthread_mutex_t *)
    int pthread_mutex_unlock(pthread_mutex_t *)
    int pthread_cond_init(pthread_cond_t *, void *)
    int pthread_cond_destroy(pthread_cond_t *)
    int pthread_cond_wait(pthread_cond_t *, pthread_mutex_t *)
    int pthread_cond_signal(pthread_cond_t *)
    int pthread_cond_broadcast(pthread_cond_t *)

cdef extern from "<unistd.h>" nogil:
    int fdatasync(int)
    int close(int)
    ssize_t read(int, void *, size_t)
    ssize_t write(int, const void *, size_t)

cdef extern from "<sys/eventfd.h>" nogil:
    int eventfd(unsigned int, int)
    int EFD_NONBLOCK
    int EFD_CLOEXEC

cdef extern from "<sched.h>" nogil:
    int sched_yield()

cdef extern from "<time.h>" nogil:
    cdef struct timespec:
        long tv_sec
        long tv_nsec
    int clock_gettime(int, timespec *)
    int CLOCK_MONOTONIC

cdef extern from *:
    """
    static inline int hw_sync_load(int *p) { return __atomic_load_n(p, __ATOMIC_SEQ_CST); }
    static inline void hw_sync_store(int *p, int v) { __atomic_store_n(p, v, __ATOMIC_SEQ_CST); }
    """
    int hw_sync_load(int *) nogil
    void hw_sync_store(int *, int) nogil


cdef double _now() noexcept nogil:
    cdef timespec ts
    clock_gettime(CLOCK_MONOTONIC, &ts)
    return ts.tv_sec + ts.tv_nsec * 1e-9


cdef struct RoundState:
    int *fds
    int nfds
    int wake
    int by_fd  # wake the loop through the queue's eventfd (no GIL) instead of the call back
    int done
    int asked
    int calls
    int err
    double seconds
    PyObject *owner  # the Round (its queued Job holds a reference until the loop releases it)


cdef struct Job:
    Job *next
    RoundState *round  # a round (job.call then holds a reference to its Round), or NULL
    PyObject *call     # a Python callable, or the Round of ``round`` (owned reference)


cdef void _call_back(PyObject *owner) noexcept with gil:
    try:
        (<Round> owner).callback()
    except BaseException:
        pass


cdef int _run_round(RoundState *s) noexcept nogil:
    """Run the round; 1 when the loop must be woken through the queue's eventfd (``by_fd``)."""
    cdef int i, calls = 0, err = 0
    cdef double t0 = _now()
    for i in range(s.nfds):
        calls += 1
        if fdatasync(s.fds[i]) != 0:
            err = errno
            if err == 0:
                err = 5  # EIO: a failure must never read as success
            break
    for i in range(s.nfds):
        close(s.fds[i])
    s.nfds = 0
    s.calls = calls
    s.err = err
    s.seconds = _now() - t0
    if s.by_fd:  # the caller (SyncQueue.run) hands the round to the loop through the eventfd
        hw_sync_store(&s.done, 1)
        # "done" stored above, "asked" read here: see the module docstring
        return 1 if (s.wake or err or hw_sync_load(&s.asked)) else 0
    if s.wake or err:
        with gil:  # done and the call back together: the loop settles after the call back is queued
            hw_sync_store(&s.done, 1)
            _call_back(s.owner)
    else:
        hw_sync_store(&s.done, 1)
        if hw_sync_load(&s.asked):  # "done" stored above, "asked" read here: see the module docstring
            _call_back(s.owner)
    return 0


cdef class Round:
    """One GroupCommit's round slot: the fds to sync, the outcome, and the two flags.

    ``callback`` (a callable taking no argument) is what the worker calls, with the
    GIL, to wake the loop; it must not raise (a raise is dropped)."""

    cdef RoundState st
    cdef object callback

    def __cinit__(self, callback):
        self.callback = callback
        self.st.fds = NULL
        self.st.nfds = 0
        self.st.done = 0
        self.st.asked = 0
        self.st.owner = <PyObject *> self

    def __dealloc__(self):
        if self.st.fds != NULL:
            free(self.st.fds)

    cdef int arm(self, list fds, bint wake, bint by_fd) except -1:
        """Take ``fds`` (ownership: the worker closes every one): once per Round. ``by_fd``:
        the worker wakes the loop through its queue's eventfd (:meth:`SyncQueue.drain` then
        calls ``callback`` on the loop) instead of calling ``callback`` itself with the GIL."""
        cdef Py_ssize_t n = len(fds), i
        if self.st.fds != NULL:
            raise RuntimeError("a Round runs once")
        self.st.fds = <int *> malloc((n if n > 0 else 1) * sizeof(int))
        if self.st.fds == NULL:
            raise MemoryError()
        for i in range(n):
            self.st.fds[i] = fds[i]
        self.st.nfds = <int> n
        self.st.wake = 1 if wake else 0
        self.st.by_fd = 1 if by_fd else 0
        self.st.calls = 0
        self.st.err = 0
        self.st.seconds = 0.0
        hw_sync_store(&self.st.asked, 0)
        hw_sync_store(&self.st.done, 0)
        return 0

    def ask(self):
        """On the loop: a sync was asked for while this round may be running (then read :meth:`done`)."""
        hw_sync_store(&self.st.asked, 1)

    def done(self):
        """Whether the worker finished the round (its fds are closed, :meth:`result` is final)."""
        return hw_sync_load(&self.st.done) != 0

    def result(self):
        """``(fdatasync calls made, errno of the failure or 0, seconds)`` once :meth:`done`."""
        return self.st.calls, self.st.err, self.st.seconds


cdef void _release(Job *j) noexcept:
    """Drop the references of a list of finished jobs and free them (with the GIL)."""
    cdef Job *n
    while j != NULL:
        n = j.next
        if j.call != NULL:
            Py_DECREF(<object> j.call)
        free(j)
        j = n


cdef class SyncQueue:
    """The FIFO of one Flusher's native workers (see the module docstring).

    A round's Job holds a reference to its Round until the worker finished it; the worker
    (without the GIL) puts the Job on a ``finished`` list, and the loop's next submit (or
    :meth:`release`, or the queue's end) drops those references with the GIL."""

    cdef pthread_mutex_t lock
    cdef pthread_cond_t ready
    cdef Job *head
    cdef Job *tail
    cdef Job *finished
    cdef Job *woken  # rounds whose loop is to be woken, handed over to drain() (newest first)
    cdef int efd     # the eventfd a worker writes after handing a round over (-1: none yet)
    cdef readonly long long drained  # rounds drain() handed to their loop (tests, benchmarks)
    cdef int shut
    cdef int idle    # workers in the condition wait
    cdef int queued  # jobs in the queue, not taken yet

    def __cinit__(self):
        pthread_mutex_init(&self.lock, NULL)
        pthread_cond_init(&self.ready, NULL)
        self.head = self.tail = self.finished = self.woken = NULL
        self.efd = -1
        self.drained = 0
        self.shut = 0
        self.idle = 0
        self.queued = 0

    def __dealloc__(self):
        _release(self.head)
        _release(self.finished)
        _release(self.woken)
        if self.efd >= 0:
            close(self.efd)
        pthread_cond_destroy(&self.ready)
        pthread_mutex_destroy(&self.lock)

    cdef int _put(self, Job *job) except -1:
        cdef Job *done
        with nogil:
            pthread_mutex_lock(&self.lock)
            if self.tail == NULL:
                self.head = self.tail = job
            else:
                self.tail.next = job
                self.tail = job
            hw_sync_store(&self.queued, self.queued + 1)
            done = self.finished
            self.finished = NULL
            pthread_cond_signal(&self.ready)
            pthread_mutex_unlock(&self.lock)
        _release(done)
        return 0

    def release(self):
        """Drop the references of finished rounds now (the next submit does it too)."""
        cdef Job *done
        with nogil:
            pthread_mutex_lock(&self.lock)
            done = self.finished
            self.finished = NULL
            pthread_mutex_unlock(&self.lock)
        _release(done)

    def wake_fd(self):
        """The eventfd the workers write to wake the loop without the GIL (made on first use;
        the loop watches it and calls :meth:`drain`). Raises OSError (no fd left)."""
        if self.efd < 0:
            fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)
            if fd < 0:
                raise OSError(errno, "eventfd failed")
            self.efd = fd
        return self.efd

    def close_wake_fd(self):
        """Close the eventfd (once nothing watches it any more)."""
        if self.efd >= 0:
            close(self.efd)
            self.efd = -1

    def drain(self):
        """On the loop, when the eventfd is readable: call back (``Round.callback``) every
        round a worker handed over since the last drain, oldest first. Returns how many."""
        cdef unsigned long long count
        cdef Job *j
        cdef Job *rev = NULL
        cdef Job *n
        cdef long long k = 0
        with nogil:
            if self.efd >= 0:
                read(self.efd, &count, 8)  # reset before taking the list: a later hand-over writes again
            pthread_mutex_lock(&self.lock)
            j = self.woken
            self.woken = NULL
            pthread_mutex_unlock(&self.lock)
        while j != NULL:  # newest first: reverse
            n = j.next
            j.next = rev
            rev = j
            j = n
        while rev != NULL:
            n = rev.next
            rev.next = NULL
            k += 1
            try:
                (<Round> rev.call).callback()
            except BaseException:
                pass
            _release(rev)
            rev = n
        self.drained += k
        return k

    def submit_round(self, Round r, list fds, bint wake, bint by_fd=False):
        """Queue a round of ``r`` (a new Round) over ``fds`` (the worker closes them all);
        ``wake``: call the loop back when it returned. ``by_fd`` (needs :meth:`wake_fd`): the
        worker wakes the loop through the eventfd instead of calling back with the GIL."""
        cdef Job *job = <Job *> malloc(sizeof(Job))
        if job == NULL:
            raise MemoryError()
        if by_fd and self.efd < 0:
            raise RuntimeError("submit_round(by_fd=True) before wake_fd()")
        try:
            r.arm(fds, wake, by_fd)
        except BaseException:
            free(job)
            raise
        Py_INCREF(r)
        job.next = NULL
        job.round = &r.st
        job.call = <PyObject *> r
        self._put(job)

    def submit_call(self, fn):
        """Queue a Python callable (run with the GIL, in order with the rounds; a raise is dropped)."""
        cdef Job *job = <Job *> malloc(sizeof(Job))
        if job == NULL:
            raise MemoryError()
        Py_INCREF(fn)
        job.next = NULL
        job.round = NULL
        job.call = <PyObject *> fn
        self._put(job)

    def idle_workers(self):
        """Workers waiting for a job and not yet claimed by a queued one (read without the
        lock: a hint)."""
        cdef int n = hw_sync_load(&self.idle) - hw_sync_load(&self.queued)
        return n if n > 0 else 0

    def shutdown(self):
        """Let every worker finish the queued jobs, then return from :meth:`run`."""
        with nogil:
            pthread_mutex_lock(&self.lock)
            self.shut = 1
            pthread_cond_broadcast(&self.ready)
            pthread_mutex_unlock(&self.lock)

    def run(self):
        """A worker's body (call from a thread of its own): run jobs until :meth:`shutdown`
        and the queue is empty."""
        cdef Job *job = NULL
        cdef PyObject *call
        cdef int handed = 0
        cdef unsigned long long one = 1
        while True:
            with nogil:
                pthread_mutex_lock(&self.lock)
                if job != NULL:  # the round run last time: its reference is dropped by the loop
                    job.next = self.finished
                    self.finished = job
                    job = NULL
                handed = 0
                while self.head == NULL and not self.shut:
                    hw_sync_store(&self.idle, hw_sync_load(&self.idle) + 1)
                    pthread_cond_wait(&self.ready, &self.lock)
                    hw_sync_store(&self.idle, hw_sync_load(&self.idle) - 1)
                job = self.head
                if job != NULL:
                    self.head = job.next
                    if self.head == NULL:
                        self.tail = NULL
                    job.next = NULL
                    hw_sync_store(&self.queued, self.queued - 1)
                pthread_mutex_unlock(&self.lock)
                if job != NULL and job.round != NULL:
                    if _run_round(job.round):
                        # hand the round (its Job keeps the Round alive) to the loop's drain(),
                        # then wake the loop if nothing handed over before is waiting for it
                        pthread_mutex_lock(&self.lock)
                        handed = 2 if self.woken == NULL else 1
                        job.next = self.woken
                        self.woken = job
                        pthread_mutex_unlock(&self.lock)
                        job = NULL
                        if handed == 2:
                            write(self.efd, &one, 8)
            if job == NULL:
                if handed:
                    continue
                return
            if job.round == NULL:
                call = job.call
                free(job)
                job = NULL
                try:
                    (<object> call)()
                except BaseException:
                    pass
                finally:
                    Py_DECREF(<object> call)

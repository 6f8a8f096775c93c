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


cdef void _run_round(RoundState *s) noexcept nogil:
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
    if s.wake or err:
        with gil:  # done and the call back together: the loop settles after the call back is queued
            hw_sync_store(&s.done, 1)
            _call_back(s.owner)
    else:
        hw_sync_store(&s.done, 1)
        if hw_sync_load(&s.asked):  # "done" stored above, "asked" read here: see the module docstring
            _call_back(s.owner)


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

    cdef int arm(self, list fds, bint wake) except -1:
        """Take ``fds`` (ownership: the worker closes every one): once per Round."""
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
    cdef int shut
    cdef int idle    # workers in the condition wait
    cdef int queued  # jobs in the queue, not taken yet

    def __cinit__(self):
        pthread_mutex_init(&self.lock, NULL)
        pthread_cond_init(&self.ready, NULL)
        self.head = self.tail = self.finished = NULL
        self.shut = 0
        self.idle = 0
        self.queued = 0

    def __dealloc__(self):
        _release(self.head)
        _release(self.finished)
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

    def submit_round(self, Round r, list fds, bint wake):
        """Queue a round of ``r`` (a new Round) over ``fds`` (the worker closes them all);
        ``wake``: call the loop back when it returned."""
        cdef Job *job = <Job *> malloc(sizeof(Job))
        if job == NULL:
            raise MemoryError()
        try:
            r.arm(fds, wake)
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
        while True:
            with nogil:
                pthread_mutex_lock(&self.lock)
                if job != NULL:  # the round run last time: its reference is dropped by the loop
                    job.next = self.finished
                    self.finished = job
                    job = NULL
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
                    _run_round(job.round)
            if job == NULL:
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

# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""Compiled frame walks of :mod:`headwater.codec.batch` (optional; Cython).

Each function here has a pure-Python reference in ``batch.py`` with the same
name minus this module's prefix (``verify_frames`` <-> ``_py_verify_frames``,
``walk`` <-> ``_py_walk``, ``span`` <-> ``_py_span``) and returns exactly what
the reference returns, None included: like the references they never raise
on malformed frames, and ``batch.py`` then runs its reference diagnosis for the
precise error. ``tests/unit/codec/test_batch_native.py`` checks the two
against each other on valid and mutated batches.

Frame checksums are XXH3-64 with seed 0 and the default secret, implemented
below in C from the algorithm's published specification (``xxhash_spec.md``
of the xxHash project: "XXH3 Algorithm Description"), so the build needs only
Cython and a C compiler. Inputs over 240 bytes (1 KB messages) take a SIMD
path: AVX2 when the CPU has it (checked at import), else SSE2 on x86-64, else
plain C (``long_path``/``use_long_path``). ``xxh3_64`` exposes the hash for the
tests, which compare it with the ``xxhash`` package on every input-length class
and every long path.

Layouts (all little-endian; see ``batch.py`` for the full tables): a frame
header is 48 bytes, ``checksum u64 @0``, ``offset_delta u32 @24``,
``user_headers_length u32 @32``, ``payload_length u32 @36``, ``reserved u64
@40``; the checksum covers ``frame[8:]``. Frames start at byte 256.
"""

from cpython.buffer cimport PyBUF_SIMPLE, PyBuffer_Release, PyObject_GetBuffer
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize
from libc.stdint cimport uint8_t, uint32_t, uint64_t

cdef extern from *:
    """
    #include <stdint.h>
    #include <string.h>

    /* XXH3-64, seed 0, default secret: written from xxhash_spec.md. */
    typedef uint64_t hw_u64;
    typedef uint32_t hw_u32;

    #define HW_P32_1 0x9E3779B1ULL
    #define HW_P32_2 0x85EBCA77ULL
    #define HW_P32_3 0xC2B2AE3DULL
    #define HW_P64_1 0x9E3779B185EBCA87ULL
    #define HW_P64_2 0xC2B2AE3D27D4EB4FULL
    #define HW_P64_3 0x165667B19E3779F9ULL
    #define HW_P64_4 0x85EBCA77C2B2AE63ULL
    #define HW_P64_5 0x27D4EB2F165667C5ULL
    #define HW_MX1 0x165667919E3779F9ULL
    #define HW_MX2 0x9FB21C651E98DF25ULL
    #define HW_SECRET_LEN 192

    /* the algorithm's default 192-byte secret (a constant of the hash function) */
    static const uint8_t hw_secret[HW_SECRET_LEN] = {
        0xb8, 0xfe, 0x6c, 0x39, 0x23, 0xa4, 0x4b, 0xbe, 0x7c, 0x01, 0x81, 0x2c, 0xf7, 0x21, 0xad, 0x1c,
        0xde, 0xd4, 0x6d, 0xe9, 0x83, 0x90, 0x97, 0xdb, 0x72, 0x40, 0xa4, 0xa4, 0xb7, 0xb3, 0x67, 0x1f,
        0xcb, 0x79, 0xe6, 0x4e, 0xcc, 0xc0, 0xe5, 0x78, 0x82, 0x5a, 0xd0, 0x7d, 0xcc, 0xff, 0x72, 0x21,
        0xb8, 0x08, 0x46, 0x74, 0xf7, 0x43, 0x24, 0x8e, 0xe0, 0x35, 0x90, 0xe6, 0x81, 0x3a, 0x26, 0x4c,
        0x3c, 0x28, 0x52, 0xbb, 0x91, 0xc3, 0x00, 0xcb, 0x88, 0xd0, 0x65, 0x8b, 0x1b, 0x53, 0x2e, 0xa3,
        0x71, 0x64, 0x48, 0x97, 0xa2, 0x0d, 0xf9, 0x4e, 0x38, 0x19, 0xef, 0x46, 0xa9, 0xde, 0xac, 0xd8,
        0xa8, 0xfa, 0x76, 0x3f, 0xe3, 0x9c, 0x34, 0x3f, 0xf9, 0xdc, 0xbb, 0xc7, 0xc7, 0x0b, 0x4f, 0x1d,
        0x8a, 0x51, 0xe0, 0x4b, 0xcd, 0xb4, 0x59, 0x31, 0xc8, 0x9f, 0x7e, 0xc9, 0xd9, 0x78, 0x73, 0x64,
        0xea, 0xc5, 0xac, 0x83, 0x34, 0xd3, 0xeb, 0xc3, 0xc5, 0x81, 0xa0, 0xff, 0xfa, 0x13, 0x63, 0xeb,
        0x17, 0x0d, 0xdd, 0x51, 0xb7, 0xf0, 0xda, 0x49, 0xd3, 0x16, 0x55, 0x26, 0x29, 0xd4, 0x68, 0x9e,
        0x2b, 0x16, 0xbe, 0x58, 0x7d, 0x47, 0xa1, 0xfc, 0x8f, 0xf8, 0xb8, 0xd1, 0x7a, 0xd0, 0x31, 0xce,
        0x45, 0xcb, 0x3a, 0x8f, 0x95, 0x16, 0x04, 0x28, 0xaf, 0xd7, 0xfb, 0xca, 0xbb, 0x4b, 0x40, 0x7e,
    };

    static inline hw_u64 hw_le64(const uint8_t *p) {
        hw_u64 v;
        memcpy(&v, p, 8);
    #if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
        v = __builtin_bswap64(v);
    #endif
        return v;
    }

    static inline hw_u32 hw_le32(const uint8_t *p) {
        hw_u32 v;
        memcpy(&v, p, 4);
    #if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
        v = __builtin_bswap32(v);
    #endif
        return v;
    }

    static inline void hw_put_le64(uint8_t *p, hw_u64 v) {
    #if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
        v = __builtin_bswap64(v);
    #endif
        memcpy(p, &v, 8);
    }

    static inline hw_u64 hw_rotl64(hw_u64 x, int r) { return (x << r) | (x >> (64 - r)); }

    /* 64x64 -> 128 multiply, folded: low half xor high half */
    static inline hw_u64 hw_fold_mul(hw_u64 a, hw_u64 b) {
        unsigned __int128 r = (unsigned __int128)a * b;
        return (hw_u64)r ^ (hw_u64)(r >> 64);
    }

    static inline hw_u64 hw_avalanche(hw_u64 x) {
        x ^= x >> 37;
        x *= HW_MX1;
        return x ^ (x >> 32);
    }

    static inline hw_u64 hw_avalanche_xxh64(hw_u64 x) {
        x ^= x >> 33;
        x *= HW_P64_2;
        x ^= x >> 29;
        x *= HW_P64_3;
        return x ^ (x >> 32);
    }

    /* one 16-byte chunk of data against 16 bytes of secret (seed 0) */
    static inline hw_u64 hw_mix16(const uint8_t *d, const uint8_t *s) {
        return hw_fold_mul(hw_le64(d) ^ hw_le64(s), hw_le64(d + 8) ^ hw_le64(s + 8));
    }

    #if defined(__SSE2__)
    #include <emmintrin.h>
    /* the accumulators as four pairs of 64-bit lanes */
    typedef struct { __m128i v[4]; } hw_acc;

    static inline void hw_acc_load(hw_acc *a, const hw_u64 *init) {
        for (int i = 0; i < 4; i++) a->v[i] = _mm_loadu_si128((const __m128i *)(init + 2 * i));
    }

    static inline void hw_acc_store(const hw_acc *a, hw_u64 *out) {
        for (int i = 0; i < 4; i++) _mm_storeu_si128((__m128i *)(out + 2 * i), a->v[i]);
    }

    /* one 64-byte stripe: lane i adds lo32(k) * hi32(k), k = data ^ secret, and its
       neighbour i ^ 1 adds the raw data lane (little-endian host assumed, as SSE2 is x86) */
    static inline void hw_stripe(hw_acc *a, const uint8_t *d, const uint8_t *s) {
        for (int i = 0; i < 4; i++) {
            __m128i data = _mm_loadu_si128((const __m128i *)(d + 16 * i));
            __m128i key = _mm_xor_si128(data, _mm_loadu_si128((const __m128i *)(s + 16 * i)));
            __m128i high = _mm_shuffle_epi32(key, _MM_SHUFFLE(3, 3, 1, 1));
            __m128i product = _mm_mul_epu32(key, high);
            __m128i swapped = _mm_shuffle_epi32(data, _MM_SHUFFLE(1, 0, 3, 2));
            a->v[i] = _mm_add_epi64(a->v[i], _mm_add_epi64(product, swapped));
        }
    }

    static inline void hw_scramble(hw_acc *a, const uint8_t *s) {
        const __m128i prime = _mm_set1_epi32((int)HW_P32_1);
        for (int i = 0; i < 4; i++) {
            __m128i x = a->v[i];
            x = _mm_xor_si128(x, _mm_srli_epi64(x, 47));
            x = _mm_xor_si128(x, _mm_loadu_si128((const __m128i *)(s + 16 * i)));
            /* 64-bit lane times a 32-bit constant, modulo 2**64 */
            __m128i low = _mm_mul_epu32(x, prime);
            __m128i high = _mm_mul_epu32(_mm_srli_epi64(x, 32), prime);
            a->v[i] = _mm_add_epi64(low, _mm_slli_epi64(high, 32));
        }
    }
    #else
    typedef struct { hw_u64 v[8]; } hw_acc;

    static inline void hw_acc_load(hw_acc *a, const hw_u64 *init) { memcpy(a->v, init, 64); }

    static inline void hw_acc_store(const hw_acc *a, hw_u64 *out) { memcpy(out, a->v, 64); }

    static inline void hw_stripe(hw_acc *a, const uint8_t *d, const uint8_t *s) {
        for (int i = 0; i < 8; i++) {
            hw_u64 lane = hw_le64(d + 8 * i);
            hw_u64 k = lane ^ hw_le64(s + 8 * i);
            a->v[i ^ 1] += lane;
            a->v[i] += (k & 0xFFFFFFFFULL) * (k >> 32);
        }
    }

    static inline void hw_scramble(hw_acc *a, const uint8_t *s) {
        for (int i = 0; i < 8; i++) {
            hw_u64 x = a->v[i];
            x ^= x >> 47;
            x ^= hw_le64(s + 8 * i);
            a->v[i] = x * HW_P32_1;
        }
    }
    #endif

    /* inputs over 240 bytes: 1024-byte blocks of 16 stripes, scrambled after each */
    static const hw_u64 hw_acc_init[8] = {HW_P32_3, HW_P64_1, HW_P64_2, HW_P64_3, HW_P64_4, HW_P32_2, HW_P64_5, HW_P32_1};

    /* the end of the long path: fold the 8 accumulators into the hash */
    static inline hw_u64 hw_merge(const hw_u64 *acc, size_t n) {
        hw_u64 r = (hw_u64)n * HW_P64_1;
        for (int i = 0; i < 4; i++)
            r += hw_fold_mul(acc[2 * i] ^ hw_le64(hw_secret + 11 + 16 * i),
                             acc[2 * i + 1] ^ hw_le64(hw_secret + 19 + 16 * i));
        return hw_avalanche(r);
    }

    static hw_u64 hw_xxh3_long_portable(const uint8_t *p, size_t n) {
        hw_acc a;
        hw_u64 acc[8];
        const size_t stripes = (HW_SECRET_LEN - 64) / 8;
        const size_t block = 64 * stripes;
        size_t blocks = (n - 1) / block; /* the last block, even a full one, is left for below */
        hw_acc_load(&a, hw_acc_init);
        for (size_t b = 0; b < blocks; b++) {
            const uint8_t *blk = p + b * block;
            for (size_t s = 0; s < stripes; s++)
                hw_stripe(&a, blk + 64 * s, hw_secret + 8 * s);
            hw_scramble(&a, hw_secret + HW_SECRET_LEN - 64);
        }
        const uint8_t *last = p + blocks * block;
        size_t full = (n - blocks * block - 1) / 64;
        for (size_t s = 0; s < full; s++)
            hw_stripe(&a, last + 64 * s, hw_secret + 8 * s);
        hw_stripe(&a, p + n - 64, hw_secret + HW_SECRET_LEN - 71);
        hw_acc_store(&a, acc);
        return hw_merge(acc, n);
    }

    #if defined(__x86_64__) && defined(__GNUC__)
    #include <immintrin.h>
    #define HW_HAVE_AVX2 1
    /* the same long path on 256-bit lanes, for CPUs that have AVX2 (picked at import) */
    __attribute__((target("avx2")))
    static hw_u64 hw_xxh3_long_avx2(const uint8_t *p, size_t n) {
        hw_u64 acc[8];
        __m256i a0 = _mm256_loadu_si256((const __m256i *)hw_acc_init);
        __m256i a1 = _mm256_loadu_si256((const __m256i *)(hw_acc_init + 4));
        const __m256i prime = _mm256_set1_epi32((int)HW_P32_1);
        const size_t stripes = (HW_SECRET_LEN - 64) / 8;
        const size_t block = 64 * stripes;
        size_t blocks = (n - 1) / block;
        #define HW_AVX2_HALF(a, d, s) do { \
            __m256i data = _mm256_loadu_si256((const __m256i *)(d)); \
            __m256i key = _mm256_xor_si256(data, _mm256_loadu_si256((const __m256i *)(s))); \
            __m256i product = _mm256_mul_epu32(key, _mm256_srli_epi64(key, 32)); \
            __m256i swapped = _mm256_shuffle_epi32(data, _MM_SHUFFLE(1, 0, 3, 2)); \
            a = _mm256_add_epi64(a, _mm256_add_epi64(product, swapped)); \
        } while (0)
        #define HW_AVX2_STRIPE(d, s) do { HW_AVX2_HALF(a0, d, s); HW_AVX2_HALF(a1, (d) + 32, (s) + 32); } while (0)
        #define HW_AVX2_SCRAMBLE(a, s) do { \
            __m256i x = _mm256_xor_si256(a, _mm256_srli_epi64(a, 47)); \
            x = _mm256_xor_si256(x, _mm256_loadu_si256((const __m256i *)(s))); \
            __m256i low = _mm256_mul_epu32(x, prime); \
            __m256i high = _mm256_mul_epu32(_mm256_srli_epi64(x, 32), prime); \
            a = _mm256_add_epi64(low, _mm256_slli_epi64(high, 32)); \
        } while (0)
        for (size_t b = 0; b < blocks; b++) {
            const uint8_t *blk = p + b * block;
            for (size_t s = 0; s < stripes; s++)
                HW_AVX2_STRIPE(blk + 64 * s, hw_secret + 8 * s);
            HW_AVX2_SCRAMBLE(a0, hw_secret + HW_SECRET_LEN - 64);
            HW_AVX2_SCRAMBLE(a1, hw_secret + HW_SECRET_LEN - 32);
        }
        const uint8_t *last = p + blocks * block;
        size_t full = (n - blocks * block - 1) / 64;
        for (size_t s = 0; s < full; s++)
            HW_AVX2_STRIPE(last + 64 * s, hw_secret + 8 * s);
        HW_AVX2_STRIPE(p + n - 64, hw_secret + HW_SECRET_LEN - 71);
        #undef HW_AVX2_STRIPE
        #undef HW_AVX2_HALF
        #undef HW_AVX2_SCRAMBLE
        _mm256_storeu_si256((__m256i *)acc, a0);
        _mm256_storeu_si256((__m256i *)(acc + 4), a1);
        return hw_merge(acc, n);
    }

    static int hw_cpu_has_avx2(void) { return __builtin_cpu_supports("avx2"); }
    #else
    #define HW_HAVE_AVX2 0
    static hw_u64 hw_xxh3_long_avx2(const uint8_t *p, size_t n) { return hw_xxh3_long_portable(p, n); }
    static int hw_cpu_has_avx2(void) { return 0; }
    #endif

    #if defined(__SSE2__)
    #define HW_PORTABLE_NAME "sse2"
    #else
    #define HW_PORTABLE_NAME "scalar"
    #endif

    /* 1: the AVX2 long path; 0: the portable one (SSE2 on x86-64, else scalar) */
    static int hw_long_avx2 = 0;

    static inline hw_u64 hw_xxh3_long(const uint8_t *p, size_t n) {
        return hw_long_avx2 ? hw_xxh3_long_avx2(p, n) : hw_xxh3_long_portable(p, n);
    }

    static hw_u64 hw_xxh3_64(const uint8_t *p, size_t n) {
        const uint8_t *s = hw_secret;
        if (n > 240)
            return hw_xxh3_long(p, n);
        if (n > 128) {
            hw_u64 acc = (hw_u64)n * HW_P64_1;
            size_t chunks = n >> 4;
            for (size_t i = 0; i < 8; i++)
                acc += hw_mix16(p + 16 * i, s + 16 * i);
            acc = hw_avalanche(acc);
            for (size_t i = 8; i < chunks; i++)
                acc += hw_mix16(p + 16 * i, s + 16 * (i - 8) + 3);
            acc += hw_mix16(p + n - 16, s + 119);
            return hw_avalanche(acc);
        }
        if (n > 16) {
            hw_u64 acc = (hw_u64)n * HW_P64_1;
            size_t rounds = ((n - 1) >> 5) + 1;
            for (size_t i = 0; i < rounds; i++) {
                acc += hw_mix16(p + 16 * i, s + 32 * i);
                acc += hw_mix16(p + n - 16 * i - 16, s + 32 * i + 16);
            }
            return hw_avalanche(acc);
        }
        if (n > 8) {
            hw_u64 lo = hw_le64(s + 24) ^ hw_le64(s + 32) ^ hw_le64(p);
            hw_u64 hi = hw_le64(s + 40) ^ hw_le64(s + 48) ^ hw_le64(p + n - 8);
            return hw_avalanche((hw_u64)n + __builtin_bswap64(lo) + hi + hw_fold_mul(lo, hi));
        }
        if (n >= 4) {
            hw_u64 both = (hw_u64)hw_le32(p + n - 4) | ((hw_u64)hw_le32(p) << 32);
            hw_u64 v = hw_le64(s + 8) ^ hw_le64(s + 16) ^ both;
            v ^= hw_rotl64(v, 49) ^ hw_rotl64(v, 24);
            v *= HW_MX2;
            v ^= (v >> 35) + (hw_u64)n;
            v *= HW_MX2;
            return v ^ (v >> 28);
        }
        if (n > 0) {
            hw_u32 c = (hw_u32)p[n - 1] | ((hw_u32)n << 8) | ((hw_u32)p[0] << 16) | ((hw_u32)p[n >> 1] << 24);
            return hw_avalanche_xxh64((hw_u64)(hw_le32(s) ^ hw_le32(s + 4)) ^ (hw_u64)c);
        }
        return hw_avalanche_xxh64(hw_le64(s + 56) ^ hw_le64(s + 64));
    }
    """
    uint64_t hw_xxh3_64(const uint8_t *p, size_t n) nogil
    uint64_t hw_le64(const uint8_t *p) nogil
    uint32_t hw_le32(const uint8_t *p) nogil
    void hw_put_le64(uint8_t *p, uint64_t v) nogil
    int hw_cpu_has_avx2() nogil
    int hw_long_avx2
    int HW_HAVE_AVX2
    const char *HW_PORTABLE_NAME


hw_long_avx2 = hw_cpu_has_avx2()


def long_path() -> str:
    """Which XXH3 long-input (over 240 bytes) path hashes now: "avx2", "sse2" or "scalar"."""
    return "avx2" if hw_long_avx2 else HW_PORTABLE_NAME.decode()


def long_paths() -> list:
    """The long-input paths this CPU and build can run (the tests check each one)."""
    paths = [HW_PORTABLE_NAME.decode()]
    if hw_cpu_has_avx2():
        paths.append("avx2")
    return paths


def use_long_path(str name) -> str:
    """Hash long inputs with ``name`` (one of :func:`long_paths`); returns the previous one.
    For the tests and benchmarks; import picks AVX2 when the CPU has it."""
    global hw_long_avx2
    if name not in long_paths():
        raise ValueError(f"long path {name!r} not available here: {long_paths()}")
    previous = long_path()
    hw_long_avx2 = 1 if name == "avx2" else 0
    return previous


DEF BATCH_HEADER_SIZE = 256
DEF FRAME_HEADER_SIZE = 48


def xxh3_64(data) -> int:
    """XXH3-64 (seed 0) of a bytes-like object, as ``xxhash.xxh3_64_intdigest`` computes it."""
    cdef Py_buffer view
    PyObject_GetBuffer(data, &view, PyBUF_SIMPLE)
    try:
        return hw_xxh3_64(<const uint8_t *>view.buf, <size_t>view.len)
    finally:
        PyBuffer_Release(&view)


cdef object _verify(const uint8_t *buf, Py_ssize_t length, Py_ssize_t size, Py_ssize_t count, bint deltas):
    # the reference gives up (None) as soon as a frame cannot fit, so walking past
    # the data is the only early exit that needs care
    cdef Py_ssize_t pos = BATCH_HEADER_SIZE
    cdef Py_ssize_t index, start
    cdef const uint8_t *frame
    cdef uint64_t checksum
    if count < 0 or count * FRAME_HEADER_SIZE > length - BATCH_HEADER_SIZE:
        return None
    out = PyBytes_FromStringAndSize(NULL, count * 8)
    cdef uint8_t *sums = <uint8_t *>PyBytes_AS_STRING(out)
    for index in range(count):
        if pos + FRAME_HEADER_SIZE > length:
            return None
        frame = buf + pos
        checksum = hw_le64(frame)
        start = pos + 8
        pos = start + 40 + <Py_ssize_t>hw_le32(frame + 36) + <Py_ssize_t>hw_le32(frame + 32)
        if pos > length:
            return None
        if hw_le64(frame + 40) != 0:
            return None
        if deltas and hw_le32(frame + 24) != <uint32_t>index:
            return None
        if hw_xxh3_64(buf + start, <size_t>(pos - start)) != checksum:
            return None
        hw_put_le64(sums + 8 * index, checksum)
    return out if pos == size else None


cdef object _verify_buffer(object batch, Py_ssize_t size, Py_ssize_t count, bint deltas):
    cdef Py_buffer view
    PyObject_GetBuffer(batch, &view, PyBUF_SIMPLE)
    try:
        return _verify(<const uint8_t *>view.buf, view.len, size, count, deltas)
    finally:
        PyBuffer_Release(&view)


def verify_frames(batch, Py_ssize_t size, Py_ssize_t count):
    """Compiled ``_py_verify_frames``: the concatenated u64 LE checksums of a blob
    that tiles ``[256, size)`` in exactly ``count`` frames, each with zero
    reserved bytes, a matching checksum and ``offset_delta == index``; else None."""
    return _verify_buffer(batch, size, count, True)


def verify_frames_any_delta(batch, Py_ssize_t size, Py_ssize_t count):
    """Compiled ``_py_verify_frames_any_delta``: :func:`verify_frames` without the
    offset_delta check."""
    return _verify_buffer(batch, size, count, False)


def walk(batch, Py_ssize_t size, Py_ssize_t stop):
    """Compiled ``_py_walk``: ``(positions, checksums)`` of the first ``stop`` frames
    (``stop + 1`` positions), or None when one does not lie inside ``size``."""
    cdef Py_buffer view
    cdef Py_ssize_t pos = BATCH_HEADER_SIZE
    cdef Py_ssize_t index
    cdef const uint8_t *buf
    if stop * FRAME_HEADER_SIZE > size - BATCH_HEADER_SIZE:
        return None
    PyObject_GetBuffer(batch, &view, PyBUF_SIMPLE)
    try:
        buf = <const uint8_t *>view.buf
        positions = [0] * (stop + 1)
        sums = [0] * stop
        for index in range(stop):
            if pos + 40 > view.len:
                return None
            positions[index] = pos
            sums[index] = hw_le64(buf + pos)
            pos += FRAME_HEADER_SIZE + <Py_ssize_t>hw_le32(buf + pos + 36) + <Py_ssize_t>hw_le32(buf + pos + 32)
            if pos > size:
                return None
        positions[stop] = pos
        return positions, sums
    finally:
        PyBuffer_Release(&view)


def span(batch, Py_ssize_t size, Py_ssize_t start, Py_ssize_t stop):
    """Compiled ``_py_span``: ``(first, end, checksum bytes)`` for frames ``[start, stop)``:
    where frame ``start`` begins, where frame ``stop - 1`` ends, and those frames'
    u64 LE checksums concatenated; None when a frame up to ``stop`` does not lie
    inside ``size``."""
    cdef Py_buffer view
    cdef Py_ssize_t pos = BATCH_HEADER_SIZE
    cdef Py_ssize_t first = BATCH_HEADER_SIZE
    cdef Py_ssize_t index
    cdef const uint8_t *buf
    cdef uint8_t *sums
    if stop * FRAME_HEADER_SIZE > size - BATCH_HEADER_SIZE or not 0 <= start <= stop:
        return None
    PyObject_GetBuffer(batch, &view, PyBUF_SIMPLE)
    try:
        buf = <const uint8_t *>view.buf
        out = PyBytes_FromStringAndSize(NULL, (stop - start) * 8)
        sums = <uint8_t *>PyBytes_AS_STRING(out)
        for index in range(stop):
            if pos + 40 > view.len:
                return None
            if index == start:
                first = pos
            if index >= start:
                hw_put_le64(sums + 8 * (index - start), hw_le64(buf + pos))
            pos += FRAME_HEADER_SIZE + <Py_ssize_t>hw_le32(buf + pos + 36) + <Py_ssize_t>hw_le32(buf + pos + 32)
            if pos > size:
                return None
        if start == stop:
            first = pos
        return first, pos, out
    finally:
        PyBuffer_Release(&view)

/* Paged decode attention for the CPU: one query token per sequence against its K/V, read in place
 * through the block table (no gather copy, no padding to the longest sequence).
 *
 * Cache layout (one layer): [num_kv_heads, num_slots, head_dim], slot = block * block_size + offset.
 * q and out: [num_seqs, num_heads, head_dim], contiguous. Query heads are grouped per kv head (GQA/MQA).
 * Work items are (sequence, kv head) pairs, split over num_threads pthreads. With window > 0 (sliding-window
 * attention) the query, at position L - 1, sees only the last min(L, window) keys; 0 means all L.
 *
 * K/V elements are q's dtype (fp32 or bf16), or one-byte codes (int8, or fp8 e4m3fn) with each row's fp32
 * scale in the 4 bytes after its head_dim codes (layers/kv_quant.py): a row is read once, turned into
 * floats (code times scale) in a stack buffer, and used by every query head of its group.
 *
 * Built on first use by backends/engine/kernels/cpu_decode.py with the host compiler; the torch path in
 * layers/attention.py is the reference it is tested against and the fallback where no compiler exists.
 */
#include <math.h>
#include <pthread.h>
#ifdef _OPENMP
#include <omp.h>
#endif
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    const void *q, *k, *v;
    const int64_t *tables;
    const int32_t *lens;
    void *out;
    int num_seqs, max_blocks, num_heads, num_kv_heads, head_dim, block_size, max_len, is_bf16, window;
    int kv_dtype; /* KV_AS_Q, KV_INT8 or KV_FP8 */
    int64_t num_slots;
    int64_t q_stride; /* elements from one sequence's query to the next (its heads are contiguous) */
    float scale;
    int begin, end;
} Job;

static inline float bf16_to_f32(uint16_t x) {
    uint32_t bits = (uint32_t)x << 16;
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

static inline uint16_t f32_to_bf16(float f) { /* round to nearest even, as torch does */
    uint32_t bits;
    memcpy(&bits, &f, 4);
    if ((bits & 0x7f800000u) == 0x7f800000u) return (uint16_t)(bits >> 16); /* inf / nan */
    bits += 0x7fffu + ((bits >> 16) & 1u);
    return (uint16_t)(bits >> 16);
}

enum { KV_AS_Q = 0, KV_INT8 = 1, KV_FP8 = 2 };
#define SCALE_BYTES 4

/* e4m3fn code to float, exactly and branch-free (vectorises): a normal rebuilt as fp32 bits (exponent
 * bias 7 -> 127), a subnormal as m * 2^-9. The cache never holds NaN (quantizing clamps to +-448). */
static inline float fp8_to_f32(uint8_t x) {
    const uint32_t em = x & 0x7fu;
    const uint32_t bits = ((uint32_t)(x & 0x80u) << 24) | ((em << 20) + (120u << 23));
    float normal;
    memcpy(&normal, &bits, 4);
    const float sub = (x & 0x80u ? -0.001953125f : 0.001953125f) * (float)em;
    return em >= 8 ? normal : sub;
}

/* Row `slot` of kv head h as D floats: in place for an fp32 cache, else converted into buf (codes times
 * their scale when quantized). */
static inline __attribute__((always_inline)) const float *kv_row(const Job *j, const void *cache, int h,
                                                                 int64_t slot, float *buf, const int D) {
    const int64_t row = (int64_t)h * j->num_slots + slot;
    if (j->kv_dtype == KV_AS_Q && !j->is_bf16) return (const float *)cache + row * D;
    if (j->kv_dtype == KV_AS_Q) {
        const uint16_t *c = (const uint16_t *)cache + row * D;
        for (int d = 0; d < D; d++) buf[d] = bf16_to_f32(c[d]);
        return buf;
    }
    const uint8_t *c = (const uint8_t *)cache + row * (D + SCALE_BYTES);
    float s;
    memcpy(&s, c + D, 4);
    if (j->kv_dtype == KV_INT8)
        for (int d = 0; d < D; d++) buf[d] = s * (float)(int8_t)c[d];
    else
        for (int d = 0; d < D; d++) buf[d] = s * fp8_to_f32(c[d]);
    return buf;
}

static inline float load_q(const Job *j, int64_t i) {
    return j->is_bf16 ? bf16_to_f32(((const uint16_t *)j->q)[i]) : ((const float *)j->q)[i];
}

static inline void store_out(const Job *j, int64_t i, float o) {
    if (j->is_bf16)
        ((uint16_t *)j->out)[i] = f32_to_bf16(o);
    else
        ((float *)j->out)[i] = o;
}

/* dots[g] = q_g . row (qs: the group's G query rows), reading codes in place and applying their scale
 * once at the end; float rows go through kv_row. */
static inline __attribute__((always_inline)) void dot_row(const Job *j, const void *cache, int h, int64_t slot,
                                                          const float *qs, float *dots, float *buf,
                                                          const int D, const int G) {
    const int64_t row = (int64_t)h * j->num_slots + slot;
    const uint8_t *c = (const uint8_t *)cache + row * (D + SCALE_BYTES);
    float s = 1.0f;
    for (int g = 0; g < G; g++) dots[g] = 0.0f;
    if (j->kv_dtype == KV_INT8) {
        for (int d = 0; d < D; d++) {
            const float k = (float)(int8_t)c[d];
            for (int g = 0; g < G; g++) dots[g] += qs[g * D + d] * k;
        }
    } else if (j->kv_dtype == KV_FP8) {
        for (int d = 0; d < D; d++) {
            const float k = fp8_to_f32(c[d]);
            for (int g = 0; g < G; g++) dots[g] += qs[g * D + d] * k;
        }
    } else {
        const float *kp = kv_row(j, cache, h, slot, buf, D);
        for (int d = 0; d < D; d++) {
            const float k = kp[d];
            for (int g = 0; g < G; g++) dots[g] += qs[g * D + d] * k;
        }
        return;
    }
    memcpy(&s, c + D, 4);
    for (int g = 0; g < G; g++) dots[g] *= s;
}

/* acc[g] += p[g] * row for the group's G probabilities, codes read in place with their scale folded in. */
static inline __attribute__((always_inline)) void add_row(const Job *j, const void *cache, int h, int64_t slot,
                                                          const float *p, float *acc, float *buf, const int D,
                                                          const int G) {
    const int64_t row = (int64_t)h * j->num_slots + slot;
    const uint8_t *c = (const uint8_t *)cache + row * (D + SCALE_BYTES);
    float w[G], s = 1.0f;
    if (j->kv_dtype != KV_AS_Q) memcpy(&s, c + D, 4);
    for (int g = 0; g < G; g++) w[g] = p[g] * s;
    if (j->kv_dtype == KV_INT8) {
        for (int d = 0; d < D; d++) {
            const float v = (float)(int8_t)c[d];
            for (int g = 0; g < G; g++) acc[g * D + d] += w[g] * v;
        }
    } else if (j->kv_dtype == KV_FP8) {
        for (int d = 0; d < D; d++) {
            const float v = fp8_to_f32(c[d]);
            for (int g = 0; g < G; g++) acc[g * D + d] += w[g] * v;
        }
    } else {
        const float *vp = kv_row(j, cache, h, slot, buf, D);
        for (int d = 0; d < D; d++) {
            const float v = vp[d];
            for (int g = 0; g < G; g++) acc[g * D + d] += w[g] * v;
        }
    }
}

/* exp(x) for x <= 0 (scores minus their max): Cephes' range reduction and polynomial, branch-free so the
 * softmax loop vectorises. */
static inline float exp_nonpos(float x) {
    x = x < -87.0f ? -87.0f : x;
    const float n = floorf(x * 1.44269504088896341f + 0.5f);
    const float r = x - n * 0.693359375f + n * 2.12194440e-4f;
    const float r2 = r * r;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * r2 + r + 1.0f;
    const int32_t e = ((int32_t)n + 127) << 23;
    float scale;
    memcpy(&scale, &e, 4);
    return p * scale;
}

/* Each of the G rows of L scores becomes exp(score - row max), unnormalised; inv_sum[g] = 1 / row sum. */
static inline __attribute__((always_inline)) void softmax_rows(float *scores, int L, int G, float *inv_sum) {
    for (int g = 0; g < G; g++) {
        float *sg = scores + g * L, m = -INFINITY, sum = 0.0f, lanes[16];
        int t = 0;
        for (int i = 0; i < 16; i++) lanes[i] = -INFINITY;
        for (; t + 16 <= L; t += 16) /* lane-wise, so it vectorises (a max reduction does not, without */
            for (int i = 0; i < 16; i++) /* -ffinite-math-only) */
                lanes[i] = sg[t + i] > lanes[i] ? sg[t + i] : lanes[i];
        for (; t < L; t++) m = sg[t] > m ? sg[t] : m;
        for (int i = 0; i < 16; i++) m = lanes[i] > m ? lanes[i] : m;
        for (t = 0; t < L; t++) sg[t] = exp_nonpos(sg[t] - m);
        for (t = 0; t < L; t++) sum += sg[t];
        inv_sum[g] = 1.0f / sum;
    }
}

#define MAX_GROUP 64
#define MAX_DIM 512

/* The head size and group size known at compile time (instantiated below for the common shapes): walks
 * the block table block by block, and computes every query head of the group in the same pass over a K or
 * V row, so each row is read (and converted) once and the loops vectorise over head_dim. */
static inline __attribute__((always_inline)) void run_item_fixed(const Job *j, int item, float *scores,
                                                                 float *qs, float *acc, const int D,
                                                                 const int G) {
    const int nkv = j->num_kv_heads, bs = j->block_size;
    const int s = item / nkv, h = item % nkv;
    const int len = j->lens[s];
    const int start = j->window > 0 && len > j->window ? len - j->window : 0; /* first key in the window */
    const int L = len - start;
    const int first_block = start / bs;
    const int64_t qoff = ((int64_t)s * j->num_heads + (int64_t)h * G) * D; /* into out */
    const int64_t qin = (int64_t)s * j->q_stride + (int64_t)h * G * D;     /* into q */
    const int64_t *table = j->tables + (int64_t)s * j->max_blocks;
    float buf[D];
    for (int i = 0; i < G * D; i++) qs[i] = load_q(j, qin + i) * j->scale;
    const int num_blocks = (len + bs - 1) / bs;
    for (int b = first_block; b < num_blocks; b++) {
        const int lo = b == first_block ? start - b * bs : 0;
        const int n = b == num_blocks - 1 ? len - b * bs : bs;
        const int base = b * bs - start; /* key t = b * bs + o has its score at t - start */
        for (int o = lo; o < n; o++) {
            float dots[G];
            dot_row(j, j->k, h, table[b] * bs + o, qs, dots, buf, D, G);
            for (int g = 0; g < G; g++) scores[g * L + base + o] = dots[g];
        }
    }
    float inv_sum[G];
    softmax_rows(scores, L, G, inv_sum);
    for (int i = 0; i < G * D; i++) acc[i] = 0.0f;
    for (int b = first_block; b < num_blocks; b++) {
        const int lo = b == first_block ? start - b * bs : 0;
        const int n = b == num_blocks - 1 ? len - b * bs : bs;
        const int base = b * bs - start;
        for (int o = lo; o < n; o++) {
            float p[G];
            for (int g = 0; g < G; g++) p[g] = scores[g * L + base + o];
            add_row(j, j->v, h, table[b] * bs + o, p, acc, buf, D, G);
        }
    }
    for (int g = 0; g < G; g++)
        for (int d = 0; d < D; d++) store_out(j, qoff + g * D + d, acc[g * D + d] * inv_sum[g]);
}

#define FIXED(D_, G_)                                                                                  \
    static void run_item_##D_##_##G_(const Job *j, int item, float *scores, float *qs, float *acc) {     \
        run_item_fixed(j, item, scores, qs, acc, D_, G_);                                                \
    }
#define FIXED_GROUPS(D_) FIXED(D_, 1) FIXED(D_, 2) FIXED(D_, 3) FIXED(D_, 4) FIXED(D_, 5) FIXED(D_, 6) FIXED(D_, 7) FIXED(D_, 8)
FIXED_GROUPS(32)
FIXED_GROUPS(64)
FIXED_GROUPS(128)

typedef void (*ItemFn)(const Job *, int, float *, float *, float *);
#define ROW(D_)                                                                                        \
    {run_item_##D_##_1, run_item_##D_##_2, run_item_##D_##_3, run_item_##D_##_4,                         \
     run_item_##D_##_5, run_item_##D_##_6, run_item_##D_##_7, run_item_##D_##_8}
static const ItemFn FIXED_FNS[3][8] = {ROW(32), ROW(64), ROW(128)};

static ItemFn fixed_fn(const Job *j) {
    const int G = j->num_heads / j->num_kv_heads, D = j->head_dim;
    if (G < 1 || G > 8) return NULL;
    const int row = D == 32 ? 0 : D == 64 ? 1 : D == 128 ? 2 : -1;
    return row < 0 ? NULL : FIXED_FNS[row][G - 1];
}

#if defined(__AVX512F__)
#include <immintrin.h>

/* With AVX-512 (fp32 or bf16 K/V in q's dtype, head_dim a multiple of 16): the group's query heads sit in
 * registers, each K row is loaded once as head_dim / 16 vectors (bf16 widened by a shift) and dotted with
 * every head of the group, and each V row is added into G x head_dim / 16 register accumulators. The
 * portable loops above leave this to the compiler, which spends several times the instructions per key. */
static inline __attribute__((always_inline)) __m512 load16(const void *p, const int is_bf16) {
    if (is_bf16)
        return _mm512_castsi512_ps(
            _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)p)), 16));
    return _mm512_loadu_ps(p);
}

static inline __attribute__((always_inline)) void run_item_avx512(const Job *j, int item, float *scores,
                                                                  float *tmp, const int D, const int G,
                                                                  const int is_bf16) {
    const int C = D / 16, esz = is_bf16 ? 2 : 4;
    const int nkv = j->num_kv_heads, bs = j->block_size;
    const int s = item / nkv, h = item % nkv;
    const int len = j->lens[s];
    const int start = j->window > 0 && len > j->window ? len - j->window : 0; /* first key in the window */
    const int L = len - start;
    const int first_block = start / bs;
    const int num_blocks = (len + bs - 1) / bs;
    const int64_t qoff = ((int64_t)s * j->num_heads + (int64_t)h * G) * D; /* into out */
    const int64_t qin = (int64_t)s * j->q_stride + (int64_t)h * G * D;     /* into q */
    const int64_t *table = j->tables + (int64_t)s * j->max_blocks;
    const int64_t head_bytes = (int64_t)h * j->num_slots * D * esz, row_bytes = (int64_t)D * esz;
    const char *kbase = (const char *)j->k + head_bytes, *vbase = (const char *)j->v + head_bytes;
    const char *qbase = (const char *)j->q + qin * esz;
    const __m512 scale = _mm512_set1_ps(j->scale);
    __m512 q[8][8]; /* fixed sizes, not [G][C]: a variable-length array would live on the stack */
    for (int g = 0; g < G; g++)
        for (int c = 0; c < C; c++) q[g][c] = _mm512_mul_ps(load16(qbase + (g * D + c * 16) * esz, is_bf16), scale);
    for (int b = first_block; b < num_blocks; b++) {
        const int lo = b == first_block ? start - b * bs : 0;
        const int n = b == num_blocks - 1 ? len - b * bs : bs;
        const int base = b * bs - start;
        const char *row = kbase + (table[b] * bs + lo) * row_bytes;
        /* a block is a page or less, and the hardware prefetcher stops at pages: fetch the next one's
         * rows (or this item's first V rows) while this one is dotted */
        const char *ahead = b + 1 < num_blocks ? kbase + table[b + 1] * bs * row_bytes
                                               : vbase + (table[first_block] * bs) * row_bytes;
        for (int o = lo; o < n; o++, row += row_bytes) {
            for (int line = 0; line < row_bytes; line += 64) _mm_prefetch(ahead + o * row_bytes + line, _MM_HINT_T0);
            __m512 k[8];
            for (int c = 0; c < C; c++) k[c] = load16(row + c * 16 * esz, is_bf16);
            for (int g = 0; g < G; g++) {
                __m512 a = _mm512_mul_ps(q[g][0], k[0]);
                for (int c = 1; c < C; c++) a = _mm512_fmadd_ps(q[g][c], k[c], a);
                scores[g * L + base + o] = _mm512_reduce_add_ps(a);
            }
        }
    }
    float inv_sum[8];
    softmax_rows(scores, L, G, inv_sum);
    __m512 acc[8][8];
    for (int g = 0; g < G; g++)
        for (int c = 0; c < C; c++) acc[g][c] = _mm512_setzero_ps();
    for (int b = first_block; b < num_blocks; b++) {
        const int lo = b == first_block ? start - b * bs : 0;
        const int n = b == num_blocks - 1 ? len - b * bs : bs;
        const int base = b * bs - start;
        const char *row = vbase + (table[b] * bs + lo) * row_bytes;
        const char *ahead = b + 1 < num_blocks ? vbase + table[b + 1] * bs * row_bytes : NULL;
        for (int o = lo; o < n; o++, row += row_bytes) {
            if (ahead)
                for (int line = 0; line < row_bytes; line += 64) _mm_prefetch(ahead + o * row_bytes + line, _MM_HINT_T0);
            __m512 v[8];
            for (int c = 0; c < C; c++) v[c] = load16(row + c * 16 * esz, is_bf16);
            for (int g = 0; g < G; g++) {
                const __m512 p = _mm512_set1_ps(scores[g * L + base + o]);
                for (int c = 0; c < C; c++) acc[g][c] = _mm512_fmadd_ps(p, v[c], acc[g][c]);
            }
        }
    }
    for (int g = 0; g < G; g++) {
        const __m512 inv = _mm512_set1_ps(inv_sum[g]);
        for (int c = 0; c < C; c++) {
            const __m512 o = _mm512_mul_ps(acc[g][c], inv);
            if (is_bf16)
                _mm512_storeu_ps(tmp + c * 16, o);
            else
                _mm512_storeu_ps((float *)j->out + qoff + g * D + c * 16, o);
        }
        if (is_bf16)
            for (int d = 0; d < D; d++) ((uint16_t *)j->out)[qoff + g * D + d] = f32_to_bf16(tmp[d]);
    }
}

#define AVX(D_, G_)                                                                                    \
    static void avx_##D_##_##G_##_f32(const Job *j, int item, float *scores, float *qs, float *acc) {  \
        (void)qs;                                                                                      \
        run_item_avx512(j, item, scores, acc, D_, G_, 0);                                              \
    }                                                                                                  \
    static void avx_##D_##_##G_##_bf16(const Job *j, int item, float *scores, float *qs, float *acc) { \
        (void)qs;                                                                                      \
        run_item_avx512(j, item, scores, acc, D_, G_, 1);                                              \
    }
#define AVX_GROUPS(D_) AVX(D_, 1) AVX(D_, 2) AVX(D_, 3) AVX(D_, 4) AVX(D_, 5) AVX(D_, 6) AVX(D_, 7) AVX(D_, 8)
AVX_GROUPS(32)
AVX_GROUPS(64)
AVX_GROUPS(128)
#define AVX_ROW(D_, T_)                                                                                \
    {avx_##D_##_1_##T_, avx_##D_##_2_##T_, avx_##D_##_3_##T_, avx_##D_##_4_##T_,                       \
     avx_##D_##_5_##T_, avx_##D_##_6_##T_, avx_##D_##_7_##T_, avx_##D_##_8_##T_}
static const ItemFn AVX_FNS[2][3][8] = {{AVX_ROW(32, f32), AVX_ROW(64, f32), AVX_ROW(128, f32)},
                                        {AVX_ROW(32, bf16), AVX_ROW(64, bf16), AVX_ROW(128, bf16)}};

static ItemFn vector_fn(const Job *j) {
    const int G = j->num_heads / j->num_kv_heads, D = j->head_dim;
    if (j->kv_dtype != KV_AS_Q || G < 1 || G > 8) return NULL;
    const int row = D == 32 ? 0 : D == 64 ? 1 : D == 128 ? 2 : -1;
    return row < 0 ? NULL : AVX_FNS[j->is_bf16 ? 1 : 0][row][G - 1];
}
static const char *const ISA = "avx512";
#elif defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>

/* With AVX2 and FMA (fp32 or bf16 K/V in q's dtype, head_dim a multiple of 8): the AVX-512 walk above at
 * half the width. Sixteen vector registers do not hold a group's queries and accumulators at once, so the
 * compiler keeps part of them in L1, which is still far cheaper than the portable loops' scalar work. */
static inline __attribute__((always_inline)) __m256 load8(const void *p, const int is_bf16) {
    if (is_bf16)
        return _mm256_castsi256_ps(
            _mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p)), 16));
    return _mm256_loadu_ps(p);
}

static inline __attribute__((always_inline)) float hsum8(__m256 a) {
    __m128 x = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    x = _mm_add_ps(x, _mm_movehl_ps(x, x));
    x = _mm_add_ss(x, _mm_movehdup_ps(x));
    return _mm_cvtss_f32(x);
}

static inline __attribute__((always_inline)) void run_item_avx2(const Job *j, int item, float *scores,
                                                                float *tmp, const int D, const int G,
                                                                const int is_bf16) {
    const int C = D / 8, esz = is_bf16 ? 2 : 4;
    const int nkv = j->num_kv_heads, bs = j->block_size;
    const int s = item / nkv, h = item % nkv;
    const int len = j->lens[s];
    const int start = j->window > 0 && len > j->window ? len - j->window : 0; /* first key in the window */
    const int L = len - start;
    const int first_block = start / bs;
    const int num_blocks = (len + bs - 1) / bs;
    const int64_t qoff = ((int64_t)s * j->num_heads + (int64_t)h * G) * D; /* into out */
    const int64_t qin = (int64_t)s * j->q_stride + (int64_t)h * G * D;     /* into q */
    const int64_t *table = j->tables + (int64_t)s * j->max_blocks;
    const int64_t head_bytes = (int64_t)h * j->num_slots * D * esz, row_bytes = (int64_t)D * esz;
    const char *kbase = (const char *)j->k + head_bytes, *vbase = (const char *)j->v + head_bytes;
    const char *qbase = (const char *)j->q + qin * esz;
    const __m256 scale = _mm256_set1_ps(j->scale);
    __m256 q[8][16];
    for (int g = 0; g < G; g++)
        for (int c = 0; c < C; c++) q[g][c] = _mm256_mul_ps(load8(qbase + (g * D + c * 8) * esz, is_bf16), scale);
    for (int b = first_block; b < num_blocks; b++) {
        const int lo = b == first_block ? start - b * bs : 0;
        const int n = b == num_blocks - 1 ? len - b * bs : bs;
        const int base = b * bs - start;
        const char *row = kbase + (table[b] * bs + lo) * row_bytes;
        const char *ahead = b + 1 < num_blocks ? kbase + table[b + 1] * bs * row_bytes
                                               : vbase + (table[first_block] * bs) * row_bytes;
        for (int o = lo; o < n; o++, row += row_bytes) {
            for (int line = 0; line < row_bytes; line += 64) _mm_prefetch(ahead + o * row_bytes + line, _MM_HINT_T0);
            for (int g = 0; g < G; g++) {
                __m256 a = _mm256_mul_ps(q[g][0], load8(row, is_bf16));
                for (int c = 1; c < C; c++) a = _mm256_fmadd_ps(q[g][c], load8(row + c * 8 * esz, is_bf16), a);
                scores[g * L + base + o] = hsum8(a);
            }
        }
    }
    float inv_sum[8];
    softmax_rows(scores, L, G, inv_sum);
    __m256 acc[8][16];
    for (int g = 0; g < G; g++)
        for (int c = 0; c < C; c++) acc[g][c] = _mm256_setzero_ps();
    for (int b = first_block; b < num_blocks; b++) {
        const int lo = b == first_block ? start - b * bs : 0;
        const int n = b == num_blocks - 1 ? len - b * bs : bs;
        const int base = b * bs - start;
        const char *row = vbase + (table[b] * bs + lo) * row_bytes;
        const char *ahead = b + 1 < num_blocks ? vbase + table[b + 1] * bs * row_bytes : NULL;
        for (int o = lo; o < n; o++, row += row_bytes) {
            if (ahead)
                for (int line = 0; line < row_bytes; line += 64) _mm_prefetch(ahead + o * row_bytes + line, _MM_HINT_T0);
            for (int c = 0; c < C; c++) {
                const __m256 v = load8(row + c * 8 * esz, is_bf16);
                for (int g = 0; g < G; g++)
                    acc[g][c] = _mm256_fmadd_ps(_mm256_set1_ps(scores[g * L + base + o]), v, acc[g][c]);
            }
        }
    }
    for (int g = 0; g < G; g++) {
        const __m256 inv = _mm256_set1_ps(inv_sum[g]);
        for (int c = 0; c < C; c++) {
            const __m256 o = _mm256_mul_ps(acc[g][c], inv);
            if (is_bf16)
                _mm256_storeu_ps(tmp + c * 8, o);
            else
                _mm256_storeu_ps((float *)j->out + qoff + g * D + c * 8, o);
        }
        if (is_bf16)
            for (int d = 0; d < D; d++) ((uint16_t *)j->out)[qoff + g * D + d] = f32_to_bf16(tmp[d]);
    }
}

#define AVX2(D_, G_)                                                                                   \
    static void avx2_##D_##_##G_##_f32(const Job *j, int item, float *scores, float *qs, float *acc) { \
        (void)qs;                                                                                      \
        run_item_avx2(j, item, scores, acc, D_, G_, 0);                                                \
    }                                                                                                  \
    static void avx2_##D_##_##G_##_bf16(const Job *j, int item, float *scores, float *qs, float *acc) { \
        (void)qs;                                                                                      \
        run_item_avx2(j, item, scores, acc, D_, G_, 1);                                                \
    }
#define AVX2_GROUPS(D_) AVX2(D_, 1) AVX2(D_, 2) AVX2(D_, 3) AVX2(D_, 4) AVX2(D_, 5) AVX2(D_, 6) AVX2(D_, 7) AVX2(D_, 8)
AVX2_GROUPS(32)
AVX2_GROUPS(64)
AVX2_GROUPS(128)
#define AVX2_ROW(D_, T_)                                                                               \
    {avx2_##D_##_1_##T_, avx2_##D_##_2_##T_, avx2_##D_##_3_##T_, avx2_##D_##_4_##T_,                   \
     avx2_##D_##_5_##T_, avx2_##D_##_6_##T_, avx2_##D_##_7_##T_, avx2_##D_##_8_##T_}
static const ItemFn AVX2_FNS[2][3][8] = {{AVX2_ROW(32, f32), AVX2_ROW(64, f32), AVX2_ROW(128, f32)},
                                         {AVX2_ROW(32, bf16), AVX2_ROW(64, bf16), AVX2_ROW(128, bf16)}};

static ItemFn vector_fn(const Job *j) {
    const int G = j->num_heads / j->num_kv_heads, D = j->head_dim;
    if (j->kv_dtype != KV_AS_Q || G < 1 || G > 8) return NULL;
    const int row = D == 32 ? 0 : D == 64 ? 1 : D == 128 ? 2 : -1;
    return row < 0 ? NULL : AVX2_FNS[j->is_bf16 ? 1 : 0][row][G - 1];
}
static const char *const ISA = "avx2";
#else
static ItemFn vector_fn(const Job *j) {
    (void)j;
    return NULL;
}
static const char *const ISA = "portable";
#endif

/* Which vector path this build of the kernel runs: "avx512", "avx2" or "portable". */
const char *paged_decode_isa(void) { return ISA; }

/* Nonzero: run the portable loops even where a vector path fits (bench/decode_kernel.py --vs-portable
 * times both; tests compare them). */
int paged_decode_portable = 0;

/* The general case: any head and group size. */
static void run_item(const Job *j, int item, float *scores, float *qbuf, float *acc) {
    const int nkv = j->num_kv_heads, D = j->head_dim, bs = j->block_size;
    const int G = j->num_heads / nkv;
    const int s = item / nkv, h = item % nkv;
    const int len = j->lens[s];
    const int start = j->window > 0 && len > j->window ? len - j->window : 0; /* first key in the window */
    const int L = len - start;
    const int64_t qoff = ((int64_t)s * j->num_heads + (int64_t)h * G) * D; /* into out */
    const int64_t qin = (int64_t)s * j->q_stride + (int64_t)h * G * D;     /* into q */
    const int64_t *table = j->tables + (int64_t)s * j->max_blocks;
    float buf[MAX_DIM];

    for (int i = 0; i < G * D; i++) qbuf[i] = load_q(j, qin + i);

    /* scores[g * L + i] = q_g . k_(start + i) * scale */
    for (int i = 0; i < L; i++) {
        const int t = start + i;
        const float *kp = kv_row(j, j->k, h, table[t / bs] * bs + t % bs, buf, D);
        for (int g = 0; g < G; g++) {
            const float *qg = qbuf + g * D;
            float dot = 0.0f;
            for (int d = 0; d < D; d++) dot += qg[d] * kp[d];
            scores[g * L + i] = dot * j->scale;
        }
    }
    float inv_sum[MAX_GROUP];
    softmax_rows(scores, L, G, inv_sum);
    memset(acc, 0, sizeof(float) * G * D);
    for (int i = 0; i < L; i++) {
        const int t = start + i;
        const float *vp = kv_row(j, j->v, h, table[t / bs] * bs + t % bs, buf, D);
        for (int g = 0; g < G; g++) {
            const float p = scores[g * L + i];
            float *ag = acc + g * D;
            for (int d = 0; d < D; d++) ag[d] += p * vp[d];
        }
    }
    for (int g = 0; g < G; g++)
        for (int d = 0; d < D; d++) store_out(j, qoff + g * D + d, acc[g * D + d] * inv_sum[g]);
}

/* The items [begin, end) of j, or, with `shared` inside an OpenMP parallel region, a share of all of them
 * handed out a few at a time (sequences differ in length: equal counts would not be equal work). */
static void run_items(const Job *j, int shared) {
    const size_t G = (size_t)(j->num_heads / j->num_kv_heads), D = (size_t)j->head_dim;
    float *scores = (float *)malloc(sizeof(float) * G * (size_t)j->max_len);
    float *q = (float *)malloc(sizeof(float) * G * D);
    float *acc = (float *)malloc(sizeof(float) * G * D);
    const ItemFn avx = paged_decode_portable ? NULL : vector_fn(j); /* the widest that fits the shapes */
    const ItemFn fixed = avx ? avx : fixed_fn(j);
    const ItemFn fn = fixed ? fixed : run_item;
    if (scores && q && acc) {
        if (shared) {
#ifdef _OPENMP
#pragma omp for schedule(dynamic, 2) nowait
#endif
            for (int item = j->begin; item < j->end; item++) fn(j, item, scores, q, acc);
        } else {
            for (int item = j->begin; item < j->end; item++) fn(j, item, scores, q, acc);
        }
    }
    free(scores);
    free(q);
    free(acc);
}

static void *run_range(void *arg) {
    run_items((const Job *)arg, 0);
    return NULL;
}

/* Returns 0 on success, -1 on bad arguments. */
int paged_decode(const void *q, const void *k_cache, const void *v_cache, const int64_t *tables,
                 const int32_t *lens, void *out, int num_seqs, int max_blocks, int num_heads,
                 int num_kv_heads, int head_dim, int block_size, int64_t num_slots, float scale,
                 int is_bf16, int kv_dtype, int window, int num_threads, int64_t q_stride) {
    if (kv_dtype < KV_AS_Q || kv_dtype > KV_FP8 || (kv_dtype != KV_AS_Q && head_dim % SCALE_BYTES))
        return -1;
    if (window < 0 || num_kv_heads <= 0 || num_heads % num_kv_heads || num_heads / num_kv_heads > MAX_GROUP ||
        head_dim > MAX_DIM || block_size <= 0 || num_seqs < 0)
        return -1;
    int max_len = 1;
    for (int s = 0; s < num_seqs; s++) {
        if (lens[s] <= 0 || lens[s] > max_blocks * block_size) return -1;
        if (lens[s] > max_len) max_len = lens[s];
    }
    const int items = num_seqs * num_kv_heads;
    if (num_threads < 1) num_threads = 1;
    if (num_threads > items) num_threads = items > 0 ? items : 1;
    if (q_stride < (int64_t)num_heads * head_dim) return -1;
    Job base = {q,         k_cache, v_cache,      tables,     lens,         out,       num_seqs,
                max_blocks, num_heads, num_kv_heads, head_dim, block_size, max_len,  is_bf16,
                window,    kv_dtype, num_slots,    q_stride,  scale,        0,         items};
    if (num_threads == 1) {
        run_range(&base);
        return 0;
    }
#ifdef _OPENMP /* torch's own OpenMP pool (the process has one libgomp): no thread to start, none to fight */
#pragma omp parallel num_threads(num_threads)
    run_items(&base, 1);
    return 0;
#endif
    Job jobs[64];
    pthread_t threads[64];
    if (num_threads > 64) num_threads = 64;
    int started = 0;
    for (int i = 0; i < num_threads; i++) {
        jobs[i] = base;
        jobs[i].begin = (int)((int64_t)items * i / num_threads);
        jobs[i].end = (int)((int64_t)items * (i + 1) / num_threads);
    }
    for (int i = 1; i < num_threads; i++)
        if (pthread_create(&threads[i], NULL, run_range, &jobs[i]) == 0)
            started = i;
        else
            break;
    for (int i = started + 1; i < num_threads; i++) run_range(&jobs[i]); /* a thread did not start */
    run_range(&jobs[0]);
    for (int i = 1; i <= started; i++) pthread_join(threads[i], NULL);
    return 0;
}

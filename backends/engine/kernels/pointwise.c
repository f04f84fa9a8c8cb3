/* The decoder's per-token ops fused into one pass each, for the CPU: the gated activation (SiLU(gate) * up),
 * the residual add with the RMSNorm after it, and rotary embeddings applied in place.
 *
 * Run one torch op at a time, each of these reads and writes its whole tensor several times (silu, then
 * mul; pow, mean, rsqrt, mul, mul and two casts; neg, cat, two muls and an add per tensor), and on a
 * prefill chunk of 2,048 tokens those tensors are megabytes: memory traffic, not arithmetic. Here every
 * row is read once and written once while it sits in cache.
 *
 * Tensors are fp32 or bf16 (is_bf16), contiguous rows. bf16 results are rounded where torch rounds them
 * (each op's output), so a bf16 model's outputs are those of the torch ops it replaces up to the order of
 * one sum; fp32 results differ from torch's by float rounding only (a sum's order, a fused multiply-add).
 * Rows are split over num_threads pthreads when there are enough of them to pay for the threads.
 *
 * Built on first use by backends/engine/kernels/cpu_pointwise.py with the host compiler; the torch modules
 * in layers/ are the reference these are tested against and the fallback where no compiler exists.
 */
#include <math.h>
#include <pthread.h>
#ifdef _OPENMP
#include <omp.h>
#endif
#include <stdint.h>
#include <string.h>

#define MAX_THREADS 64
#define MIN_ELEMENTS_PER_THREAD 131072 /* below this a thread costs more than it saves */
#define CHUNK 256

static inline float bf16_to_f32(uint16_t x) {
    uint32_t bits = (uint32_t)x << 16;
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

static inline uint16_t f32_to_bf16(float f) { /* round to nearest even, as torch does; branch-free */
    uint32_t bits;
    memcpy(&bits, &f, 4);
    const uint32_t rounded = bits + 0x7fffu + ((bits >> 16) & 1u);
    return (uint16_t)(((bits & 0x7f800000u) == 0x7f800000u ? bits : rounded) >> 16); /* inf / nan kept */
}

static inline float round_bf16(float f) { return bf16_to_f32(f32_to_bf16(f)); }

/* e^x to about 1 ulp over the range SiLU needs, branch-free so loops over it vectorise: x = n ln2 + r with
 * |r| <= ln2 / 2, e^r by Cephes' polynomial, 2^n built in the exponent bits. */
static inline float exp_approx(float x) {
    x = x > 88.0f ? 88.0f : (x < -87.0f ? -87.0f : x);
    const float n = floorf(x * 1.44269504088896341f + 0.5f);
    float r = x - n * 0.693359375f;
    r = r - n * -2.12194440e-4f;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * r * r + r + 1.0f;
    const uint32_t bits = (uint32_t)((int32_t)n + 127) << 23;
    float scale;
    memcpy(&scale, &bits, 4);
    return p * scale;
}

/* ---- a row-parallel loop ---- */

typedef void (*RowFn)(const void *args, int64_t begin, int64_t end);

typedef struct {
    RowFn fn;
    const void *args;
    int64_t begin, end;
} Span;

static void *run_span(void *p) {
    const Span *s = (const Span *)p;
    s->fn(s->args, s->begin, s->end);
    return NULL;
}

static void parallel_rows(RowFn fn, const void *args, int64_t rows, int64_t row_elements, int num_threads) {
    int64_t useful = rows * row_elements / MIN_ELEMENTS_PER_THREAD;
    if (num_threads > MAX_THREADS) num_threads = MAX_THREADS;
    if ((int64_t)num_threads > useful) num_threads = (int)useful;
    if ((int64_t)num_threads > rows) num_threads = (int)rows;
    if (num_threads <= 1) {
        fn(args, 0, rows);
        return;
    }
#ifdef _OPENMP /* torch's own OpenMP pool (the process has one libgomp): no thread to start, none to fight */
#pragma omp parallel num_threads(num_threads)
    {
        const int i = omp_get_thread_num(), n = omp_get_num_threads();
        fn(args, rows * i / n, rows * (i + 1) / n);
    }
    return;
#endif
    Span spans[MAX_THREADS];
    pthread_t threads[MAX_THREADS];
    int started = 0;
    for (int i = 0; i < num_threads; i++) {
        spans[i] = (Span){fn, args, rows * i / num_threads, rows * (i + 1) / num_threads};
    }
    for (int i = 1; i < num_threads; i++)
        if (pthread_create(&threads[i], NULL, run_span, &spans[i]) == 0)
            started = i;
        else
            break;
    for (int i = started + 1; i < num_threads; i++) run_span(&spans[i]); /* a thread did not start */
    run_span(&spans[0]);
    for (int i = 1; i <= started; i++) pthread_join(threads[i], NULL);
}

/* ---- SiLU(gate) * up ---- */

typedef struct {
    const void *x;
    void *out;
    int64_t inner;
    int is_bf16;
} GatedArgs;

static void silu_and_mul_rows(const void *p, int64_t begin, int64_t end) {
    const GatedArgs *a = (const GatedArgs *)p;
    const int64_t n = a->inner;
    for (int64_t r = begin; r < end; r++) {
        if (a->is_bf16) { /* through float chunks, so each loop is one the compiler vectorises */
            const uint16_t *gate = (const uint16_t *)a->x + r * 2 * n, *up = gate + n;
            uint16_t *out = (uint16_t *)a->out + r * n;
            for (int64_t at = 0; at < n; at += CHUNK) {
                const int64_t m = n - at < CHUNK ? n - at : CHUNK;
                float g[CHUNK], s[CHUNK];
                for (int64_t i = 0; i < m; i++) g[i] = bf16_to_f32(gate[at + i]);
                for (int64_t i = 0; i < m; i++) s[i] = g[i] / (1.0f + exp_approx(-g[i]));
                for (int64_t i = 0; i < m; i++) s[i] = round_bf16(s[i]) * bf16_to_f32(up[at + i]); /* torch rounds silu's output */
                for (int64_t i = 0; i < m; i++) out[at + i] = f32_to_bf16(s[i]);
            }
        } else {
            const float *gate = (const float *)a->x + r * 2 * n, *up = gate + n;
            float *out = (float *)a->out + r * n;
            for (int64_t i = 0; i < n; i++) {
                const float g = gate[i];
                out[i] = g / (1.0f + exp_approx(-g)) * up[i];
            }
        }
    }
}

/* x: [rows, 2 * inner] (gate | up); out: [rows, inner]. */
int silu_and_mul(const void *x, void *out, int64_t rows, int64_t inner, int is_bf16, int num_threads) {
    if (rows < 0 || inner <= 0) return -1;
    const GatedArgs a = {x, out, inner, is_bf16};
    parallel_rows(silu_and_mul_rows, &a, rows, 3 * inner, num_threads);
    return 0;
}

/* ---- (residual +=) x; out = RMSNorm(residual or x) * weight ---- */

typedef struct {
    const void *x;
    void *residual;
    const void *weight;
    void *out;
    int64_t hidden;
    float eps;
    int is_bf16;
} NormArgs;

static void rms_norm_rows(const void *p, int64_t begin, int64_t end) {
    const NormArgs *a = (const NormArgs *)p;
    const int64_t n = a->hidden;
    float h[8192];
    for (int64_t r = begin; r < end; r++) {
        if (a->is_bf16) {
            const uint16_t *x = (const uint16_t *)a->x + r * n;
            uint16_t *res = a->residual ? (uint16_t *)a->residual + r * n : NULL;
            for (int64_t i = 0; i < n; i++) h[i] = bf16_to_f32(x[i]);
            if (res)
                for (int64_t i = 0; i < n; i++) {
                    const uint16_t sum = f32_to_bf16(h[i] + bf16_to_f32(res[i])); /* the residual stream is bf16 */
                    res[i] = sum;
                    h[i] = bf16_to_f32(sum);
                }
        } else {
            const float *x = (const float *)a->x + r * n;
            float *res = a->residual ? (float *)a->residual + r * n : NULL;
            if (res)
                for (int64_t i = 0; i < n; i++) h[i] = res[i] = x[i] + res[i];
            else
                for (int64_t i = 0; i < n; i++) h[i] = x[i];
        }
        float sum_sq = 0.0f;
        for (int64_t i = 0; i < n; i++) sum_sq += h[i] * h[i];
        const float inv = 1.0f / sqrtf(sum_sq / (float)n + a->eps);
        if (a->is_bf16) { /* Llama's order: normalise in fp32, cast, then times the bf16 weight */
            const uint16_t *w = (const uint16_t *)a->weight;
            uint16_t *out = (uint16_t *)a->out + r * n;
            for (int64_t i = 0; i < n; i++) out[i] = f32_to_bf16(bf16_to_f32(w[i]) * round_bf16(h[i] * inv));
        } else {
            const float *w = (const float *)a->weight;
            float *out = (float *)a->out + r * n;
            for (int64_t i = 0; i < n; i++) out[i] = w[i] * (h[i] * inv);
        }
    }
}

/* x, out: [rows, hidden]; residual (may be NULL): [rows, hidden], updated in place to residual + x, which
 * is then what is normalised; weight: [hidden] in the same dtype. */
int rms_norm(const void *x, void *residual, const void *weight, void *out, int64_t rows, int64_t hidden,
             float eps, int is_bf16, int num_threads) {
    if (rows < 0 || hidden <= 0 || hidden > 8192) return -1;
    const NormArgs a = {x, residual, weight, out, hidden, eps, is_bf16};
    parallel_rows(rms_norm_rows, &a, rows, 3 * hidden, num_threads);
    return 0;
}

/* ---- rotary embeddings, "rotate half" layout, in place ---- */

typedef struct {
    void *x;
    const int64_t *positions;
    const void *cos, *sin;
    int64_t row_stride, num_heads, head_dim;
    int is_bf16;
} RotaryArgs;

static void rotary_rows(const void *p, int64_t begin, int64_t end) {
    const RotaryArgs *a = (const RotaryArgs *)p;
    const int64_t d = a->head_dim, half = d / 2;
    float c[512], s[512]; /* cos and sin of one position */
    for (int64_t t = begin; t < end; t++) {
        const int64_t at = a->positions[t] * d;
        if (a->is_bf16)
            for (int64_t i = 0; i < d; i++) {
                c[i] = bf16_to_f32(((const uint16_t *)a->cos)[at + i]);
                s[i] = bf16_to_f32(((const uint16_t *)a->sin)[at + i]);
            }
        else
            for (int64_t i = 0; i < d; i++) {
                c[i] = ((const float *)a->cos)[at + i];
                s[i] = ((const float *)a->sin)[at + i];
            }
        for (int64_t h = 0; h < a->num_heads; h++) {
            if (a->is_bf16) {
                uint16_t *x = (uint16_t *)a->x + t * a->row_stride + h * d;
                for (int64_t i = 0; i < half; i++) {
                    const float x1 = bf16_to_f32(x[i]), x2 = bf16_to_f32(x[i + half]);
                    const float lo = round_bf16(x1 * c[i]) + round_bf16(-x2 * s[i]);
                    const float hi = round_bf16(x2 * c[i + half]) + round_bf16(x1 * s[i + half]);
                    x[i] = f32_to_bf16(lo);
                    x[i + half] = f32_to_bf16(hi);
                }
            } else {
                float *x = (float *)a->x + t * a->row_stride + h * d;
                for (int64_t i = 0; i < half; i++) {
                    const float x1 = x[i], x2 = x[i + half];
                    x[i] = x1 * c[i] - x2 * s[i];
                    x[i + half] = x2 * c[i + half] + x1 * s[i + half];
                }
            }
        }
    }
}

/* x: rows of row_stride elements, the first num_heads * head_dim of each rotated in place (q then k of a
 * fused qkv output); positions: int64 [rows]; cos, sin: [max_position, head_dim] in x's dtype. */
int rotary(void *x, const int64_t *positions, const void *cos, const void *sin, int64_t rows,
           int64_t row_stride, int64_t num_heads, int64_t head_dim, int is_bf16, int num_threads) {
    if (rows < 0 || head_dim <= 0 || head_dim % 2 || head_dim > 512 || num_heads * head_dim > row_stride)
        return -1;
    const RotaryArgs a = {x, positions, cos, sin, row_stride, num_heads, head_dim, is_bf16};
    parallel_rows(rotary_rows, &a, rows, 2 * num_heads * head_dim, num_threads);
    return 0;
}

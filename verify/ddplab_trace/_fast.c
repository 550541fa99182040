/* The recorder's per-step passes over a small CPU model's tensors, read where they are (no copies), one call per
 * kind of tensor: the fold64 digest, the weighted sums S, A, Q, the NaN/inf and all-zero flags and the sample.
 * fast.py compiles it once per machine with the system's C compiler and calls it through ctypes; without a
 * compiler the recorder takes the same values with numpy (flat.py). docs/trace_format.md defines each value;
 * tests/ddp_check/digest.py checks these against the numpy and torch ones. C99 with GCC's vector types (GCC or Clang), no library. */
#include <immintrin.h>
#include <stdint.h>
#include <string.h>

#define COLUMNS 1021 /* fold64's columns and the weighted sums' weights (digests.py _FOLD_COLUMNS, WSUM_COLUMNS) */
#define POLY 0xedb88320u /* zlib's CRC-32, reflected */

enum { DIGEST = 1, WSUM = 2, ABSOLUTE = 4, FLAGS = 8 };
enum { FINITE = 1, ZERO = 2 };

typedef double v4d __attribute__((vector_size(32)));   /* GCC's and Clang's vectors: SSE2 pairs on any x86-64 */
typedef uint64_t v4u __attribute__((vector_size(32)));

static uint32_t crc_table[8][256];
static int have_clmul; /* PCLMULQDQ and SSE4.1, as this processor says */

/* Whether crc_update takes PCLMULQDQ (on: where the processor has it); returns whether it did (for the tests). */
int ddplab_fast_clmul(int on) {
  int was = have_clmul;
  have_clmul = on && __builtin_cpu_supports("pclmul") && __builtin_cpu_supports("sse4.1");
  return was;
}
static double weights[COLUMNS + 3]; /* (+3: a row's last four-lane load reads past its 1021st, unused) */

void ddplab_fast_init(void) {
  for (uint32_t n = 0; n < 256; n++) {
    uint32_t c = n;
    for (int k = 0; k < 8; k++) c = c & 1 ? (c >> 1) ^ POLY : c >> 1;
    crc_table[0][n] = c;
  }
  for (int t = 1; t < 8; t++)
    for (int n = 0; n < 256; n++) crc_table[t][n] = (crc_table[t - 1][n] >> 8) ^ crc_table[0][crc_table[t - 1][n] & 0xff];
  ddplab_fast_clmul(1);
  for (uint64_t j = 0; j < COLUMNS; j++)  /* w_j = 1 + ((j * 2654435761) mod 2^20) / 2^20: exact in float64 */
    weights[j] = 1.0 + (double)((j * 2654435761u) % (1u << 20)) / (double)(1u << 20);
}

/* CRC-32 register (not inverted) over `len` bytes, eight at a time. */
static uint32_t crc_bytes(uint32_t c, const unsigned char* p, size_t len) {
  while (len >= 8) {
    uint32_t lo, hi;
    memcpy(&lo, p, 4);
    memcpy(&hi, p + 4, 4);
    lo ^= c;
    c = crc_table[7][lo & 0xff] ^ crc_table[6][(lo >> 8) & 0xff] ^ crc_table[5][(lo >> 16) & 0xff] ^
        crc_table[4][lo >> 24] ^ crc_table[3][hi & 0xff] ^ crc_table[2][(hi >> 8) & 0xff] ^
        crc_table[1][(hi >> 16) & 0xff] ^ crc_table[0][hi >> 24];
    p += 8;
    len -= 8;
  }
  while (len--) c = (c >> 8) ^ crc_table[0][(c ^ *p++) & 0xff];
  return c;
}

/* The same register over len bytes (len >= 64, a multiple of 16) by carry-less multiplication (PCLMULQDQ):
 * four 128-bit lanes folded 64 bytes a time, then into one, then reduced to 32 bits (Barrett). The constants are
 * powers of x modulo the polynomial (x^(4*128+32), x^(4*128-32), x^(128+32), x^(128-32), x^64) and the
 * polynomial with its Barrett quotient, bit-reflected. tests/ddp_check/digest.py checks it against zlib's. */
__attribute__((target("pclmul,sse4.1")))
static uint32_t crc_clmul(uint32_t crc, const unsigned char* p, size_t len) {
  const __m128i k1k2 = _mm_set_epi64x(0x01c6e41596ll, 0x0154442bd4ll);
  const __m128i k3k4 = _mm_set_epi64x(0x00ccaa009ell, 0x01751997d0ll);
  const __m128i k5k0 = _mm_set_epi64x(0, 0x0163cd6124ll);
  const __m128i poly = _mm_set_epi64x(0x01f7011641ll, 0x01db710641ll);
  __m128i x0, x1, x2, x3, y;
  x0 = _mm_loadu_si128((const __m128i*)p);
  x1 = _mm_loadu_si128((const __m128i*)(p + 16));
  x2 = _mm_loadu_si128((const __m128i*)(p + 32));
  x3 = _mm_loadu_si128((const __m128i*)(p + 48));
  x0 = _mm_xor_si128(x0, _mm_cvtsi32_si128((int)crc));
  p += 64; len -= 64;
  while (len >= 64) {
    __m128i t0 = _mm_clmulepi64_si128(x0, k1k2, 0x00), t1 = _mm_clmulepi64_si128(x1, k1k2, 0x00);
    __m128i t2 = _mm_clmulepi64_si128(x2, k1k2, 0x00), t3 = _mm_clmulepi64_si128(x3, k1k2, 0x00);
    x0 = _mm_clmulepi64_si128(x0, k1k2, 0x11); x1 = _mm_clmulepi64_si128(x1, k1k2, 0x11);
    x2 = _mm_clmulepi64_si128(x2, k1k2, 0x11); x3 = _mm_clmulepi64_si128(x3, k1k2, 0x11);
    x0 = _mm_xor_si128(_mm_xor_si128(x0, t0), _mm_loadu_si128((const __m128i*)p));
    x1 = _mm_xor_si128(_mm_xor_si128(x1, t1), _mm_loadu_si128((const __m128i*)(p + 16)));
    x2 = _mm_xor_si128(_mm_xor_si128(x2, t2), _mm_loadu_si128((const __m128i*)(p + 32)));
    x3 = _mm_xor_si128(_mm_xor_si128(x3, t3), _mm_loadu_si128((const __m128i*)(p + 48)));
    p += 64; len -= 64;
  }
  /* fold 4 into 1 */
  y = _mm_clmulepi64_si128(x0, k3k4, 0x00); x0 = _mm_clmulepi64_si128(x0, k3k4, 0x11);
  x0 = _mm_xor_si128(_mm_xor_si128(x0, y), x1);
  y = _mm_clmulepi64_si128(x0, k3k4, 0x00); x0 = _mm_clmulepi64_si128(x0, k3k4, 0x11);
  x0 = _mm_xor_si128(_mm_xor_si128(x0, y), x2);
  y = _mm_clmulepi64_si128(x0, k3k4, 0x00); x0 = _mm_clmulepi64_si128(x0, k3k4, 0x11);
  x0 = _mm_xor_si128(_mm_xor_si128(x0, y), x3);
  while (len >= 16) {
    y = _mm_clmulepi64_si128(x0, k3k4, 0x00); x0 = _mm_clmulepi64_si128(x0, k3k4, 0x11);
    x0 = _mm_xor_si128(_mm_xor_si128(x0, y), _mm_loadu_si128((const __m128i*)p));
    p += 16; len -= 16;
  }
  /* 128 -> 64 bits */
  const __m128i mask32 = _mm_setr_epi32(~0, 0, ~0, 0);
  y = _mm_clmulepi64_si128(x0, k3k4, 0x10);
  x0 = _mm_xor_si128(_mm_srli_si128(x0, 8), y);
  y = _mm_srli_si128(x0, 4);
  x0 = _mm_and_si128(x0, mask32);
  x0 = _mm_clmulepi64_si128(x0, k5k0, 0x00);
  x0 = _mm_xor_si128(x0, y);
  /* Barrett reduction */
  y = _mm_and_si128(x0, mask32);
  y = _mm_clmulepi64_si128(y, poly, 0x10);
  y = _mm_and_si128(y, mask32);
  y = _mm_clmulepi64_si128(y, poly, 0x00);
  x0 = _mm_xor_si128(x0, y);
  return (uint32_t)_mm_extract_epi32(x0, 1);
}

/* The CRC register over len bytes: PCLMULQDQ where the processor has it for all but the last len % 16 bytes. */
static uint32_t crc_update(uint32_t c, const unsigned char* p, size_t len) {
  if (have_clmul && len >= 64) {
    size_t head = len & ~(size_t)15;
    c = crc_clmul(c, p, head);
    p += head;
    len -= head;
  }
  return crc_bytes(c, p, len);
}

/* a * b modulo the CRC polynomial, both reflected (bit 31 is x^0). */
static uint32_t mulmod(uint32_t a, uint32_t b) {
  uint32_t p = 0;
  for (uint32_t m = 1u << 31; m; m >>= 1) {
    if (a & m) p ^= b;
    b = b & 1 ? (b >> 1) ^ POLY : b >> 1;
  }
  return p;
}

/* x^(8 * bytes) modulo the polynomial: what `bytes` zero bytes do to a CRC register (reg -> mulmod(op, reg)).
 * A tensor of fewer than 1021 words leaves the rest of its sums zero: its CRC skips them this way. */
uint32_t ddplab_fast_zeros(int64_t bytes) {
  uint32_t op = 1u << 31, sq = 1u << 30; /* x^0, and x^1 to be squared up */
  uint64_t bits = (uint64_t)bytes * 8;
  while (bits) {
    if (bits & 1) op = mulmod(op, sq);
    sq = mulmod(sq, sq);
    bits >>= 1;
  }
  return op;
}

static uint32_t word_lo(const unsigned char* p) { uint32_t v; memcpy(&v, p, 4); return v; }

/* One tensor of n float32 at p (any alignment: a bucket view may start at an odd float). DIGEST: its fold64 sums
 * into sums[0..1020] (the CRC is taken when asked for, ddplab_fast_crc: an equality needs only the sums). */
__attribute__((target_clones("avx2", "default")))
static void one(const unsigned char* p, int64_t n, int mode, uint64_t* sums, double* ws, uint8_t* flags) {
  if (mode & DIGEST) {
    int64_t words = n / 2;
    memset(sums, 0, COLUMNS * sizeof *sums);
    int64_t j = 0;
    for (; j + COLUMNS <= words; j += COLUMNS) /* a row of 1021 words a time: wraps modulo 2^64 */
      for (int c = 0; c < COLUMNS; c++) {
        uint64_t w;
        memcpy(&w, p + 8 * (j + c), 8);
        sums[c] += w;
      }
    for (int c = 0; j + c < words; c++) {
      uint64_t w;
      memcpy(&w, p + 8 * (j + c), 8);
      sums[c] += w;
    }
    if (n % 2) sums[words % COLUMNS] += word_lo(p + 4 * (n - 1)); /* a last odd float is a word's low half */
  }
  if (mode & WSUM) {
    /* S = sum_k w_(k mod 1021) x_k, A likewise of |x_k|, Q = sum_k x_k^2, in float64, each in four lanes (an
     * order of additions of its own: ddp_check's bound holds for any order, src/check/replay/wsum_check.cc). */
    v4d s = {0, 0, 0, 0}, a = s, q = s;
    const v4d sign = {-0.0, -0.0, -0.0, -0.0};
    double s1 = 0, a1 = 0, q1 = 0;
    for (int64_t k = 0; k < n; k += COLUMNS) {
      int64_t m = n - k < COLUMNS ? n - k : COLUMNS, c = 0;
      const unsigned char* row = p + 4 * k;
      for (; c + 4 <= m; c += 4) {
        float f[4];
        memcpy(f, row + 4 * c, 16);
        v4d x = {f[0], f[1], f[2], f[3]}, w;
        memcpy(&w, weights + c, sizeof w);
        v4d ax = (v4d)((v4u)x & ~(v4u)sign);
        s += w * x;
        a += w * ax;
        q += x * x;
      }
      for (; c < m; c++) {
        float f;
        memcpy(&f, row + 4 * c, 4);
        double x = f;
        s1 += weights[c] * x;
        a1 += weights[c] * (x < 0 ? -x : x);
        q1 += x * x;
      }
    }
    ws[0] = (s[0] + s[1]) + (s[2] + s[3]) + s1;
    ws[1] = (mode & ABSOLUTE) ? (a[0] + a[1]) + (a[2] + a[3]) + a1 : __builtin_nan("");
    ws[2] = (q[0] + q[1]) + (q[2] + q[3]) + q1;
  }
  if (mode & FLAGS) { /* finite: no exponent all ones; zero: every bit zero */
    uint32_t any = 0, bad = 0;
    for (int64_t k = 0; k < n; k++) {
      uint32_t u = word_lo(p + 4 * k);
      any |= u;
      bad |= (uint32_t)((u & 0x7f800000u) == 0x7f800000u);
    }
    *flags = (uint8_t)((bad ? 0 : FINITE) | (any ? 0 : ZERO));
  }
}

/* Every parameter i with ptrs[i] set: the values `mode` asks for into sums[1021 i..], ws[3i..3i+2], flags[i];
 * and each sample slot s whose owner's tensor is given, vals[s] = that tensor's element off[s]. */
void ddplab_fast_pass(int nparams, void* const* ptrs, const int64_t* sizes, int mode, uint64_t* sums, double* ws,
                      uint8_t* flags, int nslots, const int32_t* owner, const int64_t* off, float* vals) {
  for (int i = 0; i < nparams; i++)
    if (ptrs[i]) one((const unsigned char*)ptrs[i], sizes[i], mode, sums + (int64_t)COLUMNS * i, ws + 3 * i, flags + i);
  for (int s = 0; s < nslots; s++) {
    const unsigned char* p = (const unsigned char*)ptrs[owner[s]];
    if (p) memcpy(vals + s, p + 4 * off[s], 4);
  }
}

/* digest[i] = the fold64 digest from sums[1021 i..] of each parameter i present: zlib's CRC-32 of the 1021 sums
 * as little-endian bytes (the zero sums past a small tensor's words by zeros_ops[i], ddplab_fast_zeros). */
void ddplab_fast_crc(int nparams, const uint8_t* present, const int64_t* sizes, const uint32_t* zeros_ops,
                     const uint64_t* sums, uint32_t* digest) {
  for (int i = 0; i < nparams; i++) {
    if (!present[i]) continue;
    int64_t used = (sizes[i] + 1) / 2 < COLUMNS ? (sizes[i] + 1) / 2 : COLUMNS;
    uint32_t c = crc_update(0xffffffffu, (const unsigned char*)(sums + (int64_t)COLUMNS * i), 8 * (size_t)used);
    if (used < COLUMNS) c = mulmod(zeros_ops[i], c);
    digest[i] = c ^ 0xffffffffu;
  }
}

/* Whether the parameters present in a are those present in b, with the same fold64 sums (every bit the same, but
 * for a change the sums cannot see: one that adds a multiple of 2^64 to a column). */
int ddplab_fast_same(int nparams, const uint8_t* present_a, const uint8_t* present_b, const uint64_t* sums_a,
                     const uint64_t* sums_b) {
  for (int i = 0; i < nparams; i++) {
    if (present_a[i] != present_b[i]) return 0;
    if (present_a[i] && memcmp(sums_a + (int64_t)COLUMNS * i, sums_b + (int64_t)COLUMNS * i, COLUMNS * 8)) return 0;
  }
  return 1;
}

/* The sample's slots of `step` (sample.py): slot k is element ((step * nslots + k) * mult) mod total of the
 * parameters laid end to end (plain[i]: parameter i's first element), i.e. element off[k] of parameter owner[k]. */
void ddplab_fast_slots(int64_t step, int64_t total, int nparams, const int64_t* plain, int nslots, uint64_t mult,
                       int32_t* owner, int64_t* off) {
  for (int k = 0; k < nslots; k++) {
    unsigned __int128 x = ((unsigned __int128)((uint64_t)step * (uint64_t)nslots + (uint64_t)k)) * mult;
    int64_t flat = (int64_t)(x % (unsigned __int128)total);
    int lo = 0, hi = nparams - 1; /* the last parameter starting at or before it */
    while (lo < hi) {
      int mid = (lo + hi + 1) / 2;
      if (plain[mid] <= flat) lo = mid; else hi = mid - 1;
    }
    owner[k] = lo;
    off[k] = flat - plain[lo];
  }
}

/* ---- A batch's per-sample fingerprints: the first 8 bytes of BLAKE2b-512 (RFC 7693) of each sample's bytes ---- */

static const uint64_t blake_iv[8] = {0x6a09e667f3bcc908ull, 0xbb67ae8584caa73bull, 0x3c6ef372fe94f82bull,
                                     0xa54ff53a5f1d36f1ull, 0x510e527fade682d1ull, 0x9b05688c2b3e6c1full,
                                     0x1f83d9abfb41bd6bull, 0x5be0cd19137e2179ull};
static const unsigned char blake_sigma[12][16] = {
    {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15}, {14, 10, 4, 8, 9, 15, 13, 6, 1, 12, 0, 2, 11, 7, 5, 3},
    {11, 8, 12, 0, 5, 2, 15, 13, 10, 14, 3, 6, 7, 1, 9, 4}, {7, 9, 3, 1, 13, 12, 11, 14, 2, 6, 5, 10, 4, 0, 15, 8},
    {9, 0, 5, 7, 2, 4, 10, 15, 14, 1, 11, 12, 6, 8, 3, 13}, {2, 12, 6, 10, 0, 11, 8, 3, 4, 13, 7, 5, 15, 14, 1, 9},
    {12, 5, 1, 15, 14, 13, 4, 10, 0, 7, 6, 3, 9, 2, 8, 11}, {13, 11, 7, 14, 12, 1, 3, 9, 5, 0, 15, 4, 8, 6, 2, 10},
    {6, 15, 14, 9, 11, 3, 0, 8, 12, 2, 13, 7, 1, 4, 10, 5}, {10, 2, 8, 4, 7, 6, 1, 5, 15, 11, 9, 14, 3, 12, 13, 0},
    {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15}, {14, 10, 4, 8, 9, 15, 13, 6, 1, 12, 0, 2, 11, 7, 5, 3}};

static uint64_t rotr(uint64_t x, int r) { return (x >> r) | (x << (64 - r)); }

#define G(a, b, c, d, x, y)                       \
  do {                                            \
    v[a] = v[a] + v[b] + (x); v[d] = rotr(v[d] ^ v[a], 32); \
    v[c] = v[c] + v[d]; v[b] = rotr(v[b] ^ v[c], 24);       \
    v[a] = v[a] + v[b] + (y); v[d] = rotr(v[d] ^ v[a], 16); \
    v[c] = v[c] + v[d]; v[b] = rotr(v[b] ^ v[c], 63);       \
  } while (0)

static void blake_compress(uint64_t h[8], const unsigned char block[128], uint64_t t, int last) {
  uint64_t m[16], v[16];
  for (int i = 0; i < 16; i++) {
    uint64_t w = 0;
    for (int b = 7; b >= 0; b--) w = (w << 8) | block[8 * i + b]; /* little-endian words */
    m[i] = w;
  }
  for (int i = 0; i < 8; i++) v[i] = h[i], v[i + 8] = blake_iv[i];
  v[12] ^= t;  /* the byte count so far (below 2^64: the high word stays zero) */
  if (last) v[14] = ~v[14];
  for (int r = 0; r < 12; r++) {
    const unsigned char* s = blake_sigma[r];
    G(0, 4, 8, 12, m[s[0]], m[s[1]]);
    G(1, 5, 9, 13, m[s[2]], m[s[3]]);
    G(2, 6, 10, 14, m[s[4]], m[s[5]]);
    G(3, 7, 11, 15, m[s[6]], m[s[7]]);
    G(0, 5, 10, 15, m[s[8]], m[s[9]]);
    G(1, 6, 11, 12, m[s[10]], m[s[11]]);
    G(2, 7, 8, 13, m[s[12]], m[s[13]]);
    G(3, 4, 9, 14, m[s[14]], m[s[15]]);
  }
  for (int i = 0; i < 8; i++) h[i] ^= v[i] ^ v[i + 8];
}

/* out[0..7]: the first 8 bytes of BLAKE2b with a 64-byte digest, no key, of p[0..len). */
static void blake2b_8(const unsigned char* p, int64_t len, unsigned char out[8]) {
  uint64_t h[8];
  unsigned char block[128];
  memcpy(h, blake_iv, sizeof h);
  h[0] ^= 0x01010000ull ^ 64; /* digest length 64, key length 0, fanout 1, depth 1 */
  uint64_t t = 0;
  while (len > 128) {
    t += 128;
    blake_compress(h, p, t, 0);
    p += 128;
    len -= 128;
  }
  memset(block, 0, sizeof block);
  memcpy(block, p, (size_t)len);
  blake_compress(h, block, t + (uint64_t)len, 1);
  for (int b = 0; b < 8; b++) out[b] = (unsigned char)(h[0] >> (8 * b));
}

/* A batch of `rows` samples of `row_bytes` bytes each at p: each sample's fingerprint into out[8 * row]; returns
 * whether every element is finite when the batch is float32 (is_f32), else 1. */
int ddplab_fast_batch(const void* p, int64_t rows, int64_t row_bytes, int is_f32, unsigned char* out) {
  const unsigned char* b = (const unsigned char*)p;
  for (int64_t r = 0; r < rows; r++) blake2b_8(b + r * row_bytes, row_bytes, out + 8 * r);
  if (!is_f32) return 1;
  uint32_t bad = 0;
  for (int64_t k = 0; k < rows * row_bytes / 4; k++) bad |= (uint32_t)((word_lo(b + 4 * k) & 0x7f800000u) == 0x7f800000u);
  return !bad;
}

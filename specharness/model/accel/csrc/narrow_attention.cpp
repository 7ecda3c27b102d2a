// Attention of a few to 64 query positions over a bfloat16 K/V cache, on AVX-512 and AMX
// (specharness/narrow_attention.py).
//
// Why: a verification forward over 2-8 positions spent most of its extra cost over a one-position
// step in SDPA's CPU flash kernel, whose small GEMMs go through oneDNN calls per block (~50 us per
// layer for 24 query rows over 288 slots, and more when the cache is cold behind the layer's
// weights). Here each unit (one key/value head, a chunk of its slots) gathers its keys into the
// bfloat16 pair layout once, takes the scores, the softmax in float32 and the weighted sum, and the
// chunks' partial results are merged per row. Two paths, chosen by the caller:
// - attend_chunk (AVX512-BF16): scores by the bfloat16 dot-product instruction, the weighted sum by
//   register-blocked float32 FMAs; probabilities stay float32. Best for a few rows.
// - attend_chunk_amx: both products on AMX tiles, probabilities rounded to bfloat16 (as SDPA
//   rounds them), the chunk's keys and values prefetched at once. Past ~8 rows the FMAs of the
//   weighted sum were most of the other path's time.
//
// Layout: q [Hkv, R, d] bfloat16, contiguous, the R = g*T query rows of each key/value head (g
// query heads of T positions, head-major); caches [Hkv, L, d] bfloat16, contiguous; bias [T, n]
// bfloat16 (the engine's, made once per forward), the additive mask (0 or -inf) of position
// t = row % T over the first n slots. Returns [Hkv, R, d] float32.
#include <ATen/ATen.h>
#include <torch/library.h>
#include <ATen/Parallel.h>
#include <ATen/cpu/Utils.h>
#include <immintrin.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <numeric>
#include <vector>

namespace {

inline __m512 widen_bf16(__m256i h) { return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16)); }

inline __m512 load_bf16(const at::BFloat16* p) { return widen_bf16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))); }

inline __m512 load_bf16(__mmask16 live, const at::BFloat16* p) { return widen_bf16(_mm256_maskz_loadu_epi16(live, p)); }

// the lanes of the 16 slots from j that lie before m
inline __mmask16 tail_mask(int64_t j, int64_t m) {
  return j + 16 <= m ? static_cast<__mmask16>(0xFFFF) : static_cast<__mmask16>((1u << (m - j)) - 1);
}

// exp(x) for x <= 0 (scores minus their row's max) as 2^n 2^f, n = round(x log2 e), |f| <= 1/2, 2^f by
// its Taylor series to degree 6 (relative error ~2e-7). Below x = -86.6 (2^-125) it gives exactly 0,
// masked lanes (-inf) included, and n is held at -125 there: every lane's result stays a normal
// float, for a denormal or underflowing result costs a microcode assist per instruction (a causal
// mask's -inf lanes made this kernel ~35 us a layer slower when n went lower)
inline __m512 exp_nonpositive(__m512 x) {
  __m512 t = _mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f));
  const __mmask16 live = _mm512_cmp_ps_mask(t, _mm512_set1_ps(-125.f), _CMP_GE_OQ);
  t = _mm512_max_ps(t, _mm512_set1_ps(-125.f));
  const __m512 n = _mm512_roundscale_ps(t, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m512 f = _mm512_sub_ps(t, n);
  __m512 p = _mm512_set1_ps(1.5403530393381609e-4f);            // (ln 2)^6 / 6!
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.3333558146428443e-3f));  // (ln 2)^5 / 5!
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(9.6181291076284772e-3f));  // (ln 2)^4 / 4!
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(5.5504108664821580e-2f));  // (ln 2)^3 / 3!
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(2.4022650695910071e-1f));  // (ln 2)^2 / 2!
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(6.9314718055994531e-1f));  // ln 2
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.0f));
  return _mm512_maskz_scalef_ps(live, p, n);
}

// One row's scores over m slots (a buffer of mpad): x = score * scale + bias, then e = exp(x - max),
// handed to store(j, e) for each 16 slots from j (0 past m and where masked); stats[0] = the max,
// stats[1] = the sum of the exponentials, which the chunks' merge needs. A row whose slots are all
// masked here stores zeros and gets max -inf.
template <class Store>
inline void softmax_row(float* sr, const at::BFloat16* br, int64_t m, int64_t mpad, float scale, float* stats, Store store) {
  const __m512 sc = _mm512_set1_ps(scale);
  __m512 mx = _mm512_set1_ps(-INFINITY);
  for (int64_t j = 0; j < mpad; j += 16) {
    const __mmask16 live = tail_mask(j, m);
    __m512 x = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(live, sr + j), sc, load_bf16(live, br + j));
    x = _mm512_mask_blend_ps(live, _mm512_set1_ps(-INFINITY), x);
    _mm512_storeu_ps(sr + j, x);
    mx = _mm512_max_ps(mx, x);
  }
  const float top = _mm512_reduce_max_ps(mx);
  stats[0] = top;
  if (top == -INFINITY) {  // every slot of this chunk masked for this row: it adds nothing
    for (int64_t j = 0; j < mpad; j += 16) store(j, _mm512_setzero_ps());
    stats[1] = 0.f;
    return;
  }
  __m512 sum = _mm512_setzero_ps();
  for (int64_t j = 0; j < mpad; j += 16) {
    const __m512 e = exp_nonpositive(_mm512_sub_ps(_mm512_loadu_ps(sr + j), _mm512_set1_ps(top)));
    store(j, e);
    sum = _mm512_add_ps(sum, e);
  }
  stats[1] = _mm512_reduce_add_ps(sum);
}

// Keys [m, d] transposed 16 slots at a time into kt [mpad/16][d/2][16] (int32 = one bfloat16 pair,
// zero past m): one gather of 16 pairs is one row of a block, the layout of both AVX512-BF16's dot
// product and AMX's B tiles, each 16 x 16 tile contiguous (a strided tile load of 16 rows would
// fall into two L1 sets when the chunk is a power of two long)
template <int d>
inline void gather_key_pairs(const at::BFloat16* k, int64_t m, int64_t mpad, int32_t* kt) {
  const __m512i idx = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                                         _mm512_set1_epi32(d / 2));
  for (int64_t j0 = 0; j0 < mpad; j0 += 16) {
    const __mmask16 live = tail_mask(j0, m);
    const int* base = reinterpret_cast<const int*>(k + j0 * d);
    for (int p = 0; p < d / 2; ++p)
      _mm512_storeu_si512(kt + (j0 * (d / 2) + p * 16), _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), live, idx, base + p, 4));
  }
}

// One unit: key/value head h, every query row, cache slots [c0, c1). Writes the unit's partial
// result for each row r to part[r * (d + 2) ...]: the weighted sum of its slots' values (not yet
// normalised), then the row's max score and sum of exponentials over these slots (merged below).
template <int DV>
void attend_chunk(const at::BFloat16* q, const at::BFloat16* k_cache, const at::BFloat16* v_cache,
                  const at::BFloat16* bias, float* part, int64_t R, int64_t L, int64_t n, int64_t T, int64_t h,
                  int64_t c0, int64_t c1, float scale, std::vector<float>& buf) {
  constexpr int d = DV * 16;
  constexpr int QR = 4, QV = 6;      // scores: 4 rows x 6 vectors of 16 slots per block (24 accumulators)
  constexpr int PR = 24 / DV;        // weighted sum: PR rows x DV vectors per block
  const int64_t m = c1 - c0, mpad = (m + 15) / 16 * 16, mv = mpad / 16;
  const int64_t rpad = (R + QR - 1) / QR * QR;
  if ((int64_t)buf.size() < (d / 2) * mpad + rpad * mpad) buf.resize((d / 2) * mpad + rpad * mpad);
  int32_t* kt = reinterpret_cast<int32_t*>(buf.data());  // [mpad/16][d/2][16] keys' bfloat16 pairs (zero past m)
  float* s = buf.data() + (d / 2) * mpad;                // [rpad][mpad] scores, then exponentials
  const at::BFloat16* k = k_cache + (h * L + c0) * d;
  const at::BFloat16* v = v_cache + (h * L + c0) * d;
  const int32_t* qpairs = reinterpret_cast<const int32_t*>(q + h * R * d);

  gather_key_pairs<d>(k, m, mpad, kt);

  for (int64_t r = 0; r < rpad; r += QR) {
    const int32_t* qr[QR];
    for (int i = 0; i < QR; ++i) qr[i] = qpairs + std::min<int64_t>(r + i, R - 1) * (d / 2);  // padding rows repeat the last
    for (int64_t c = 0; c < mv; c += QV) {
      const int cn = static_cast<int>(std::min<int64_t>(QV, mv - c));
      __m512 acc[QR][QV];
      for (int i = 0; i < QR; ++i) for (int j = 0; j < QV; ++j) acc[i][j] = _mm512_setzero_ps();
      for (int p = 0; p < d / 2; ++p) {
        __m512i kv[QV];
        for (int j = 0; j < QV; ++j) if (j < cn) kv[j] = _mm512_loadu_si512(kt + ((c + j) * (d / 2) + p) * 16);
        for (int i = 0; i < QR; ++i) {
          const __m512i qb = _mm512_set1_epi32(qr[i][p]);
          for (int j = 0; j < QV; ++j) if (j < cn) acc[i][j] = _mm512_dpbf16_ps(acc[i][j], (__m512bh)qb, (__m512bh)kv[j]);
        }
      }
      for (int i = 0; i < QR; ++i) for (int j = 0; j < QV; ++j) if (j < cn)
        _mm512_storeu_ps(s + (r + i) * mpad + (c + j) * 16, acc[i][j]);
    }
  }

  for (int64_t r = 0; r < R; ++r) {
    float* sr = s + r * mpad;
    softmax_row(sr, bias + (r % T) * n + c0, m, mpad, scale, part + r * (d + 2) + d,
                [sr](int64_t j, __m512 e) { _mm512_storeu_ps(sr + j, e); });
  }

  for (int64_t r = 0; r < R; r += PR) {
    const int rn = static_cast<int>(std::min<int64_t>(PR, R - r));
    __m512 acc[PR][DV];
    for (int i = 0; i < PR; ++i) for (int j = 0; j < DV; ++j) acc[i][j] = _mm512_setzero_ps();
    for (int64_t slot = 0; slot < m; ++slot) {
      __m512 vv[DV];
      for (int j = 0; j < DV; ++j) vv[j] = load_bf16(v + slot * d + j * 16);
      for (int i = 0; i < PR; ++i) if (i < rn) {
        const __m512 pb = _mm512_set1_ps(s[(r + i) * mpad + slot]);
        for (int j = 0; j < DV; ++j) acc[i][j] = _mm512_fmadd_ps(pb, vv[j], acc[i][j]);
      }
    }
    for (int i = 0; i < rn; ++i)
      for (int j = 0; j < DV; ++j) _mm512_storeu_ps(part + (r + i) * (d + 2) + j * 16, acc[i][j]);
  }
}

// AMX: the palette-1 tile configuration both products use, tiles 0-6 of 16 rows x 64 bytes: 0-3 C
// (16 rows of 16 floats), 4 A (16 rows of 32 bfloat16), 5-6 B (16 bfloat16 pairs of 16 columns).
// Inductor's GEMMs configure their own tiles at every call and release them after; so does this.
struct TileConfig {
  uint8_t palette_id = 1, start_row = 0, reserved[14] = {};
  uint16_t colsb[16] = {64, 64, 64, 64, 64, 64, 64};
  uint8_t rows[16] = {16, 16, 16, 16, 16, 16, 16};
};

// N (1-4) output tiles of 16 x 16 floats side by side, C_j = sum over ksteps of A_k B_jk: one A tile
// (16 rows of 32 bfloat16, advancing a_step bytes a step) shared by N B tiles (B_j at b + j * b_next,
// advancing b_step), so the N accumulations are independent and hide each other's latency. C_j is
// stored at c + j * 64 bytes, rows ldc bytes apart. Every argument is in bytes.
template <int N>
inline void tile_products(const char* a, int64_t lda, int64_t a_step, const char* b, int64_t ldb, int64_t b_step,
                          int64_t b_next, int64_t ksteps, char* c, int64_t ldc) {
  _tile_zero(0);
  if constexpr (N > 1) _tile_zero(1);
  if constexpr (N > 2) _tile_zero(2);
  if constexpr (N > 3) _tile_zero(3);
  for (int64_t k = 0; k < ksteps; ++k, a += a_step, b += b_step) {
    _tile_loadd(4, a, lda);
    _tile_loadd(5, b, ldb);
    _tile_dpbf16ps(0, 4, 5);
    if constexpr (N > 1) { _tile_loadd(6, b + b_next, ldb); _tile_dpbf16ps(1, 4, 6); }
    if constexpr (N > 2) { _tile_loadd(5, b + 2 * b_next, ldb); _tile_dpbf16ps(2, 4, 5); }
    if constexpr (N > 3) { _tile_loadd(6, b + 3 * b_next, ldb); _tile_dpbf16ps(3, 4, 6); }
  }
  _tile_stored(0, c, ldc);
  if constexpr (N > 1) _tile_stored(1, c + 64, ldc);
  if constexpr (N > 2) _tile_stored(2, c + 128, ldc);
  if constexpr (N > 3) _tile_stored(3, c + 192, ldc);
}

// cols output tiles (any number) in groups of up to 4
inline void tile_row(const char* a, int64_t lda, int64_t a_step, const char* b, int64_t ldb, int64_t b_step,
                     int64_t b_next, int64_t ksteps, char* c, int64_t ldc, int64_t cols) {
  for (int64_t j = 0; j < cols; j += 4, b += 4 * b_next, c += 256) {
    switch (std::min<int64_t>(4, cols - j)) {
      case 4: tile_products<4>(a, lda, a_step, b, ldb, b_step, b_next, ksteps, c, ldc); break;
      case 3: tile_products<3>(a, lda, a_step, b, ldb, b_step, b_next, ksteps, c, ldc); break;
      case 2: tile_products<2>(a, lda, a_step, b, ldb, b_step, b_next, ksteps, c, ldc); break;
      default: tile_products<1>(a, lda, a_step, b, ldb, b_step, b_next, ksteps, c, ldc);
    }
  }
}

// The same unit as attend_chunk with both products on AMX tiles: past a few positions the float32
// FMAs of the weighted sum were most of the kernel. Scores are taken over 16-row blocks of q
// (zero-padded to a multiple of 16) against the gathered key pairs; the softmax is softmax_row's,
// its probabilities rounded to bfloat16 (as SDPA's are) into P's A tiles, zero past m; the values
// are interleaved slot pair by slot pair into B tiles vt [d/16][m32/2][16] (zero past m, so padding
// multiplies zeros, never stale memory).
template <int DV>
void attend_chunk_amx(const at::BFloat16* q, const at::BFloat16* k_cache, const at::BFloat16* v_cache,
                      const at::BFloat16* bias, float* part, int64_t R, int64_t L, int64_t n, int64_t T, int64_t h,
                      int64_t c0, int64_t c1, float scale, std::vector<float>& buf) {
  constexpr int d = DV * 16;
  const int64_t m = c1 - c0, m16 = (m + 15) / 16 * 16, m32 = (m + 31) / 32 * 32, r16 = (R + 15) / 16 * 16;
  const int64_t need = (d / 2) * m16 + r16 * m16 + r16 * m32 / 2 + d * m32 / 2 + r16 * d / 2 + 16 * d;
  if ((int64_t)buf.size() < need) buf.resize(need);
  int32_t* kt = reinterpret_cast<int32_t*>(buf.data());                      // [m16/16][d/2][16] key pairs
  float* s = buf.data() + (d / 2) * m16;                                     // [r16][m16] scores, exponentials
  auto* pb = reinterpret_cast<at::BFloat16*>(s + r16 * m16);                 // [r16/16][m32/32][16][32] probabilities
  int32_t* vt = reinterpret_cast<int32_t*>(pb + r16 * m32);                  // [DV][m32/2][16] value pairs
  auto* qa = reinterpret_cast<at::BFloat16*>(vt + d * m32 / 2);              // [r16][d] q rows, zero-padded
  float* tail = reinterpret_cast<float*>(qa + r16 * d);                      // [16][d] the last rows' output
  const at::BFloat16* k = k_cache + (h * L + c0) * d;
  const at::BFloat16* v = v_cache + (h * L + c0) * d;

  for (int64_t off = 0; off < m * d * 2; off += 64) {  // ask for the chunk's keys and values at once (cold behind the layer's weights)
    _mm_prefetch(reinterpret_cast<const char*>(k) + off, _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char*>(v) + off, _MM_HINT_T1);
  }
  gather_key_pairs<d>(k, m, m16, kt);
  std::copy(q + h * R * d, q + (h + 1) * R * d, qa);
  std::fill(qa + R * d, qa + r16 * d, at::BFloat16(0.f));
  for (int64_t p = 0; p < m32 / 2; ++p) {  // value slots 2p and 2p+1 interleaved, dimension by dimension
    const __mmask16 even = 2 * p < m ? 0xFFFF : 0, odd = 2 * p + 1 < m ? 0xFFFF : 0;
    for (int cb = 0; cb < DV; ++cb) {
      const __m512i a = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(even, v + 2 * p * d + cb * 16));
      const __m512i b = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(odd, v + (2 * p + 1) * d + cb * 16));
      _mm512_storeu_si512(vt + (cb * (m32 / 2) + p) * 16, _mm512_or_si512(a, _mm512_slli_epi32(b, 16)));
    }
  }

  const TileConfig cfg;
  _tile_loadconfig(&cfg);
  const auto* kb = reinterpret_cast<const char*>(kt);
  for (int64_t rt = 0; rt < r16; rt += 16)  // scores: A = 32 dims of 16 q rows, B = 16 key pairs of 16 slots
    tile_row(reinterpret_cast<const char*>(qa + rt * d), d * 2, 64, kb, 64, 16 * 64, d * 32, d / 32,
             reinterpret_cast<char*>(s + rt * m16), m16 * 4, m16 / 16);

  for (int64_t r = 0; r < r16; ++r) {  // P in A tiles of 16 rows x 32 slots, each contiguous
    at::BFloat16* pr = pb + (r / 16) * 16 * m32 + (r % 16) * 32;  // slot j of row r at pr + (j / 32) * 512 + j % 32
    auto put = [pr](int64_t j, __m512 e) {
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(pr + (j / 32) * 512 + j % 32), (__m256i)_mm512_cvtneps_pbh(e));
    };
    if (r < R) softmax_row(s + r * m16, bias + (r % T) * n + c0, m, m16, scale, part + r * (d + 2) + d, put);
    else for (int64_t j = 0; j < m16; j += 16) put(j, _mm512_setzero_ps());
    if (m32 > m16) put(m16, _mm512_setzero_ps());
  }

  const auto* vb = reinterpret_cast<const char*>(vt);
  for (int64_t rt = 0; rt < r16; rt += 16) {  // weighted sum: A = 32 slots of 16 rows of P, B = 16 slot pairs of 16 dims
    const bool whole = rt + 16 <= R;  // the last rows of R go through a buffer, so no row past R is written
    tile_row(reinterpret_cast<const char*>(pb + rt * m32), 64, 1024, vb, 64, 16 * 64, (m32 / 2) * 64, m32 / 32,
             reinterpret_cast<char*>(whole ? part + rt * (d + 2) : tail), whole ? (d + 2) * 4 : d * 4, DV);
    if (!whole)
      for (int64_t i = 0; rt + i < R; ++i) std::copy(tail + i * d, tail + (i + 1) * d, part + (rt + i) * (d + 2));
  }
  _tile_release();
}

at::Tensor narrow_attention(const at::Tensor& q, const at::Tensor& k_cache, const at::Tensor& v_cache,
                            const at::Tensor& bias, double scale, bool amx) {
  TORCH_CHECK(q.dim() == 3 && k_cache.dim() == 3 && v_cache.dim() == 3 && bias.dim() == 2,
              "narrow_attention: q, caches [heads, rows|slots, d] and bias [T, n] expected");
  TORCH_CHECK(q.scalar_type() == at::kBFloat16 && k_cache.scalar_type() == at::kBFloat16 &&
              v_cache.scalar_type() == at::kBFloat16 && bias.scalar_type() == at::kBFloat16,
              "narrow_attention: bfloat16 q, caches and bias expected");
  TORCH_CHECK(q.is_contiguous() && k_cache.is_contiguous() && v_cache.is_contiguous() && bias.is_contiguous(),
              "narrow_attention: contiguous tensors expected");
  const int64_t Hkv = q.size(0), R = q.size(1), d = q.size(2), L = k_cache.size(1);
  const int64_t T = bias.size(0), n = bias.size(1);
  static const bool amx_allowed = at::cpu::init_amx();  // once per process: Linux grants AMX state on request
  TORCH_CHECK(!amx || amx_allowed, "narrow_attention: AMX asked for, but this CPU or kernel does not allow it");
  TORCH_CHECK(d == 64 || d == 128, "narrow_attention: head size 64 or 128 expected, got ", d);
  TORCH_CHECK(k_cache.size(0) == Hkv && v_cache.sizes() == k_cache.sizes() && k_cache.size(2) == d,
              "narrow_attention: caches must be [", Hkv, ", slots, ", d, "]");
  TORCH_CHECK(T > 0 && R % T == 0 && n > 0 && n <= L, "narrow_attention: rows a multiple of T, 0 < n <= slots expected");
  // units: (head, chunk of slots), as many chunks per head as make the units a multiple of the
  // threads (3 heads on 2 threads: 2 chunks each), each a multiple of 16 slots; a head's partial
  // results are merged per row once its chunks are done, as flash-decoding does
  const int64_t threads = std::max<int64_t>(1, at::get_num_threads());
  const int64_t wanted = std::min<int64_t>(threads / std::gcd(Hkv, threads), (n + 15) / 16);
  const int64_t chunk = ((n + wanted - 1) / wanted + 15) / 16 * 16;
  const int64_t chunks = (n + chunk - 1) / chunk;
  auto part = at::empty({Hkv, chunks, R, d + 2}, q.options().dtype(at::kFloat));
  auto out = at::empty({Hkv, R, d}, q.options().dtype(at::kFloat));
  const auto* qp = q.const_data_ptr<at::BFloat16>();
  const auto* kp = k_cache.const_data_ptr<at::BFloat16>();
  const auto* vp = v_cache.const_data_ptr<at::BFloat16>();
  const auto* bp = bias.const_data_ptr<at::BFloat16>();
  float* pp = part.data_ptr<float>();
  float* op = out.data_ptr<float>();
  const float sc = static_cast<float>(scale);
  // head h's rows from its chunks, each weighted by exp(its max - the row's max); run by the thread
  // that finishes the head's last chunk, so no second parallel region waits for all heads
  auto merge = [&](int64_t h, std::vector<float>& w) {
    w.resize(chunks);
    for (int64_t r = 0; r < R; ++r) {
      const float* p0 = pp + (h * chunks * R + r) * (d + 2);  // chunk c of this row at p0 + c * R * (d + 2)
      float top = -INFINITY, total = 0.f;
      for (int64_t c = 0; c < chunks; ++c) top = std::max(top, p0[c * R * (d + 2) + d]);
      for (int64_t c = 0; c < chunks; ++c) {
        const float* pr = p0 + c * R * (d + 2);
        w[c] = pr[d] == -INFINITY ? 0.f : std::exp(pr[d] - top);
        total += w[c] * pr[d + 1];
      }
      for (int64_t e = 0; e < d; e += 16) {
        __m512 o = _mm512_setzero_ps();
        for (int64_t c = 0; c < chunks; ++c)
          if (w[c] != 0.f) o = _mm512_fmadd_ps(_mm512_set1_ps(w[c]), _mm512_loadu_ps(p0 + c * R * (d + 2) + e), o);
        _mm512_storeu_ps(op + (h * R + r) * d + e, _mm512_mul_ps(o, _mm512_set1_ps(1.f / total)));
      }
    }
  };
  std::vector<std::atomic<int64_t>> done(Hkv);
  for (auto& x : done) x.store(0);
  at::parallel_for(0, Hkv * chunks, 1, [&](int64_t begin, int64_t end) {
    thread_local std::vector<float> buf, w;
    for (int64_t u = begin; u < end; ++u) {
      const int64_t h = u / chunks, c0 = (u % chunks) * chunk, c1 = std::min(n, c0 + chunk);
      float* up = pp + u * R * (d + 2);
      if (amx && d == 64) attend_chunk_amx<4>(qp, kp, vp, bp, up, R, L, n, T, h, c0, c1, sc, buf);
      else if (amx) attend_chunk_amx<8>(qp, kp, vp, bp, up, R, L, n, T, h, c0, c1, sc, buf);
      else if (d == 64) attend_chunk<4>(qp, kp, vp, bp, up, R, L, n, T, h, c0, c1, sc, buf);
      else attend_chunk<8>(qp, kp, vp, bp, up, R, L, n, T, h, c0, c1, sc, buf);
      if (done[h].fetch_add(1, std::memory_order_acq_rel) + 1 == chunks) merge(h, w);
    }
  });
  return out;
}

}  // namespace

TORCH_LIBRARY(specharness, m) {
  m.def("narrow_attention(Tensor q, Tensor k_cache, Tensor v_cache, Tensor bias, float scale, bool amx) -> Tensor");
}

TORCH_LIBRARY_IMPL(specharness, CPU, m) { m.impl("narrow_attention", &narrow_attention); }

// Attention of a few query positions over a bfloat16 K/V cache, on AVX-512 (specharness/narrow_attention.py).
//
// Why: a verification forward over 2-8 positions spent most of its extra cost over a one-position
// step in SDPA's CPU flash kernel, whose small GEMMs go through oneDNN calls per block (~50 us per
// layer for 24 query rows over 288 slots, and more when the cache is cold behind the layer's
// weights). Here each unit (one key/value head, a chunk of its slots) gathers its keys into the
// pair layout of AVX512-BF16's dot-product instruction once, takes the scores with it (bfloat16
// products, float32 sums), and the softmax and weighted sum with register-blocked float32 FMAs;
// the chunks' partial results are merged per row. Probabilities stay float32 (SDPA rounds them to
// bfloat16 before multiplying by V).
//
// Layout: q [Hkv, R, d] bfloat16, contiguous, the R = g*T query rows of each key/value head (g
// query heads of T positions, head-major); caches [Hkv, L, d] bfloat16, contiguous; bias [T, n]
// bfloat16 (the engine's, made once per forward), the additive mask (0 or -inf) of position
// t = row % T over the first n slots. Returns [Hkv, R, d] float32.
#include <torch/extension.h>
#include <ATen/Parallel.h>
#include <immintrin.h>

#include <algorithm>
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

// exp(x) for x <= 0 (scores minus their row's max), relative error ~1e-7; masked lanes (-inf) give exactly 0
inline __m512 exp_nonpositive(__m512 x) {
  const __m512 floor = _mm512_set1_ps(-87.0f);
  const __mmask16 live = _mm512_cmp_ps_mask(x, floor, _CMP_GE_OQ);
  x = _mm512_max_ps(x, floor);
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);  // x - n ln2, in two parts
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
  __m512 p = _mm512_set1_ps(1.9875691500e-4f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
  p = _mm512_fmadd_ps(p, _mm512_mul_ps(r, r), _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
  return _mm512_maskz_mov_ps(live, _mm512_scalef_ps(p, n));
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
  int32_t* kt = reinterpret_cast<int32_t*>(buf.data());  // [d/2][mpad] keys' bfloat16 pairs, slot-minor (zero past m)
  float* s = buf.data() + (d / 2) * mpad;                // [rpad][mpad] scores, then exponentials
  const at::BFloat16* k = k_cache + (h * L + c0) * d;
  const at::BFloat16* v = v_cache + (h * L + c0) * d;
  const int32_t* qpairs = reinterpret_cast<const int32_t*>(q + h * R * d);

  // keys transposed 16 slots at a time: one gather of 16 bfloat16 pairs is one row of kt, the
  // layout the bfloat16 dot-product instruction wants
  const __m512i idx = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                                         _mm512_set1_epi32(d / 2));
  for (int64_t j0 = 0; j0 < mpad; j0 += 16) {
    const __mmask16 live = tail_mask(j0, m);
    const int* base = reinterpret_cast<const int*>(k + j0 * d);
    for (int p = 0; p < d / 2; ++p)
      _mm512_storeu_si512(kt + p * mpad + j0, _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), live, idx, base + p, 4));
  }

  const __m512 sc = _mm512_set1_ps(scale);
  for (int64_t r = 0; r < rpad; r += QR) {
    const int32_t* qr[QR];
    for (int i = 0; i < QR; ++i) qr[i] = qpairs + std::min<int64_t>(r + i, R - 1) * (d / 2);  // padding rows repeat the last
    for (int64_t c = 0; c < mv; c += QV) {
      const int cn = static_cast<int>(std::min<int64_t>(QV, mv - c));
      __m512 acc[QR][QV];
      for (int i = 0; i < QR; ++i) for (int j = 0; j < QV; ++j) acc[i][j] = _mm512_setzero_ps();
      for (int p = 0; p < d / 2; ++p) {
        __m512i kv[QV];
        for (int j = 0; j < QV; ++j) if (j < cn) kv[j] = _mm512_loadu_si512(kt + p * mpad + (c + j) * 16);
        for (int i = 0; i < QR; ++i) {
          const __m512i qb = _mm512_set1_epi32(qr[i][p]);
          for (int j = 0; j < QV; ++j) if (j < cn) acc[i][j] = _mm512_dpbf16_ps(acc[i][j], (__m512bh)qb, (__m512bh)kv[j]);
        }
      }
      for (int i = 0; i < QR; ++i) for (int j = 0; j < QV; ++j) if (j < cn)
        _mm512_storeu_ps(s + (r + i) * mpad + (c + j) * 16, _mm512_mul_ps(acc[i][j], sc));
    }
  }

  for (int64_t r = 0; r < R; ++r) {  // softmax statistics over this chunk's slots, bias added
    float* sr = s + r * mpad;
    const at::BFloat16* br = bias + (r % T) * n + c0;
    __m512 mx = _mm512_set1_ps(-INFINITY);
    for (int64_t j = 0; j < mpad; j += 16) {
      const __mmask16 live = tail_mask(j, m);
      __m512 x = _mm512_add_ps(_mm512_maskz_loadu_ps(live, sr + j), load_bf16(live, br + j));
      x = _mm512_mask_blend_ps(live, _mm512_set1_ps(-INFINITY), x);
      _mm512_storeu_ps(sr + j, x);
      mx = _mm512_max_ps(mx, x);
    }
    const float top = _mm512_reduce_max_ps(mx);
    float* pr = part + r * (d + 2);
    pr[d] = top;
    if (top == -INFINITY) {  // every slot of this chunk masked for this row: it adds nothing
      std::fill(sr, sr + mpad, 0.f);
      pr[d + 1] = 0.f;
      continue;
    }
    __m512 sum = _mm512_setzero_ps();
    for (int64_t j = 0; j < mpad; j += 16) {
      const __m512 e = exp_nonpositive(_mm512_sub_ps(_mm512_loadu_ps(sr + j), _mm512_set1_ps(top)));
      _mm512_storeu_ps(sr + j, e);
      sum = _mm512_add_ps(sum, e);
    }
    pr[d + 1] = _mm512_reduce_add_ps(sum);
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

at::Tensor narrow_attention(const at::Tensor& q, const at::Tensor& k_cache, const at::Tensor& v_cache,
                            const at::Tensor& bias, double scale) {
  TORCH_CHECK(q.dim() == 3 && k_cache.dim() == 3 && v_cache.dim() == 3 && bias.dim() == 2,
              "narrow_attention: q, caches [heads, rows|slots, d] and bias [T, n] expected");
  TORCH_CHECK(q.scalar_type() == at::kBFloat16 && k_cache.scalar_type() == at::kBFloat16 &&
              v_cache.scalar_type() == at::kBFloat16 && bias.scalar_type() == at::kBFloat16,
              "narrow_attention: bfloat16 q, caches and bias expected");
  TORCH_CHECK(q.is_contiguous() && k_cache.is_contiguous() && v_cache.is_contiguous() && bias.is_contiguous(),
              "narrow_attention: contiguous tensors expected");
  const int64_t Hkv = q.size(0), R = q.size(1), d = q.size(2), L = k_cache.size(1);
  const int64_t T = bias.size(0), n = bias.size(1);
  TORCH_CHECK(d == 64 || d == 128, "narrow_attention: head size 64 or 128 expected, got ", d);
  TORCH_CHECK(k_cache.size(0) == Hkv && v_cache.sizes() == k_cache.sizes() && k_cache.size(2) == d,
              "narrow_attention: caches must be [", Hkv, ", slots, ", d, "]");
  TORCH_CHECK(T > 0 && R % T == 0 && n > 0 && n <= L, "narrow_attention: rows a multiple of T, 0 < n <= slots expected");
  // units: (head, chunk of slots), as many chunks per head as make the units a multiple of the
  // threads (3 heads on 2 threads: 2 chunks each), each a multiple of 16 slots; their partial
  // results are merged per row afterwards, as flash-decoding does
  const int64_t threads = std::max<int64_t>(1, at::get_num_threads());
  const int64_t wanted = std::min<int64_t>(threads / std::gcd(Hkv, threads), (n + 15) / 16);
  const int64_t chunk = ((n + wanted - 1) / wanted + 15) / 16 * 16;
  const int64_t chunks = (n + chunk - 1) / chunk;
  auto part = at::empty({Hkv, chunks, R, d + 2}, q.options().dtype(at::kFloat));
  const auto* qp = q.const_data_ptr<at::BFloat16>();
  const auto* kp = k_cache.const_data_ptr<at::BFloat16>();
  const auto* vp = v_cache.const_data_ptr<at::BFloat16>();
  const auto* bp = bias.const_data_ptr<at::BFloat16>();
  float* pp = part.data_ptr<float>();
  at::parallel_for(0, Hkv * chunks, 1, [&](int64_t begin, int64_t end) {
    thread_local std::vector<float> buf;
    for (int64_t u = begin; u < end; ++u) {
      const int64_t h = u / chunks, c0 = (u % chunks) * chunk, c1 = std::min(n, c0 + chunk);
      float* up = pp + u * R * (d + 2);
      if (d == 64) attend_chunk<4>(qp, kp, vp, bp, up, R, L, n, T, h, c0, c1, static_cast<float>(scale), buf);
      else attend_chunk<8>(qp, kp, vp, bp, up, R, L, n, T, h, c0, c1, static_cast<float>(scale), buf);
    }
  });
  auto out = at::empty({Hkv, R, d}, q.options().dtype(at::kFloat));
  float* op = out.data_ptr<float>();
  for (int64_t h = 0; h < Hkv; ++h) {
    for (int64_t r = 0; r < R; ++r) {
      float top = -INFINITY;
      for (int64_t c = 0; c < chunks; ++c) top = std::max(top, pp[((h * chunks + c) * R + r) * (d + 2) + d]);
      float* o = op + (h * R + r) * d;
      std::fill(o, o + d, 0.f);
      float total = 0.f;
      for (int64_t c = 0; c < chunks; ++c) {
        const float* pr = pp + ((h * chunks + c) * R + r) * (d + 2);
        if (pr[d] == -INFINITY) continue;
        const float w = std::exp(pr[d] - top);
        total += w * pr[d + 1];
        for (int64_t e = 0; e < d; ++e) o[e] += w * pr[e];
      }
      const float inv = 1.f / total;
      for (int64_t e = 0; e < d; ++e) o[e] *= inv;
    }
  }
  return out;
}

}  // namespace

TORCH_LIBRARY(specharness, m) {
  m.def("narrow_attention(Tensor q, Tensor k_cache, Tensor v_cache, Tensor bias, float scale) -> Tensor");
}

TORCH_LIBRARY_IMPL(specharness, CPU, m) { m.impl("narrow_attention", &narrow_attention); }

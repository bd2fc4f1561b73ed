// Weight-quantized matmuls for a CPU with AVX2: int4 weights (groups of 32, fp16 scale and min)
// or int8 weights (a float32 scale per output channel), times activations quantized to int8 per
// group of 32 (a float32 scale each). y = x W^T in float32.
//
// Why int8 activations: a u8 x s8 multiply-add (vpmaddubsw) takes 32 weights in one instruction,
// where widening int4 to float takes five, so a decode step reads its weights at memory speed.
// Every output element is the same sequence of instructions whatever the number of rows or
// threads (rows and column blocks are only loop tiling), so a row's bits never depend on the
// batch around it: what keeps a restored KV answer equal to a recomputed one within the format.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <immintrin.h>

#include <cstdint>
#include <vector>

#include "q4_matmul.h"

namespace bidaw {
namespace {

constexpr int64_t kCols = 4;  // output columns per block: one activation load serves four
constexpr int64_t kRows = 2;  // rows per tile: one unpacking of a group's weights serves two

inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

inline int32_t hsum_i32(__m256i v) {
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4E));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xB1));
  return _mm_cvtsi128_si32(s);
}

void quantize_group(const float* x, int8_t* q, float* d, float* sum) {
  const __m256 sign = _mm256_set1_ps(-0.0f);
  __m256 v[4], amax = _mm256_setzero_ps();
  for (int i = 0; i < 4; ++i) {
    v[i] = _mm256_loadu_ps(x + 8 * i);
    amax = _mm256_max_ps(amax, _mm256_andnot_ps(sign, v[i]));
  }
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(amax), _mm256_extractf128_ps(amax, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  m = _mm_max_ss(m, _mm_movehdup_ps(m));
  const float top = _mm_cvtss_f32(m);
  const float scale = top / 127.0f;
  const __m256 inv = _mm256_set1_ps(top > 0.0f ? 127.0f / top : 0.0f);
  __m256i i[4];
  for (int k = 0; k < 4; ++k) i[k] = _mm256_cvtps_epi32(_mm256_mul_ps(v[k], inv));  // to nearest
  const int32_t total = hsum_i32(_mm256_add_epi32(_mm256_add_epi32(i[0], i[1]),
                                                  _mm256_add_epi32(i[2], i[3])));
  // packs work within 128-bit lanes: the permute puts the 32 bytes back in element order
  __m256i p = _mm256_packs_epi16(_mm256_packs_epi32(i[0], i[1]), _mm256_packs_epi32(i[2], i[3]));
  p = _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(q), p);
  *d = scale;
  *sum = scale * static_cast<float>(total);
}

}  // namespace

QuantRows quantize_rows(const float* x, int64_t rows, int64_t k) {
  const int64_t groups = k / kGroup;
  QuantRows out{std::vector<int8_t>(rows * k), std::vector<float>(rows * groups),
                std::vector<float>(rows * groups)};
  at::parallel_for(0, rows, 16, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r)
      for (int64_t g = 0; g < groups; ++g)
        quantize_group(x + r * k + g * kGroup, &out.q[r * k + g * kGroup],
                       &out.d[r * groups + g], &out.sum[r * groups + g]);
  });
  return out;
}

namespace {

void check_x(const at::Tensor& x, int64_t k) {
  TORCH_CHECK(x.dim() == 2 && x.scalar_type() == at::kFloat && x.is_contiguous() && x.is_cpu(),
              "x must be a contiguous float32 CPU matrix");
  TORCH_CHECK(x.size(1) == k && k % kGroup == 0, "x has ", x.size(1), " columns, the weight ", k);
}

// Rows r0..r0+R-1 of columns c0..c0+C-1. C and R are constants, so the accumulators stay in
// registers; each group's weights are unpacked once for the R rows. scale and min: the block's,
// widened and transposed ([group][column]) so one vector multiply scales a group's C columns.
// Every output element is the same instructions for any R: tiling never changes a row's bits.
template <int C, int R>
void q4_tile(const QuantRows& xq, int64_t r0, int64_t k, const uint8_t* w, int64_t c0,
             int64_t n, const float* scale, const float* min, float* out) {
  const int64_t groups = k / kGroup;
  const __m256i low = _mm256_set1_epi8(0x0F);
  const __m256i ones = _mm256_set1_epi16(1);
  __m256 acc[R][C];
  __m128 mins[R];
  for (int r = 0; r < R; ++r) {
    mins[r] = _mm_setzero_ps();
    for (int c = 0; c < C; ++c) acc[r][c] = _mm256_setzero_ps();
  }
  // the next block's weights (C rows of k / 2 bytes, right after these): a line per group
  const char* next = reinterpret_cast<const char*>(w + (c0 + C) * (k / 2));
  for (int64_t g = 0; g < groups; ++g) {
    _mm_prefetch(next + g * 64 * C / 4, _MM_HINT_T0);
    __m256i wv[C];
    for (int c = 0; c < C; ++c) {
      const __m128i raw = _mm_loadu_si128(
          reinterpret_cast<const __m128i*>(w + (c0 + c) * (k / 2) + g * (kGroup / 2)));
      wv[c] = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(raw, 4), raw), low);
    }
    const __m128 s4 = _mm_loadu_ps(scale + g * 4), m4 = _mm_loadu_ps(min + g * 4);
    for (int r = 0; r < R; ++r) {
      const int64_t row = r0 + r;
      const __m256i xv = _mm256_loadu_si256(
          reinterpret_cast<const __m256i*>(&xq.q[row * k + g * kGroup]));
      float sc[4];  // this group's weight scale times the row's, per column
      _mm_storeu_ps(sc, _mm_mul_ps(s4, _mm_set1_ps(xq.d[row * groups + g])));
      mins[r] = _mm_fmadd_ps(m4, _mm_set1_ps(xq.sum[row * groups + g]), mins[r]);
      for (int c = 0; c < C; ++c) {
        const __m256i dot = _mm256_madd_epi16(_mm256_maddubs_epi16(wv[c], xv), ones);
        acc[r][c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), _mm256_set1_ps(sc[c]), acc[r][c]);
      }
    }
  }
  for (int r = 0; r < R; ++r) {
    float m[4];
    _mm_storeu_ps(m, mins[r]);
    for (int c = 0; c < C; ++c) out[(r0 + r) * n + c0 + c] = hsum(acc[r][c]) + m[c];
  }
}

// Columns c0..c0+C-1 of every row, in tiles of kRows rows.
template <int C>
void q4_block(const QuantRows& xq, int64_t rows, int64_t k, const uint8_t* w, const uint16_t* sm,
              int64_t c0, int64_t n, float* scale, float* min, float* out) {
  const int64_t groups = k / kGroup;
  for (int64_t g = 0; g < groups; ++g)
    for (int c = 0; c < 4; ++c) {  // a one-column block pads its lanes with column c0's
      const int64_t col = c0 + (c < C ? c : 0);
      scale[g * 4 + c] = _cvtsh_ss(sm[(col * groups + g) * 2]);
      min[g * 4 + c] = _cvtsh_ss(sm[(col * groups + g) * 2 + 1]);
    }
  int64_t r = 0;
  for (; r + kRows <= rows; r += kRows) q4_tile<C, kRows>(xq, r, k, w, c0, n, scale, min, out);
  for (; r < rows; ++r) q4_tile<C, 1>(xq, r, k, w, c0, n, scale, min, out);
}

}  // namespace

void q4_matmul(const QuantRows& xq, int64_t rows, int64_t k, const uint8_t* w,
               const uint16_t* sm, int64_t n, float* out) {
  const int64_t groups = k / kGroup, blocks = (n + kCols - 1) / kCols;
  at::parallel_for(0, blocks, 1, [&](int64_t begin, int64_t end) {
    std::vector<float> scale(kCols * groups), min(kCols * groups);
    for (int64_t b = begin; b < end; ++b) {
      const int64_t c0 = b * kCols;
      if (n - c0 >= kCols) {
        q4_block<kCols>(xq, rows, k, w, sm, c0, n, scale.data(), min.data(), out);
      } else {
        for (int64_t c = c0; c < n; ++c)
          q4_block<1>(xq, rows, k, w, sm, c, n, scale.data(), min.data(), out);
      }
    }
  });
}

namespace {

// int4: w = q * scale + min per group; byte j of a group's 16 holds element j (low nibble) and
// element j + 16 (high nibble). qweight uint8 [N, K / 2], scale_min float16 [N, K / 32, 2].
at::Tensor q4_linear(const at::Tensor& x, const at::Tensor& qweight, const at::Tensor& scale_min) {
  const int64_t n = qweight.size(0), k = qweight.size(1) * 2, groups = k / kGroup;
  check_x(x, k);
  TORCH_CHECK(qweight.scalar_type() == at::kByte && qweight.is_contiguous(), "qweight: uint8");
  TORCH_CHECK(scale_min.scalar_type() == at::kHalf && scale_min.is_contiguous() &&
              scale_min.numel() == n * groups * 2, "scale_min: float16 [N, K/32, 2]");
  const int64_t rows = x.size(0);
  at::Tensor y = at::empty({rows, n}, x.options());
  q4_matmul(quantize_rows(x.data_ptr<float>(), rows, k), rows, k, qweight.data_ptr<uint8_t>(),
            reinterpret_cast<const uint16_t*>(scale_min.data_ptr<at::Half>()), n,
            y.data_ptr<float>());
  return y;
}

template <int C>
void q8_block(const QuantRows& xq, int64_t rows, int64_t k, const int8_t* w, const float* ws,
              int64_t c0, int64_t n, float* out) {
  const int64_t groups = k / kGroup;
  const __m256i ones = _mm256_set1_epi16(1);
  for (int64_t r = 0; r < rows; ++r) {
    const int8_t* xr = &xq.q[r * k];
    const float* dr = &xq.d[r * groups];
    __m256 acc[C];
    for (int c = 0; c < C; ++c) acc[c] = _mm256_setzero_ps();
    // the next block's weights (C rows of k bytes, right after these): C / 2 lines per group
    const char* next = reinterpret_cast<const char*>(w + (c0 + C) * k);
    for (int64_t g = 0; g < groups; ++g) {
      for (int c = 0; c < C; c += 2) _mm_prefetch(next + (g * C + c) * 32, _MM_HINT_T0);
      const __m256i xv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xr + g * kGroup));
      const __m256 dx = _mm256_set1_ps(dr[g]);
      for (int c = 0; c < C; ++c) {
        const __m256i wv = _mm256_loadu_si256(
            reinterpret_cast<const __m256i*>(w + (c0 + c) * k + g * kGroup));
        // u8 x s8 only: |w| times x with w's sign
        const __m256i prod = _mm256_maddubs_epi16(_mm256_sign_epi8(wv, wv), _mm256_sign_epi8(xv, wv));
        acc[c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_madd_epi16(prod, ones)), dx, acc[c]);
      }
    }
    for (int c = 0; c < C; ++c) out[r * n + c0 + c] = hsum(acc[c]) * ws[c0 + c];
  }
}

// int8: w = q * scale[column]. qweight int8 [N, K], scale float32 [N].
at::Tensor q8_linear(const at::Tensor& x, const at::Tensor& qweight, const at::Tensor& scale) {
  const int64_t n = qweight.size(0), k = qweight.size(1), groups = k / kGroup;
  check_x(x, k);
  TORCH_CHECK(qweight.scalar_type() == at::kChar && qweight.is_contiguous(), "qweight: int8");
  TORCH_CHECK(scale.scalar_type() == at::kFloat && scale.numel() == n, "scale: float32 [N]");
  const int64_t rows = x.size(0);
  at::Tensor y = at::empty({rows, n}, x.options());
  const QuantRows xq = quantize_rows(x.data_ptr<float>(), rows, k);
  const int8_t* w = qweight.data_ptr<int8_t>();
  const float* ws = scale.data_ptr<float>();
  float* out = y.data_ptr<float>();
  const int64_t blocks = (n + kCols - 1) / kCols;
  at::parallel_for(0, blocks, 16, [&](int64_t begin, int64_t end) {
    for (int64_t b = begin; b < end; ++b) {
      const int64_t c0 = b * kCols;
      if (n - c0 >= kCols) {
        q8_block<kCols>(xq, rows, k, w, ws, c0, n, out);
      } else {
        for (int64_t c = c0; c < n; ++c) q8_block<1>(xq, rows, k, w, ws, c, n, out);
      }
    }
  });
  return y;
}

}  // namespace
}  // namespace bidaw

TORCH_LIBRARY(bidaw_native, m) {
  m.def("q4_linear(Tensor x, Tensor qweight, Tensor scale_min) -> Tensor", &bidaw::q4_linear);
  m.def("q8_linear(Tensor x, Tensor qweight, Tensor scale) -> Tensor", &bidaw::q8_linear);
}

// Weight-quantized matmuls for a CPU with AVX2: int4 weights (groups of 32, fp16 scale and min)
// or int8 weights (a float32 scale per output channel), times activations quantized to int8 per
// group of 32 (a float32 scale each). y = x W^T in float32.
//
// Why int8 activations: a u8 x s8 multiply-add (vpmaddubsw) takes 32 weights in one instruction,
// where widening int4 to float takes five, so a decode step reads its weights at memory speed.
// Every output element is the same sequence of instructions whatever the number of rows or
// threads (rows and column blocks are only loop tiling), so a row's bits never depend on the
// batch around it: what keeps a restored KV answer equal to a recomputed one within the format.
// Built with -fopenmp, so at::parallel_for splits column blocks across torch's intra-op threads
// (without it, ATen's header runs the loop on the calling thread alone).
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "q4_matmul.h"

namespace bidaw {
namespace {

constexpr int64_t kCols = 8;  // int4 output columns per block: a 32-byte load holds 4 inputs of 8
constexpr int64_t kRows = 4;  // rows per tile: one unpacking of a group's weights serves four
constexpr int64_t kAhead = 4;  // blocks ahead that a block prefetches (~4 KiB per 1,000 inputs
                               // each; measured ~10% off a batch-1 step on one core vs 1 ahead)
constexpr int64_t kQ8Cols = 4;  // int8 output columns per block: one activation load serves four

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

// Rows r0..r0+R-1 of one block of kCols columns. The block's weights, per group of 32 inputs: 4
// vectors of 32 bytes, byte 4c + i of vector j holding column c's level for input 4j + i (low
// nibble) and 4j + 16 + i (high nibble); so one u8 x s8 multiply-add takes 4 inputs of 8 columns
// against the row's 4 inputs broadcast, with no shuffle. Within a group the products add up in
// int16 (8 x 2 x 15 x 127 < 2^15: exact), then one float multiply-add scales the 8 columns.
// R only shares each group's unpacking between rows: a row's instructions are the same for any R.
template <int R>
void q4_tile(const QuantRows& xq, int64_t r0, int64_t k, const uint8_t* w, const uint16_t* sm,
             int64_t c0, int64_t n, float* out) {
  const int64_t groups = k / kGroup;
  const __m256i low = _mm256_set1_epi8(0x0F);
  const __m256i ones = _mm256_set1_epi16(1);
  __m256 acc[R];
  for (int r = 0; r < R; ++r) acc[r] = _mm256_setzero_ps();
  for (int64_t g = 0; g < groups; ++g) {
    const uint8_t* wg = w + g * kGroup * kCols / 2;
    const char* ahead = reinterpret_cast<const char*>(wg + kAhead * groups * kGroup * kCols / 2);
    _mm_prefetch(ahead, _MM_HINT_T0);
    _mm_prefetch(ahead + 64, _MM_HINT_T0);
    __m256i p[R];
    for (int h = 0; h < 2; ++h) {  // inputs 0..15 (low nibbles), then 16..31 (high)
      __m256i wv[4];
      for (int j = 0; j < 4; ++j) {
        const __m256i raw = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(wg + 32 * j));
        wv[j] = _mm256_and_si256(h ? _mm256_srli_epi16(raw, 4) : raw, low);
      }
      for (int r = 0; r < R; ++r) {
        const int8_t* x = &xq.q[(r0 + r) * k + g * kGroup + 16 * h];
        __m256i s = h ? p[r] : _mm256_setzero_si256();
        for (int j = 0; j < 4; ++j) {
          int32_t four;
          std::memcpy(&four, x + 4 * j, 4);
          s = _mm256_add_epi16(s, _mm256_maddubs_epi16(wv[j], _mm256_set1_epi32(four)));
        }
        p[r] = s;
      }
    }
    const __m256 scale = _mm256_cvtph_ps(_mm_loadu_si128(
        reinterpret_cast<const __m128i*>(sm + g * 2 * kCols)));
    const __m256 min = _mm256_cvtph_ps(_mm_loadu_si128(
        reinterpret_cast<const __m128i*>(sm + g * 2 * kCols + kCols)));
    for (int r = 0; r < R; ++r) {
      const int64_t at = (r0 + r) * groups + g;
      const __m256 dot = _mm256_cvtepi32_ps(_mm256_madd_epi16(p[r], ones));
      acc[r] = _mm256_fmadd_ps(dot, _mm256_mul_ps(scale, _mm256_set1_ps(xq.d[at])), acc[r]);
      acc[r] = _mm256_fmadd_ps(min, _mm256_set1_ps(xq.sum[at]), acc[r]);
    }
  }
  for (int r = 0; r < R; ++r) {
    float lanes[kCols];
    _mm256_storeu_ps(lanes, acc[r]);
    for (int64_t c = 0; c < kCols && c0 + c < n; ++c) out[(r0 + r) * n + c0 + c] = lanes[c];
  }
}

}  // namespace

void q4_matmul(const QuantRows& xq, int64_t rows, int64_t k, const uint8_t* w,
               const uint16_t* sm, int64_t n, float* out) {
  const int64_t groups = k / kGroup, blocks = (n + kCols - 1) / kCols;
  const int64_t block_bytes = groups * kGroup * kCols / 2, block_sm = groups * 2 * kCols;
  // a chunk of blocks worth a thread's start: some 64k multiply-adds
  const int64_t grain = std::max<int64_t>(1, (int64_t{1} << 16) / (rows * k * kCols));
  at::parallel_for(0, blocks, grain, [&](int64_t begin, int64_t end) {
    for (int64_t b = begin; b < end; ++b) {
      const uint8_t* wb = w + b * block_bytes;
      const uint16_t* smb = sm + b * block_sm;
      int64_t r = 0;
      for (; r + kRows <= rows; r += kRows) q4_tile<kRows>(xq, r, k, wb, smb, b * kCols, n, out);
      for (; r < rows; ++r) q4_tile<1>(xq, r, k, wb, smb, b * kCols, n, out);
    }
  });
}

namespace {

// The kernel's layout (native_linear.kernel_layout): qweight uint8 [ceil(N / 8), K * 4], the
// blocks of 8 columns described above q4_tile; scale_min float16 [ceil(N / 8), K / 32, 2, 8].
at::Tensor q4_linear(const at::Tensor& x, const at::Tensor& qweight, const at::Tensor& scale_min,
                     int64_t n) {
  const int64_t blocks = (n + kCols - 1) / kCols;
  TORCH_CHECK(n > 0 && qweight.dim() == 2 && qweight.size(0) == blocks,
              "qweight: ", blocks, " blocks of ", kCols, " columns for ", n, " outputs");
  const int64_t k = qweight.size(1) / 4, groups = k / kGroup;
  check_x(x, k);
  TORCH_CHECK(qweight.scalar_type() == at::kByte && qweight.is_contiguous(), "qweight: uint8");
  TORCH_CHECK(scale_min.scalar_type() == at::kHalf && scale_min.is_contiguous() &&
              scale_min.numel() == blocks * groups * 2 * kCols,
              "scale_min: float16 [N / 8, K / 32, 2, 8]");
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
  const int64_t blocks = (n + kQ8Cols - 1) / kQ8Cols;
  at::parallel_for(0, blocks, 16, [&](int64_t begin, int64_t end) {
    for (int64_t b = begin; b < end; ++b) {
      const int64_t c0 = b * kQ8Cols;
      if (n - c0 >= kQ8Cols) {
        q8_block<kQ8Cols>(xq, rows, k, w, ws, c0, n, out);
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
  m.def("q4_linear(Tensor x, Tensor qweight, Tensor scale_min, int n) -> Tensor",
        &bidaw::q4_linear);
  m.def("q8_linear(Tensor x, Tensor qweight, Tensor scale) -> Tensor", &bidaw::q8_linear);
}

// y = (x @ weight.T) * scale for a few bf16 rows x [M, K], int8 weight rows [N, K] and one bf16 scale per weight row:
// torch's `_weight_int8pack_mm`, with AVX-512 BF16 dot products. Each 32 int8 weights are converted to bf16 (exact:
// every int8 is a bf16) once per block of rows, and VDPBF16PS multiplies them with up to 8 rows at a time, two
// products per lane and instruction; sums are in fp32, scaled and rounded to bf16 once. Why a kernel of our own:
// scripts/measurement_log.md, "int8 at batch 8".
#include <ATen/Parallel.h>
#include <ATen/ops/empty.h>
#include <torch/library.h>

#include <algorithm>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define INT8_DOT_PRODUCTS 1
#define WITH_BF16_DOT __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16")))
#else
#define INT8_DOT_PRODUCTS 0
#endif

namespace {

bool supported() {
#if INT8_DOT_PRODUCTS
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
         __builtin_cpu_supports("avx512bf16");
#else
  return false;
#endif
}

#if INT8_DOT_PRODUCTS
// Weight rows this many blocks ahead are prefetched: the hardware prefetcher alone left the kernel waiting on memory.
constexpr int64_t PREFETCH_BLOCKS = 2;

// Rows [n0, n0 + NB) of y for M rows of x: M * NB fp32 accumulators stay in registers.
template <int M, int NB>
WITH_BF16_DOT void block(const at::BFloat16* x, const int8_t* weight, const at::BFloat16* scale, at::BFloat16* y,
                         int64_t n0, int64_t N, int64_t K, bool prefetch) {
  __m512 sums[M][NB];
#pragma GCC unroll 8
  for (int m = 0; m < M; ++m)
#pragma GCC unroll 8
    for (int j = 0; j < NB; ++j) sums[m][j] = _mm512_setzero_ps();
  for (int64_t k = 0; k < K; k += 32) {
    // The last 32 may be fewer: masked loads read zeros past K.
    const int64_t left = K - k;
    const __mmask32 lanes = left >= 32 ? ~__mmask32(0) : (__mmask32(1) << left) - 1;
    const __mmask16 low = __mmask16(lanes), high = __mmask16(lanes >> 16);
    __m512bh w[NB];
#pragma GCC unroll 8
    for (int j = 0; j < NB; ++j) {
      const int8_t* row = weight + (n0 + j) * K + k;
      if (prefetch) _mm_prefetch(reinterpret_cast<const char*>(row + PREFETCH_BLOCKS * NB * K), _MM_HINT_T0);
      __m512 first = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_maskz_loadu_epi8(low, row)));
      __m512 second = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_maskz_loadu_epi8(high, row + 16)));
      w[j] = _mm512_cvtne2ps_pbh(second, first);  // bf16 lanes in k order: first's 16, then second's
    }
#pragma GCC unroll 8
    for (int m = 0; m < M; ++m) {
      const __m512bh xs = (__m512bh)_mm512_maskz_loadu_epi16(lanes, x + m * K + k);
#pragma GCC unroll 8
      for (int j = 0; j < NB; ++j) sums[m][j] = _mm512_dpbf16_ps(sums[m][j], xs, w[j]);
    }
  }
#pragma GCC unroll 8
  for (int m = 0; m < M; ++m)
#pragma GCC unroll 8
    for (int j = 0; j < NB; ++j)
      y[m * N + n0 + j] = at::BFloat16(_mm512_reduce_add_ps(sums[m][j]) * static_cast<float>(scale[n0 + j]));
}

// Up to 8 rows of x against all of weight, split across threads by blocks of weight rows.
template <int M>
void rows_times_weight(const at::BFloat16* x, const int8_t* weight, const at::BFloat16* scale, at::BFloat16* y,
                       int64_t N, int64_t K) {
  constexpr int NB = M <= 2 ? 8 : (M <= 4 ? 4 : 2);  // at most 16 accumulators
  const int64_t blocks = N / NB;
  at::parallel_for(0, blocks, 16, [&](int64_t begin, int64_t end) {
    for (int64_t b = begin; b < end; ++b) block<M, NB>(x, weight, scale, y, b * NB, N, K, b + PREFETCH_BLOCKS < end);
  });
  for (int64_t n = blocks * NB; n < N; ++n) block<M, 1>(x, weight, scale, y, n, N, K, false);  // N % NB rows
}
#endif

at::Tensor int8_dot_products(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& scale) {
  TORCH_CHECK(x.dim() == 2 && weight.dim() == 2 && scale.dim() == 1, "int8_dot_products: x [M, K], weight [N, K], "
              "scale [N] expected, got ", x.sizes(), ", ", weight.sizes(), ", ", scale.sizes());
  TORCH_CHECK(x.scalar_type() == at::kBFloat16 && scale.scalar_type() == at::kBFloat16 &&
                  weight.scalar_type() == at::kChar,
              "int8_dot_products: x and scale in bfloat16, weight in int8 expected");
  TORCH_CHECK(x.size(1) == weight.size(1) && scale.size(0) == weight.size(0), "int8_dot_products: x ", x.sizes(),
              ", weight ", weight.sizes(), " and scale ", scale.sizes(), " do not fit");
  TORCH_CHECK(x.is_meta() || supported(), "int8_dot_products: this CPU lacks AVX-512 BF16");
  const at::Tensor rows = x.contiguous(), w = weight.contiguous(), s = scale.contiguous();
  const int64_t M = rows.size(0), K = rows.size(1), N = w.size(0);
  at::Tensor y = at::empty({M, N}, rows.options());
  if (x.is_meta()) return y;  // the shape alone, for torch.compile's tracing
#if INT8_DOT_PRODUCTS
  for (int64_t m = 0; m < M; m += 8) {  // each 8 rows read the weights once
    const at::BFloat16* xm = rows.const_data_ptr<at::BFloat16>() + m * K;
    const int8_t* wp = w.const_data_ptr<int8_t>();
    const at::BFloat16* sp = s.const_data_ptr<at::BFloat16>();
    at::BFloat16* ym = y.mutable_data_ptr<at::BFloat16>() + m * N;
    switch (std::min<int64_t>(M - m, 8)) {
      case 1: rows_times_weight<1>(xm, wp, sp, ym, N, K); break;
      case 2: rows_times_weight<2>(xm, wp, sp, ym, N, K); break;
      case 3: rows_times_weight<3>(xm, wp, sp, ym, N, K); break;
      case 4: rows_times_weight<4>(xm, wp, sp, ym, N, K); break;
      case 5: rows_times_weight<5>(xm, wp, sp, ym, N, K); break;
      case 6: rows_times_weight<6>(xm, wp, sp, ym, N, K); break;
      case 7: rows_times_weight<7>(xm, wp, sp, ym, N, K); break;
      default: rows_times_weight<8>(xm, wp, sp, ym, N, K); break;
    }
  }
#endif
  return y;
}

}  // namespace

TORCH_LIBRARY(hf_tinygpt, m) {
  m.def("int8_dot_products(Tensor x, Tensor weight, Tensor scale) -> Tensor");
  m.def("int8_dot_products_supported() -> bool", &supported);
}

TORCH_LIBRARY_IMPL(hf_tinygpt, CPU, m) { m.impl("int8_dot_products", &int8_dot_products); }
TORCH_LIBRARY_IMPL(hf_tinygpt, Meta, m) { m.impl("int8_dot_products", &int8_dot_products); }

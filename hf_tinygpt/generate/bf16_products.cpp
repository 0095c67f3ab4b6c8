// y = x @ weight.T + bias for a few bf16 rows x [M, K] (M <= 4), bf16 weight rows [N, K] and an optional bf16 bias
// [N]: `torch.nn.functional.linear` in bfloat16, for CPUs with AVX2 and FMA but no AVX-512 BF16. A bf16 number is the
// top half of an fp32 one, so 16 weights widen to fp32 with one shift (the even ones) and one mask (the odd ones);
// the rows of x are widened and split into even and odd halves once per call, and fused multiply-adds sum in fp32.
// Sums are rounded to bf16 once, after the bias. Why a kernel of our own: scripts/README.md, "bf16 on AVX2".
#include <ATen/Parallel.h>
#include <ATen/ops/empty.h>
#include <torch/library.h>

#include <algorithm>
#include <vector>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define BF16_PRODUCTS 1
#define WITH_AVX2 __attribute__((target("avx2,fma")))
#else
#define BF16_PRODUCTS 0
#endif

namespace {

constexpr int64_t MAX_ROWS = 4;

bool supported() {
#if BF16_PRODUCTS
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#else
  return false;
#endif
}

// Whether the CPU multiplies bf16 natively (VDPBF16PS), where inductor's own bf16 kernels are fast.
bool has_avx512_bf16() {
#if BF16_PRODUCTS
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512bf16");
#else
  return false;
#endif
}

#if BF16_PRODUCTS
// Weight rows this many blocks ahead are prefetched, as in int8_dot_products.cpp.
constexpr int64_t PREFETCH_BLOCKS = 2;

WITH_AVX2 inline float sum_of(__m256 v) {
  const __m128 half = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  const __m128 quarter = _mm_add_ps(half, _mm_movehl_ps(half, half));
  return _mm_cvtss_f32(_mm_add_ss(quarter, _mm_shuffle_ps(quarter, quarter, 1)));
}

// Weight rows [n0, n0 + NB) against M rows; `even`/`odd` hold each row's x[2i] and x[2i + 1] as fp32, K / 2 apiece
// (K16 = K rounded down to 16: the rest is summed one by one).
template <int M, int NB>
WITH_AVX2 void block(const float* even, const float* odd, const uint16_t* weight, const at::BFloat16* x,
                     const at::BFloat16* bias, at::BFloat16* y, int64_t n0, int64_t N, int64_t K, bool prefetch) {
  const int64_t K16 = K / 16 * 16, half = K / 2;
  const __m256i top = _mm256_set1_epi32(static_cast<int>(0xFFFF0000u));
  __m256 sums[M][NB];
#pragma GCC unroll 8
  for (int m = 0; m < M; ++m)
#pragma GCC unroll 8
    for (int j = 0; j < NB; ++j) sums[m][j] = _mm256_setzero_ps();
  for (int64_t k = 0; k < K16; k += 16) {
    __m256 w_even[NB], w_odd[NB];
#pragma GCC unroll 8
    for (int j = 0; j < NB; ++j) {
      const uint16_t* row = weight + (n0 + j) * K + k;
      if (prefetch) _mm_prefetch(reinterpret_cast<const char*>(row + PREFETCH_BLOCKS * NB * K), _MM_HINT_T0);
      const __m256i pairs = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(row));  // 8 × (w[2i], w[2i + 1])
      w_even[j] = _mm256_castsi256_ps(_mm256_slli_epi32(pairs, 16));
      w_odd[j] = _mm256_castsi256_ps(_mm256_and_si256(pairs, top));
    }
#pragma GCC unroll 8
    for (int m = 0; m < M; ++m) {
      const __m256 xe = _mm256_loadu_ps(even + m * half + k / 2), xo = _mm256_loadu_ps(odd + m * half + k / 2);
#pragma GCC unroll 8
      for (int j = 0; j < NB; ++j) sums[m][j] = _mm256_fmadd_ps(xo, w_odd[j], _mm256_fmadd_ps(xe, w_even[j], sums[m][j]));
    }
  }
#pragma GCC unroll 8
  for (int m = 0; m < M; ++m)
#pragma GCC unroll 8
    for (int j = 0; j < NB; ++j) {
      float total = sum_of(sums[m][j]);
      for (int64_t k = K16; k < K; ++k) {
        const float w = at::BFloat16(weight[(n0 + j) * K + k], at::BFloat16::from_bits());
        total += static_cast<float>(x[m * K + k]) * w;
      }
      if (bias != nullptr) total += static_cast<float>(bias[n0 + j]);
      y[m * N + n0 + j] = at::BFloat16(total);
    }
}

// M rows of x against all of weight, split across threads by blocks of weight rows.
template <int M>
void rows_times_weight(const float* even, const float* odd, const uint16_t* weight, const at::BFloat16* x,
                       const at::BFloat16* bias, at::BFloat16* y, int64_t N, int64_t K) {
  constexpr int NB = M <= 2 ? 4 : 2;  // at most 8 accumulators, and the widened weights, in 16 registers
  const int64_t blocks = N / NB;
  at::parallel_for(0, blocks, 16, [&](int64_t begin, int64_t end) {
    for (int64_t b = begin; b < end; ++b)
      block<M, NB>(even, odd, weight, x, bias, y, b * NB, N, K, b + PREFETCH_BLOCKS < end);
  });
  for (int64_t n = blocks * NB; n < N; ++n) block<M, 1>(even, odd, weight, x, bias, y, n, N, K, false);
}
#endif

at::Tensor bf16_products(const at::Tensor& x, const at::Tensor& weight, const c10::optional<at::Tensor>& bias) {
  TORCH_CHECK(x.dim() == 2 && weight.dim() == 2, "bf16_products: x [M, K] and weight [N, K] expected, got ",
              x.sizes(), " and ", weight.sizes());
  TORCH_CHECK(x.scalar_type() == at::kBFloat16 && weight.scalar_type() == at::kBFloat16,
              "bf16_products: x and weight in bfloat16 expected");
  TORCH_CHECK(x.size(1) == weight.size(1), "bf16_products: x ", x.sizes(), " and weight ", weight.sizes(),
              " do not fit");
  TORCH_CHECK(x.size(0) <= MAX_ROWS, "bf16_products: at most ", MAX_ROWS, " rows, got ", x.size(0));
  if (bias.has_value()) {
    TORCH_CHECK(bias->dim() == 1 && bias->size(0) == weight.size(0) && bias->scalar_type() == at::kBFloat16,
                "bf16_products: a bfloat16 bias of ", weight.size(0), " expected, got ", bias->sizes());
  }
  TORCH_CHECK(x.is_meta() || supported(), "bf16_products: this CPU lacks AVX2 and FMA");
  const at::Tensor rows = x.contiguous(), w = weight.contiguous();
  const int64_t M = rows.size(0), K = rows.size(1), N = w.size(0);
  at::Tensor y = at::empty({M, N}, rows.options());
  if (x.is_meta() || M == 0) return y;  // the shape alone, for torch.compile's tracing
#if BF16_PRODUCTS
  const at::Tensor b = bias.has_value() ? bias->contiguous() : at::Tensor();
  const at::BFloat16* bp = b.defined() ? b.const_data_ptr<at::BFloat16>() : nullptr;
  const at::BFloat16* xp = rows.const_data_ptr<at::BFloat16>();
  const int64_t half = K / 2;
  std::vector<float> even(M * half), odd(M * half);
  for (int64_t m = 0; m < M; ++m)
    for (int64_t i = 0; i < half; ++i) {
      even[m * half + i] = static_cast<float>(xp[m * K + 2 * i]);
      odd[m * half + i] = static_cast<float>(xp[m * K + 2 * i + 1]);
    }
  const uint16_t* wp = reinterpret_cast<const uint16_t*>(w.const_data_ptr<at::BFloat16>());
  at::BFloat16* yp = y.mutable_data_ptr<at::BFloat16>();
  switch (M) {
    case 1: rows_times_weight<1>(even.data(), odd.data(), wp, xp, bp, yp, N, K); break;
    case 2: rows_times_weight<2>(even.data(), odd.data(), wp, xp, bp, yp, N, K); break;
    case 3: rows_times_weight<3>(even.data(), odd.data(), wp, xp, bp, yp, N, K); break;
    default: rows_times_weight<4>(even.data(), odd.data(), wp, xp, bp, yp, N, K); break;
  }
#endif
  return y;
}

}  // namespace

TORCH_LIBRARY(hf_tinygpt_bf16, m) {
  m.def("bf16_products(Tensor x, Tensor weight, Tensor? bias) -> Tensor");
  m.def("bf16_products_supported() -> bool", &supported);
  m.def("has_avx512_bf16() -> bool", &has_avx512_bf16);
}

TORCH_LIBRARY_IMPL(hf_tinygpt_bf16, CPU, m) { m.impl("bf16_products", &bf16_products); }
TORCH_LIBRARY_IMPL(hf_tinygpt_bf16, Meta, m) { m.impl("bf16_products", &bf16_products); }

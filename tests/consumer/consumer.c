/* A C program that uses flexjit as an engine would from an installed tree (find_package or
 * pkg-config; run.sh builds it both ways): a causal mask written inline, compiled for the CPU
 * backend (arch "cpu"), one varlen attention call over two sequences in bf16, checked against a
 * float64 attention computed here. Prints PASS or FAIL; exits non-zero on failure. */
#include <flexjit/flexjit.h>

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { HEADS = 4, KV_HEADS = 2, HEAD_DIM = 64, SEQS = 2 };
static const int32_t kSeqLens[SEQS] = {5, 11};

static uint16_t to_bf16(float value) { /* round to nearest even */
  uint32_t bits;
  memcpy(&bits, &value, sizeof(bits));
  bits += 0x7fff + ((bits >> 16) & 1);
  return (uint16_t)(bits >> 16);
}

static double from_bf16(uint16_t value) {
  uint32_t bits = (uint32_t)value << 16;
  float f;
  memcpy(&f, &bits, sizeof(f));
  return f;
}

static uint16_t* random_bf16(size_t count, uint32_t* state) {
  uint16_t* data = aligned_alloc(64, (count * sizeof(uint16_t) + 63) / 64 * 64);
  for (size_t i = 0; i < count; ++i) {
    *state = *state * 1664525u + 1013904223u;
    data[i] = to_bf16((float)((*state >> 8) / 8388608.0 - 1.0)); /* in [-1, 1) */
  }
  return data;
}

static int fail(fj_context* context, const char* what, fj_status status) {
  fprintf(stderr, "FAIL: %s: %s: %s\n", what, fj_status_string(status),
          context ? fj_context_last_error(context) : "");
  return 1;
}

int main(void) {
  const uint32_t version = fj_runtime_version();
  printf("flexjit runtime %u.%u.%u (header %d.%d.%d)\n", version / 10000, version / 100 % 100,
         version % 100, FJ_VERSION_MAJOR, FJ_VERSION_MINOR, FJ_VERSION_PATCH);
  if (version / 10000 != FJ_VERSION_MAJOR) {
    fprintf(stderr, "FAIL: the library's major version is not the header's\n");
    return 1;
  }

  fj_context* context = NULL;
  fj_status status = fj_context_create(&context);
  if (status != FJ_SUCCESS) return fail(NULL, "fj_context_create", status);
  const char source[] = "mask causal = q >= kv\n";
  fj_program* program = NULL;
  status = fj_program_create(context, "consumer.mask", source, strlen(source), &program);
  if (status != FJ_SUCCESS) return fail(context, "fj_program_create", status);
  fj_kernel_desc desc;
  memset(&desc, 0, sizeof(desc));
  desc.struct_size = sizeof(desc);
  desc.mask = "causal";
  desc.head_dim = HEAD_DIM;
  desc.dtype = FJ_DTYPE_BF16;
  desc.page_size = 0; /* an encoder kernel: contiguous K/V */
  desc.arch = "cpu";
  fj_kernel* kernel = NULL;
  status = fj_kernel_create(context, program, &desc, &kernel);
  if (status != FJ_SUCCESS) return fail(context, "fj_kernel_create", status);

  int32_t cu_seqlens[SEQS + 1] = {0};
  int32_t max_seq_len = 0;
  for (int s = 0; s < SEQS; ++s) {
    cu_seqlens[s + 1] = cu_seqlens[s] + kSeqLens[s];
    if (kSeqLens[s] > max_seq_len) max_seq_len = kSeqLens[s];
  }
  const int tokens = cu_seqlens[SEQS];
  uint32_t state = 12345;
  uint16_t* q = random_bf16((size_t)tokens * HEADS * HEAD_DIM, &state);
  uint16_t* k = random_bf16((size_t)tokens * KV_HEADS * HEAD_DIM, &state);
  uint16_t* v = random_bf16((size_t)tokens * KV_HEADS * HEAD_DIM, &state);
  uint16_t* out = random_bf16((size_t)tokens * HEADS * HEAD_DIM, &state);

  fj_varlen_attention_args args;
  memset(&args, 0, sizeof(args));
  args.struct_size = sizeof(args);
  args.q = q;
  args.k = k;
  args.v = v;
  args.out = out;
  args.cu_seqlens = cu_seqlens;
  args.num_tokens = tokens;
  args.num_seqs = SEQS;
  args.num_heads = HEADS;
  args.num_kv_heads = KV_HEADS;
  args.max_seq_len = max_seq_len;
  args.q_stride_token = args.out_stride_token = HEADS * HEAD_DIM;
  args.k_stride_token = args.v_stride_token = KV_HEADS * HEAD_DIM;
  args.q_stride_head = args.k_stride_head = args.v_stride_head = args.out_stride_head = HEAD_DIM;
  status = fj_varlen_attention(kernel, &args, NULL);
  if (status != FJ_SUCCESS) return fail(context, "fj_varlen_attention", status);

  /* float64 reference: softmax(q k^T / sqrt(d)) v over the keys kv <= q of the same sequence;
   * head h reads kv head h / (HEADS / KV_HEADS). */
  double worst = 0.0;
  for (int s = 0; s < SEQS; ++s) {
    for (int qi = 0; qi < kSeqLens[s]; ++qi) {
      const int row = cu_seqlens[s] + qi;
      for (int h = 0; h < HEADS; ++h) {
        const int kvh = h / (HEADS / KV_HEADS);
        double scores[64];
        double top = -INFINITY;
        for (int ki = 0; ki <= qi; ++ki) {
          double dot = 0.0;
          for (int d = 0; d < HEAD_DIM; ++d) {
            dot += from_bf16(q[(row * HEADS + h) * HEAD_DIM + d]) *
                   from_bf16(k[((cu_seqlens[s] + ki) * KV_HEADS + kvh) * HEAD_DIM + d]);
          }
          scores[ki] = dot / sqrt((double)HEAD_DIM);
          if (scores[ki] > top) top = scores[ki];
        }
        double total = 0.0;
        for (int ki = 0; ki <= qi; ++ki) {
          scores[ki] = exp(scores[ki] - top);
          total += scores[ki];
        }
        for (int d = 0; d < HEAD_DIM; ++d) {
          double want = 0.0;
          for (int ki = 0; ki <= qi; ++ki) {
            want += scores[ki] / total *
                    from_bf16(v[((cu_seqlens[s] + ki) * KV_HEADS + kvh) * HEAD_DIM + d]);
          }
          const double got = from_bf16(out[(row * HEADS + h) * HEAD_DIM + d]);
          const double error = fabs(got - want);
          if (!(error <= worst)) worst = error; /* a NaN is the worst */
        }
      }
    }
  }
  /* bf16 output: 8 bits of mantissa on values below 1. */
  const double tolerance = 1e-2;
  const int ok = worst <= tolerance;
  printf("%s: CPU causal attention, %d tokens, %d heads: max |out - float64| = %.2e (tolerance "
         "%.0e)\n",
         ok ? "PASS" : "FAIL", tokens, HEADS, worst, tolerance);

  free(q);
  free(k);
  free(v);
  free(out);
  fj_kernel_destroy(kernel);
  fj_program_destroy(program);
  fj_context_destroy(context);
  return ok ? 0 : 1;
}

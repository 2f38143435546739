// The CPU attention kernels for AVX-512 (compiled with -mavx512f -mavx512dq; run only where the CPU has them).
#define MASKPREP_ISA_NAMESPACE isa_avx512
#define MASKPREP_VECTOR_BYTES 64
#define MASKPREP_MICRO_ROWS 8
// strips of a whole 128-row tile (its scores, 64 KB, from L2): shared_question's and doc_causal's forward at 4096
// 1-3% faster than strips of 64 on a Xeon with 48 KB of L1 (each panel of K^T serves 16 register tiles of rows, not 8)
#define MASKPREP_STRIP 128
#include "attention_kernels.hpp"

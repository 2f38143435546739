// The CPU attention kernels for AVX2 + FMA (compiled with -mavx2 -mfma; run only where the CPU has them).
#define MASKPREP_ISA_NAMESPACE isa_avx2
#define MASKPREP_VECTOR_BYTES 32
#define MASKPREP_MICRO_ROWS 4
#define MASKPREP_WIDE_ROWS 6
#include "attention_kernels.hpp"

// The CPU attention kernels for AVX-512 (compiled with -mavx512f -mavx512dq; run only where the CPU has them).
#define MASKPREP_ISA_NAMESPACE isa_avx512
#define MASKPREP_VECTOR_BYTES 64
#define MASKPREP_MICRO_ROWS 8
#include "attention_kernels.hpp"

// The CPU attention kernels for any target: 16-byte vectors (SSE2 on x86-64, NEON on AArch64).
#define MASKPREP_ISA_NAMESPACE isa_generic
#define MASKPREP_VECTOR_BYTES 16
#define MASKPREP_MICRO_ROWS 4
#include "attention_kernels.hpp"

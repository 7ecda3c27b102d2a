"""CPU accelerator pieces of the engine: our narrow attention kernel (and its C++ source), the AMX GEMM
prefetch, and the inductor cache patch for frozen graphs. Each is chosen through ``EngineOptions``
and does nothing on CUDA."""

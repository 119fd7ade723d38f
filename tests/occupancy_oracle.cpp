// The oracle of tests/test_occupancy.py: NVIDIA's own occupancy calculator
// (cuda_occupancy.h, from the nvidia-cuda-runtime wheel) run on cases read
// from stdin, one per line, each giving the device's limits (from
// gpucache_ext.occupancy's table, so that both sides see the same device) and
// the launch:
//
//   major minor max_threads_per_sm regs_per_block regs_per_sm smem_per_block
//   smem_per_sm smem_per_block_optin reserved_smem_per_block
//   block registers static_smem dynamic_smem carveout(-1: none)
//   max_dynamic_smem(-1: the default limit, as numba-cuda launches; N: opted in to N bytes)
//
// For each it prints one line: the status, the blocks per SM, the limiting
// factors (a bit set), the blocks each limit allows (registers, shared memory,
// warps, blocks, barriers; INT_MAX for none), and the registers and shared
// memory allocated per block.
#include <cstdio>

#include "cuda_occupancy.h"

int main() {
    long long v[15];
    for (;;) {
        for (int i = 0; i < 15; ++i) {
            if (std::scanf("%lld", &v[i]) != 1) {
                return i == 0 ? 0 : 2;  // end of input, or a line cut short
            }
        }
        cudaOccDeviceProp prop;
        prop.computeMajor = (int)v[0];
        prop.computeMinor = (int)v[1];
        prop.maxThreadsPerBlock = 1024;
        prop.maxThreadsPerMultiprocessor = (int)v[2];
        prop.regsPerBlock = (int)v[3];
        prop.regsPerMultiprocessor = (int)v[4];
        prop.warpSize = 32;
        prop.sharedMemPerBlock = (size_t)v[5];
        prop.sharedMemPerMultiprocessor = (size_t)v[6];
        prop.numSms = 1;
        prop.sharedMemPerBlockOptin = (size_t)v[7];
        prop.reservedSharedMemPerBlock = (size_t)v[8];

        // As the runtime converts a kernel's cudaFuncAttributes when it opted
        // in (cudaFuncAttributeMaxDynamicSharedMemorySize), or as the header's
        // own default constructor leaves a kernel that did not (numba-cuda's
        // case); partitioned global caching off, one block barrier (__syncthreads).
        cudaOccFuncAttributes attributes;
        attributes.maxThreadsPerBlock = 1024;
        attributes.numRegs = (int)v[10];
        attributes.sharedSizeBytes = (size_t)v[11];
        attributes.partitionedGCConfig = PARTITIONED_GC_OFF;
        attributes.shmemLimitConfig = v[14] < 0 ? FUNC_SHMEM_LIMIT_DEFAULT : FUNC_SHMEM_LIMIT_OPTIN;
        attributes.maxDynamicSharedSizeBytes = v[14] < 0 ? 0 : (size_t)v[14];
        attributes.numBlockBarriers = 1;

        cudaOccDeviceState state;  // no cache preference; the carveout, if any
        state.carveoutConfig = (int)v[13];

        cudaOccResult result = {};
        cudaOccError status = cudaOccMaxActiveBlocksPerMultiprocessor(
            &result, &prop, &attributes, &state, (int)v[9], (size_t)v[12]);
        std::printf("%d %d %u %d %d %d %d %d %d %zu\n", (int)status, result.activeBlocksPerMultiprocessor,
                    result.limitingFactors, result.blockLimitRegs, result.blockLimitSharedMem,
                    result.blockLimitWarps, result.blockLimitBlocks, result.blockLimitBarriers,
                    result.allocatedRegistersPerBlock, result.allocatedSharedMemPerBlock);
    }
}

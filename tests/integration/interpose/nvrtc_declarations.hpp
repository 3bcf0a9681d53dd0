// tests/integration/interpose/nvrtc_declarations.hpp: the NVRTC entry points
// the test clients call, declared as NVRTC's own header would (the clients
// are built without the toolkit's headers on their include path, as a
// program that loads NVRTC by itself is).
#pragma once

#include <cstddef>

extern "C" {
typedef int nvrtcResult;
typedef void* nvrtcProgram;
nvrtcResult nvrtcCreateProgram(nvrtcProgram*, const char*, const char*, int, const char* const*, const char* const*);
nvrtcResult nvrtcDestroyProgram(nvrtcProgram*);
nvrtcResult nvrtcCompileProgram(nvrtcProgram, int, const char* const*);
nvrtcResult nvrtcGetPTXSize(nvrtcProgram, size_t*);
nvrtcResult nvrtcGetPTX(nvrtcProgram, char*);
nvrtcResult nvrtcGetCUBINSize(nvrtcProgram, size_t*);
nvrtcResult nvrtcGetCUBIN(nvrtcProgram, char*);
nvrtcResult nvrtcGetLTOIRSize(nvrtcProgram, size_t*);
nvrtcResult nvrtcGetLTOIR(nvrtcProgram, char*);
nvrtcResult nvrtcGetProgramLogSize(nvrtcProgram, size_t*);
nvrtcResult nvrtcGetProgramLog(nvrtcProgram, char*);
nvrtcResult nvrtcAddNameExpression(nvrtcProgram, const char*);
nvrtcResult nvrtcGetLoweredName(nvrtcProgram, const char*, const char**);
nvrtcResult nvrtcVersion(int*, int*);
}

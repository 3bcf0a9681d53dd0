// cli/cmd_nvcc.hpp: the compiler-launcher entry of the kcache command.
#pragma once

namespace kcache::cli {

// True when the command line is an nvcc launch: `kcache nvcc ARGS...`,
// `kcache /path/to/nvcc ARGS...` (any path as the first argument: the
// compiler, as ccache takes it), or kcache run under the name `nvcc`.
bool is_nvcc_launch(int argc, char** argv);

// Runs it (docs/nvcc.md); returns the exit status: nvcc's own, 127 when no
// nvcc can be found or started.
int run_nvcc_launch(int argc, char** argv);

}  // namespace kcache::cli

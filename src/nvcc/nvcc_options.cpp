#include "nvcc/nvcc_options.hpp"

#include <array>

namespace kcache::nvcc {

namespace {

using V = OptionValue;
using R = OptionRole;

// Every option of `nvcc --help` (CUDA 13.0), in its order.
constexpr std::array k_options = {
    // Compilation phase.
    NvccOption{"cuda", "cuda", V::none, R::phase, {}},
    NvccOption{"cubin", "cubin", V::none, R::phase, {}},
    NvccOption{"fatbin", "fatbin", V::none, R::phase, {}},
    NvccOption{"ptx", "ptx", V::none, R::phase, {}},
    NvccOption{"optix-ir", "optix-ir", V::none, R::phase, {}},
    NvccOption{"ltoir", "ltoir", V::none, R::phase, {}},
    NvccOption{"preprocess", "E", V::none, R::uncacheable, "preprocessing (-E)"},
    NvccOption{"generate-dependencies", "M", V::none, R::uncacheable, "dependencies only (-M)"},
    NvccOption{"generate-nonsystem-dependencies", "MM", V::none, R::uncacheable, "dependencies only (-MM)"},
    NvccOption{"generate-dependencies-with-compile", "MD", V::none, R::dep_full, {}},
    NvccOption{"generate-nonsystem-dependencies-with-compile", "MMD", V::none, R::dep_nonsystem, {}},
    NvccOption{"dependency-output", "MF", V::one, R::dep_file, {}},
    NvccOption{"generate-dependency-targets", "MP", V::none, R::dep_phony, {}},
    NvccOption{"compile", "c", V::none, R::phase, {}},
    NvccOption{"device-c", "dc", V::none, R::phase, {}},
    NvccOption{"device-w", "dw", V::none, R::phase, {}},
    NvccOption{"device-link", "dlink", V::none, R::uncacheable, "device link (-dlink)"},
    NvccOption{"link", "link", V::none, R::uncacheable, "link"},
    NvccOption{"lib", "lib", V::none, R::uncacheable, "library (-lib)"},
    NvccOption{"run", "run", V::none, R::uncacheable, "run (-run)"},
    // File and path specifications.
    NvccOption{"output-file", "o", V::one, R::output, {}},
    NvccOption{"pre-include", "include", V::one, R::keyed, {}},
    NvccOption{"objdir-as-tempdir", "objtemp", V::none, R::keyed, {}},
    NvccOption{"library", "l", V::one, R::keyed, {}},
    NvccOption{"define-macro", "D", V::one, R::keyed, {}},
    NvccOption{"undefine-macro", "U", V::one, R::keyed, {}},
    NvccOption{"include-path", "I", V::one, R::keyed, {}},
    NvccOption{"system-include", "isystem", V::one, R::keyed, {}},
    NvccOption{"library-path", "L", V::one, R::keyed, {}},
    NvccOption{"output-directory", "odir", V::one, R::uncacheable, "an output directory (-odir)"},
    NvccOption{"compiler-bindir", "ccbin", V::one, R::host_compiler, {}},
    NvccOption{"allow-unsupported-compiler", "allow-unsupported-compiler", V::none, R::keyed, {}},
    NvccOption{"archiver-binary", "arbin", V::one, R::keyed, {}},
    NvccOption{"cudart", "cudart", V::one, R::keyed, {}},
    NvccOption{"cudadevrt", "cudadevrt", V::one, R::keyed, {}},
    NvccOption{"libdevice-directory", "ldir", V::one, R::uncacheable, "another libdevice (-ldir)"},
    NvccOption{"target-directory", "target-dir", V::one, R::keyed, {}},
    NvccOption{"use-local-env", "use-local-env", V::none, R::keyed, {}},
    NvccOption{"force-cl-env-setup", "force-cl-env-setup", V::none, R::keyed, {}},
    // Options for specifying the behavior of the compiler/linker.
    NvccOption{"profile", "pg", V::none, R::keyed, {}},
    NvccOption{"debug", "g", V::none, R::debug_paths, {}},
    NvccOption{"device-debug", "G", V::none, R::debug_paths, {}},
    NvccOption{"generate-line-info", "lineinfo", V::none, R::debug_paths, {}},
    NvccOption{"optimization-info", "opt-info", V::one, R::keyed, {}},
    NvccOption{"optimize", "O", V::one, R::keyed, {}},
    NvccOption{"Ofast-compile", "Ofc", V::one, R::keyed, {}},
    NvccOption{"dopt", "dopt", V::one, R::keyed, {}},
    NvccOption{"dlink-time-opt", "dlto", V::none, R::keyed, {}},
    NvccOption{"lto", "lto", V::none, R::keyed, {}},
    NvccOption{"gen-opt-lto", "gen-opt-lto", V::none, R::keyed, {}},
    NvccOption{"ftemplate-backtrace-limit", "ftemplate-backtrace-limit", V::one, R::keyed, {}},
    NvccOption{"ftemplate-depth", "ftemplate-depth", V::one, R::keyed, {}},
    NvccOption{"no-exceptions", "noeh", V::none, R::keyed, {}},
    NvccOption{"shared", "shared", V::none, R::keyed, {}},
    NvccOption{"x", "x", V::one, R::keyed, {}},
    NvccOption{"std", "std", V::one, R::keyed, {}},
    NvccOption{"no-host-device-initializer-list", "nohdinitlist", V::none, R::keyed, {}},
    NvccOption{"no-host-device-move-forward", "nohdmoveforward", V::none, R::keyed, {}},
    NvccOption{"expt-relaxed-constexpr", "expt-relaxed-constexpr", V::none, R::keyed, {}},
    NvccOption{"extended-lambda", "extended-lambda", V::none, R::keyed, {}},
    NvccOption{"expt-extended-lambda", "expt-extended-lambda", V::none, R::keyed, {}},
    NvccOption{"machine", "m", V::one, R::keyed, {}},
    NvccOption{"m64", "m64", V::none, R::keyed, {}},
    // Options for passing specific phase options.
    NvccOption{"compiler-options", "Xcompiler", V::one, R::host_options, {}},
    NvccOption{"linker-options", "Xlinker", V::one, R::keyed, {}},
    NvccOption{"archive-options", "Xarchive", V::one, R::keyed, {}},
    NvccOption{"ptxas-options", "Xptxas", V::one, R::keyed, {}},
    NvccOption{"nvlink-options", "Xnvlink", V::one, R::keyed, {}},
    NvccOption{"static-global-template-stub", "static-global-template-stub", V::one, R::keyed, {}},
    NvccOption{"device-entity-has-hidden-visibility", "device-entity-has-hidden-visibility", V::one, R::keyed, {}},
    NvccOption{"forward-unknown-to-host-compiler", "forward-unknown-to-host-compiler", V::none, R::forward_unknown, {}},
    NvccOption{"forward-unknown-to-host-linker", "forward-unknown-to-host-linker", V::none, R::forward_unknown, {}},
    NvccOption{"forward-unknown-opts", "forward-unknown-opts", V::none, R::forward_unknown, {}},
    // Miscellaneous options for guiding the compiler driver.
    NvccOption{"dont-use-profile", "noprof", V::none, R::keyed, {}},
    NvccOption{"dryrun", "dryrun", V::none, R::uncacheable, "a dry run (--dryrun)"},
    NvccOption{"verbose", "v", V::none, R::uncacheable, "verbose output (-v) names the run's temporary files"},
    NvccOption{"threads", "t", V::one, R::keyed, {}},
    NvccOption{"split-compile", "split-compile", V::one, R::keyed, {}},
    NvccOption{"split-compile-extended", "split-compile-extended", V::one, R::keyed, {}},
    NvccOption{"fdevice-syntax-only", "fdevice-syntax-only", V::none, R::uncacheable, "a syntax check only"},
    NvccOption{"fdevice-time-trace", "fdevice-time-trace", V::one, R::uncacheable, "a time trace file"},
    NvccOption{"keep", "keep", V::none, R::uncacheable, "intermediate files kept (-keep)"},
    NvccOption{"keep-dir", "keep-dir", V::one, R::uncacheable, "intermediate files kept (-keep-dir)"},
    NvccOption{"save-temps", "save-temps", V::none, R::uncacheable, "intermediate files kept (-save-temps)"},
    NvccOption{"clean-targets", "clean", V::none, R::uncacheable, "cleaning (-clean)"},
    NvccOption{"time", "time", V::one, R::uncacheable, "a timing file (-time)"},
    NvccOption{"run-args", "run-args", V::one, R::uncacheable, "run (-run-args)"},
    NvccOption{"input-drive-prefix", "idp", V::one, R::keyed, {}},
    NvccOption{"dependency-drive-prefix", "ddp", V::one, R::keyed, {}},
    NvccOption{"drive-prefix", "dp", V::one, R::keyed, {}},
    NvccOption{"dependency-target-name", "MT", V::one, R::dep_target, {}},
    NvccOption{"no-align-double", "no-align-double", V::none, R::keyed, {}},
    NvccOption{"no-device-link", "nodlink", V::none, R::keyed, {}},
    // Options for steering GPU code generation.
    NvccOption{"gpu-architecture", "arch", V::one, R::keyed, {}},
    NvccOption{"gpu-code", "code", V::one, R::keyed, {}},
    NvccOption{"generate-code", "gencode", V::one, R::keyed, {}},
    NvccOption{"relocatable-device-code", "rdc", V::one, R::keyed, {}},
    NvccOption{"entries", "e", V::one, R::keyed, {}},
    NvccOption{"maxrregcount", "maxrregcount", V::one, R::keyed, {}},
    NvccOption{"use_fast_math", "use_fast_math", V::none, R::keyed, {}},
    NvccOption{"ftz", "ftz", V::one, R::keyed, {}},
    NvccOption{"prec-div", "prec-div", V::one, R::keyed, {}},
    NvccOption{"prec-sqrt", "prec-sqrt", V::one, R::keyed, {}},
    NvccOption{"fmad", "fmad", V::one, R::keyed, {}},
    NvccOption{"extra-device-vectorization", "extra-device-vectorization", V::none, R::keyed, {}},
    NvccOption{"default-stream", "default-stream", V::one, R::keyed, {}},
    NvccOption{"disable-warnings", "w", V::none, R::keyed, {}},
    NvccOption{"keep-device-functions", "keep-device-functions", V::none, R::keyed, {}},
    NvccOption{"source-in-ptx", "src-in-ptx", V::none, R::debug_paths, {}},
    NvccOption{"restrict", "restrict", V::none, R::keyed, {}},
    NvccOption{"Wreorder", "Wreorder", V::none, R::keyed, {}},
    NvccOption{"Wdefault-stream-launch", "Wdefault-stream-launch", V::none, R::keyed, {}},
    NvccOption{"Wmissing-launch-bounds", "Wmissing-launch-bounds", V::none, R::keyed, {}},
    NvccOption{"Wext-lambda-captures-this", "Wext-lambda-captures-this", V::none, R::keyed, {}},
    NvccOption{"Wno-deprecated-declarations", "Wno-deprecated-declarations", V::none, R::keyed, {}},
    NvccOption{"Wno-deprecated-gpu-targets", "Wno-deprecated-gpu-targets", V::none, R::keyed, {}},
    NvccOption{"Werror", "Werror", V::one, R::keyed, {}},
    NvccOption{"resource-usage", "res-usage", V::none, R::keyed, {}},
    NvccOption{"extensible-whole-program", "ewp", V::none, R::keyed, {}},
    NvccOption{"no-compress", "no-compress", V::none, R::keyed, {}},
    NvccOption{"qpp-config", "qpp-config", V::one, R::keyed, {}},
    NvccOption{"compile-as-tools-patch", "astoolspatch", V::none, R::keyed, {}},
    NvccOption{"list-gpu-code", "code-ls", V::none, R::uncacheable, "no compile (--list-gpu-code)"},
    NvccOption{"list-gpu-arch", "arch-ls", V::none, R::uncacheable, "no compile (--list-gpu-arch)"},
    NvccOption{"display-error-number", "err-no", V::none, R::keyed, {}},
    NvccOption{"no-display-error-number", "no-err-no", V::none, R::keyed, {}},
    NvccOption{"diag-error", "diag-error", V::one, R::keyed, {}},
    NvccOption{"diag-suppress", "diag-suppress", V::one, R::keyed, {}},
    NvccOption{"diag-warn", "diag-warn", V::one, R::keyed, {}},
    NvccOption{"host-linker-script", "hls", V::one, R::keyed, {}},
    NvccOption{"augment-host-linker-script", "aug-hls", V::none, R::keyed, {}},
    NvccOption{"relocatable-link", "r", V::none, R::uncacheable, "a relocatable link (-r)"},
    NvccOption{"brief-diagnostics", "brief-diag", V::one, R::keyed, {}},
    NvccOption{"jump-table-density", "jtd", V::one, R::keyed, {}},
    NvccOption{"relocatable-ptx", "reloc-ptx", V::none, R::keyed, {}},
    NvccOption{"device-stack-protector", "device-stack-protector", V::one, R::keyed, {}},
    NvccOption{"compress-mode", "compress-mode", V::one, R::keyed, {}},
    NvccOption{"frandom-seed", "frandom-seed", V::one, R::keyed, {}},
    NvccOption{"sanitize", "sanitize", V::one, R::keyed, {}},
    NvccOption{"jobserver", "jobserver", V::none, R::keyed, {}},
    NvccOption{"help", "h", V::none, R::uncacheable, "no compile (--help)"},
    NvccOption{"version", "V", V::none, R::uncacheable, "no compile (--version)"},
    NvccOption{"options-file", "optf", V::one, R::options_file, {}},
};

}  // namespace

const NvccOption* find_option(std::string_view name, bool double_dash) noexcept {
  for (const auto& o : k_options) {
    if (o.long_name == name) {
      return &o;
    }
  }
  if (!double_dash) {
    for (const auto& o : k_options) {
      if (o.short_name == name) {
        return &o;
      }
    }
  }
  return nullptr;
}

bool takes_joined_value(char letter) noexcept {
  switch (letter) {
    case 'I':
    case 'D':
    case 'U':
    case 'L':
    case 'l':
    case 'O':
    case 't':
      return true;
    default:
      return false;
  }
}

}  // namespace kcache::nvcc

// run_program.h: runs a helper program (gnuplot for the loss plot, blu-plan for --compile) as a
// child process, directly (posix_spawnp, no shell: arguments need no quoting), and waits for it.
#pragma once

#include <string>
#include <vector>

namespace blu::train {

// argv[0] is looked up on PATH when it has no '/'. stderr (and stdout when keep_stdout, else
// /dev/null) go to `log`. False, with why naming the program and the log, when it cannot start or
// exits non-zero; `missing_hint` is added when it was not found (e.g. how to install it).
bool run_program(const std::vector<std::string>& argv, const std::string& log, bool keep_stdout,
                 const std::string& missing_hint, std::string* why);

}  // namespace blu::train

// run_program.cpp: a helper program as a child process (run_program.h).
#include "common/run_program.h"

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>

extern char** environ;

namespace blu::train {

bool run_program(const std::vector<std::string>& argv, const std::string& log, bool keep_stdout,
                 const std::string& missing_hint, std::string* why) {
  const std::string& program = argv.at(0);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 2, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (keep_stdout) {
    posix_spawn_file_actions_adddup2(&fa, 2, 1);
  } else {
    posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
  }
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = 0;
  const int rc = posix_spawnp(&pid, program.c_str(), &fa, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  const std::string not_found = program + " not found" + (missing_hint.empty() ? "" : " (" + missing_hint + ")");
  if (rc != 0) {
    *why = not_found;
    return false;
  }
  int status = 0;
  if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    // posix_spawnp may report a missing program as exit status 127 of the child.
    *why = (WIFEXITED(status) && WEXITSTATUS(status) == 127) ? not_found : program + " failed (see " + log + ")";
    return false;
  }
  return true;
}

}  // namespace blu::train

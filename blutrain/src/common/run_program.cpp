// run_program.cpp: a helper program as a child process (run_program.h).
#include "common/run_program.h"

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

extern char** environ;

namespace blu::train {

bool run_program(const std::vector<std::string>& argv, const std::string& log, bool keep_stdout,
                 const std::string& missing_hint, std::string* why) {
  const std::string& program = argv.at(0);
  // The log is opened here, not in the child: a log that cannot be written is said as such (a
  // child failing to open it would exit 127, which reads as "not found").
  const int log_fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (log_fd < 0) {
    *why = "cannot write " + log + " for " + program + ": " + std::strerror(errno);
    return false;
  }
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, log_fd, 2);
  if (keep_stdout) {
    posix_spawn_file_actions_adddup2(&fa, log_fd, 1);
  } else {
    posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
  }
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = 0;
  const int rc = posix_spawnp(&pid, program.c_str(), &fa, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  ::close(log_fd);
  const std::string not_found = program + " not found" + (missing_hint.empty() ? "" : " (" + missing_hint + ")");
  if (rc != 0) {
    *why = not_found;
    return false;
  }
  int status = 0;
  pid_t waited = -1;
  do {
    waited = waitpid(pid, &status, 0);
  } while (waited < 0 && errno == EINTR);
  if (waited != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    // posix_spawnp may report a missing program as exit status 127 of the child.
    *why = (WIFEXITED(status) && WEXITSTATUS(status) == 127) ? not_found : program + " failed (see " + log + ")";
    return false;
  }
  return true;
}

}  // namespace blu::train
